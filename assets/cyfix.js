/* Cytoscape caches where its container sits on the page and refreshes that only on window scroll or
   resize.  Dash re-renders things above the graphs (messages, summary cards, chips), which moves them,
   and clicks then land on the wrong element.  Drop the cache before cytoscape sees a pointer event. */
(function () {
  function refresh(ev) {
    for (let el = ev.target; el && el !== document; el = el.parentNode) {
      if (el._cyreg && el._cyreg.cy) {
        const r = el._cyreg.cy.renderer();
        if (r && r.invalidateContainerClientCoordsCache) { r.invalidateContainerClientCoordsCache(); }
        return;
      }
    }
  }
  ["mousedown", "mousemove", "touchstart", "wheel"].forEach(function (t) {
    document.addEventListener(t, refresh, true);
  });
})();

/* The computation graph opens fitted, but never below a zoom where labels are legible: a wide
   collapsed graph is shown from its top (where the forward pass starts) at that zoom, centred when it
   fits across, and the user pans or zooms out from there. */
(function () {
  const MIN_ZOOM = 0.8;  // op labels 11 px -> ~9 px on screen, group labels 13 px -> ~10 px
  function legible(cy) {
    if (!cy.nodes().length || cy.zoom() >= MIN_ZOOM) { return; }
    const bb = cy.elements().boundingBox();
    const w = cy.width();
    cy.zoom(MIN_ZOOM);
    const x = bb.w * MIN_ZOOM <= w ? (w - bb.w * MIN_ZOOM) / 2 - bb.x1 * MIN_ZOOM : 16 - bb.x1 * MIN_ZOOM;
    cy.pan({x: x, y: 16 - bb.y1 * MIN_ZOOM});
  }
  function attach() {
    const root = document.getElementById("graph");
    if (!root) { return; }
    const el = [root, ...root.querySelectorAll("*")].find(e => e._cyreg && e._cyreg.cy);
    const cy = el && el._cyreg.cy;
    if (!cy || cy.__magisLegible) { return; }
    cy.__magisLegible = true;
    cy.on("layoutstop", () => legible(cy));
    legible(cy);
  }
  setInterval(attach, 300);
})();

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

/* Every graph view opens fitted to its panel: after each layout (on open, on every expand or
   collapse) the whole graph is fitted with padding, never zoomed in past a readable size.  The views
   draw few enough elements (collapsed module groups, a neighbourhood of the dominator tree, the top of
   the F-Tree) that the fitted zoom keeps labels legible. */
(function () {
  const VIEWS = {"graph": 16, "domtree": 10, "ftree": 10, "fusion-graph": 12};  // id -> padding (px)
  const MAX_FIT_ZOOM = 1.4;
  function fit(cy, pad) {
    if (!cy.nodes().length || !cy.width() || !cy.height()) { return; }
    cy.fit(undefined, pad);
    if (cy.zoom() > MAX_FIT_ZOOM) { cy.zoom(MAX_FIT_ZOOM); cy.center(); }
  }
  window.magisFit = fit;
  /* The search box's match (``search-hit``): highlight and centre it once the graph draws it (right
     away, or after the layout of the view the search expanded). */
  let pending = null;
  const FIND_ZOOM = 0.9;
  function graphCy() {
    const root = document.getElementById("graph");
    const el = root && [root, ...root.querySelectorAll("*")].find(e => e._cyreg && e._cyreg.cy);
    return el ? el._cyreg.cy : null;
  }
  function find() {
    const cy = graphCy();
    if (!pending || !cy) { return; }
    const h = pending;
    const hit = cy.nodes().filter(n => n.id().startsWith(h.tok + "-")
      && (h.group !== undefined ? n.data("group") === h.group : n.data("nid") === h.nid));
    if (!hit.length) { return; }
    pending = null;
    cy.nodes(".found").removeClass("found");
    hit.addClass("found");
    if (cy.zoom() < FIND_ZOOM) { cy.zoom(FIND_ZOOM); }  // close enough to read it and its neighbours
    cy.center(hit);
  }
  window.magisFind = function (hit) { pending = hit || null; find(); };
  function attach() {
    for (const id of Object.keys(VIEWS)) {
      const root = document.getElementById(id);
      if (!root) { continue; }
      const el = [root, ...root.querySelectorAll("*")].find(e => e._cyreg && e._cyreg.cy);
      const cy = el && el._cyreg.cy;
      if (!cy || cy.__magisFit) { continue; }
      cy.__magisFit = true;
      cy.on("layoutstop", () => { fit(cy, VIEWS[id]); if (id === "graph") { find(); } });
      fit(cy, VIEWS[id]);
    }
  }
  setInterval(attach, 300);
})();

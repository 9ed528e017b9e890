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

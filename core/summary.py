"""Graph summary used by ``magis info`` and the benchmarks: sizes, baseline peak, latency, hot-spots.

It sits above analysis, scheduling, cost and simulation (it runs all of them), so none of those
depends on it.
"""

from __future__ import annotations

from typing import Any

from .cost.model import AnalyticCost, CostModel
from .ir import ops
from .ir.graph import Graph, NodeKind
from .schedule.baselines import TracedOrder
from .simulate import simulate


def ops_without_dim_links(g: Graph) -> list[str]:
    """The ops of ``g`` the registry has no dim links for (they block fission through them)."""
    missing = set()
    for n in g:
        if n.kind == NodeKind.OP and ops.dim_links(ops.ctx(n, g.tensor)) is None:
            missing.add(n.op)
    return sorted(missing)


def graph_info(g: Graph, device: str = "rtx3090", top: int = 5, cost: CostModel | None = None) -> dict[str, Any]:
    """Summary of ``g`` under its traced order; latency from ``cost`` (default: the analytic model
    of ``device``)."""
    order = TracedOrder().order(g)
    sim = simulate(g, order, cost or AnalyticCost(device))
    hot = sim.hotspots()
    def row(s):
        node = g[s.root.node]
        t = g.tensor(s.root)
        return {"name": node.name if s.root.index == 0 else f"{node.name}[{s.root.index}]",
                "bytes": s.nbytes, "kind": s.kind, "shape": list(t.shape), "dtype": t.dtype,
                "module": node.module, "alloc_step": s.alloc, "free_step": s.free}
    non_resident = [s for s in hot if s.alloc >= 0]
    return {
        "name": g.name,
        "mode": g.meta.get("mode", "unknown"),
        "device": "measured:" + cost.torch_device if hasattr(cost, "torch_device") else device,
        "nodes": len(order),
        "placeholders": len(g.placeholders()),
        "weight_bytes": g.weight_bytes(),
        "input_bytes": sum(n.out.nbytes for n in g.placeholders()) - g.weight_bytes(),
        "baseline_peak_bytes": sim.peak,
        "baseline_peak_step": sim.memory.peak_steps[0] if sim.memory.peak_steps else None,
        "latency_seconds": sim.latency,
        "hotspot_count": len(hot),
        "hotspot_bytes": sum(s.nbytes for s in hot),
        "hotspots": [row(s) for s in non_resident[:top]],
        "ops_without_dim_links": ops_without_dim_links(g),
    }

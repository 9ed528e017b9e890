"""Graph summary used by ``magis info`` and the benchmarks: sizes, baseline peak, latency, hot-spots.

It sits above analysis, scheduling, cost and simulation (it runs all of them), so none of those
depends on it.
"""

from __future__ import annotations

from typing import Any

from .analysis.lifetimes import resident_floor
from .cost.devices import DEFAULT_PROFILE
from .cost.model import AnalyticCost, CostModel
from .fmt import format_bytes
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


def graph_info(g: Graph, device: str = DEFAULT_PROFILE, top: int = 5, cost: CostModel | None = None) -> dict[str, Any]:
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
        **floor_info(g, sim.peak),
    }


# what the kinds of the resident floor are called in a sentence, in the order they are listed
FLOOR_WORDS = {"weight": "weights", "optimizer_state": "optimizer state", "gradient": "gradients",
               "input": "inputs", "output": "outputs", "activation": "other outputs"}


def floor_info(g: Graph, peak: int) -> dict[str, Any]:
    """The resident floor of ``g`` (``analysis.lifetimes.resident_floor``) against ``peak``: its bytes,
    bytes by tensor kind and its ratio to the peak."""
    floor, by_kind = resident_floor(g)
    return {"resident_floor_bytes": floor, "resident_floor_by_kind": by_kind,
            "resident_floor_ratio": floor / peak if peak else 1.0}


def floor_parts(by_kind: dict[str, int], floor: int, with_bytes: bool = True, share: float = 0.01) -> str:
    """The floor's kinds as a list, in ``FLOOR_WORDS``' order: "weights 1.2 MiB, gradients 1.2 MiB, inputs 4 KiB"
    (``with_bytes=False``: "weights, gradients and inputs").  Kinds under ``share`` of the floor (the
    scalar loss) are left out unless nothing else is there."""
    rank = {k: i for i, k in enumerate(FLOOR_WORDS)}
    kinds = sorted(by_kind.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))
    shown = [(k, b) for k, b in kinds if b >= share * floor] or [max(kinds, key=lambda kv: kv[1])]
    words = [FLOOR_WORDS.get(k, k) + (f" {format_bytes(b)}" if with_bytes else "") for k, b in shown]
    if with_bytes or len(words) < 2:
        return ", ".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def floor_line(floor: int, by_kind: dict[str, int], peak: int) -> str:
    """``magis info``'s line: "resident floor: 2.1 MiB (0.97x of the peak): weights 1 MiB, gradients
    1 MiB, inputs 64 KiB -- no plan without swaps goes below it"."""
    ratio = floor / peak if peak else 1.0
    return (f"resident floor: {format_bytes(floor)} ({ratio:.2f}x of the peak): {floor_parts(by_kind, floor)} "
            f"-- no plan without swaps goes below it")


def floor_note(peak: int, floor: int, by_kind: dict[str, int], base_peak: int, near: float = 0.05) -> str | None:
    """What to tell the user when a plan's ``peak`` is within ``near`` (5%) of the floor: the rest is
    resident, so only moving it off the device helps.  None when the plan is farther from it."""
    if floor <= 0 or peak > floor * (1 + near):
        return None
    ratio = floor / base_peak if base_peak else 1.0
    return (f"the peak is {format_bytes(peak)}, the floor {format_bytes(floor)} ({ratio:.2f}x of eager: "
            f"{floor_parts(by_kind, floor, with_bytes=False)}): no activation plan can go below it; "
            f"offloading them is the lever")

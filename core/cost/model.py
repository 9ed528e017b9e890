"""Analytic per-op latency: a roofline with size-dependent efficiency.

    t(op) = launch + max( (F + F_half) / (P * e_c),  (B + B_half) / (W * e_m) )

F = FLOPs and B = bytes moved (from the ops registry), P = peak FLOP/s for the op class and dtype,
W = memory bandwidth, e_c / e_m = the best reachable fractions of peak.  F_half = P * e_c * t_half
(and likewise B_half) is the work at which an op reaches half of its best throughput, so small
ops run far below peak: achieved efficiency is e * F / (F + F_half).  Splitting an op into n parts
(fission) therefore costs n * (launch + t_half) more than the unsplit op, which is what makes
MAGIS's fission a latency/memory trade-off rather than a free lunch.

A calibrated profile (``core.cost.calibrate``) also carries a pair per op or ops category
(``DeviceProfile.op_fits``): t = launch_op + s_op * max(...), for the kinds of op whose measured
times one roofline does not describe (a CPU's convolutions, pools), and per kernel variant where
torch picks among kernels by shape (``core.cost.variants``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import ops
from ..ir.graph import EditLog, Graph, Node, NodeKind, map_refs
from .devices import DEFAULT_PROFILE, DeviceProfile, get_device
from .variants import CONV_OPS, kernel_variant

MATMUL_CATEGORIES = ("matmul", "conv")


@dataclass
class OpCost:
    flops: float
    bytes: float
    seconds: float


class CostModel:
    """Interface: seconds for one node of a graph."""

    device: DeviceProfile
    contextual = False  # whether an op's time depends on its neighbours (``affected`` says which change)

    def node_time(self, g: Graph, node: Node) -> float:
        raise NotImplementedError

    def transfer_time(self, nbytes: float) -> float:
        return self.device.launch_overhead + nbytes / self.device.host_bandwidth

    def affected(self, g: Graph, log: EditLog) -> set[int]:
        """Ids of the nodes whose time an edit journalled in ``log`` may have changed: the nodes it
        touched (an op's time depends on the op alone here; a fusion-aware model widens this)."""
        return log.touched()

    def memory_bound(self, g: Graph, node: Node) -> bool:
        """Whether op ``node`` is cheap to recompute: bound by memory traffic rather than arithmetic
        (elementwise ops, normalisations, reductions, views).  Without a roofline: every op but a
        matmul or convolution of the ops registry."""
        d = ops.get(node.op)
        return d is None or d.category not in MATMUL_CATEGORIES


class AnalyticCost(CostModel):
    def __init__(self, device: str | DeviceProfile = DEFAULT_PROFILE) -> None:
        self.device = get_device(device) if isinstance(device, str) else device
        self._cache: dict[tuple, float] = {}  # op signature -> seconds

    def op_cost(self, g: Graph, node: Node) -> OpCost:
        c = ops.ctx(node, g.tensor)
        f = ops.flops(c)
        b = ops.bytes_moved(c)
        d = ops.get(node.op)
        dev = self.device
        if d is not None and d.category in ("view",) and not any(t.nbytes for t in node.outputs):
            return OpCost(0.0, 0.0, dev.view_overhead)  # metadata only: no kernel, only the dispatch
        dtype = node.outputs[0].dtype if node.outputs else "float32"
        peak = dev.matmul_peak(dtype) if d is not None and d.category in MATMUL_CATEGORIES else dev.vector_flops
        variant = kernel_variant(g, node) if node.op in CONV_OPS and dev.fits_variants(node.op) else None
        launch, scale = dev.op_fit(node.op, d.category if d is not None else None, variant)
        return OpCost(f, b, roofline(dev, f, b, peak, launch=launch, scale=scale))

    def memory_bound(self, g: Graph, node: Node) -> bool:
        """The roofline's verdict: the op's memory time is at least its compute time (matmuls and
        convolutions are compute-bound here whatever their size, as a user keeps them)."""
        if not super().memory_bound(g, node):
            return False
        c = ops.ctx(node, g.tensor)
        f, b = ops.flops(c), ops.bytes_moved(c)
        dev = self.device
        return f / (dev.vector_flops * dev.compute_efficiency) <= b / (dev.mem_bandwidth * dev.memory_efficiency)

    def node_time(self, g: Graph, node: Node) -> float:
        if node.kind == NodeKind.PLACEHOLDER:
            return 0.0
        if node.kind in (NodeKind.STORE, NodeKind.LOAD):
            return self.transfer_time(sum(t.logical_bytes for t in node.outputs))
        if node.kind == NodeKind.FISSION and node.fission is not None:
            return fission_time(self, node)
        key = op_signature(g, node)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self.op_cost(g, node).seconds
        return t


def roofline(dev: DeviceProfile, flops: float, nbytes: float, peak: float | None = None, *,
             launch: float | None = None, scale: float = 1.0) -> float:
    """Seconds of one kernel doing ``flops`` at ``peak`` (default: the vector peak) and moving
    ``nbytes`` (the module docstring's formula); ``launch`` and ``scale``: an op's calibrated launch
    seconds and factor on the max (``DeviceProfile.op_fit``; default the profile's launch, 1)."""
    pc = (peak if peak is not None else dev.vector_flops) * dev.compute_efficiency
    pm = dev.mem_bandwidth * dev.memory_efficiency
    t_c = (flops + pc * dev.half_time) / pc if flops > 0 else 0.0
    t_m = (nbytes + pm * dev.half_time) / pm if nbytes > 0 else 0.0
    return (dev.launch_overhead if launch is None else launch) + scale * max(t_c, t_m)


def fission_time(cost: CostModel, node: Node) -> float:
    """A fission node's time under ``cost``: n times its sub-graph's ops plus the loop's slicing and
    combining (``fission_glue``).  The sub-graph does not change once built, so it is timed once per
    cost model (cached on the node's spec)."""
    spec = node.fission
    cached = getattr(spec, "_time", None)
    if cached is None or cached[0] is not cost:
        sub = spec.graph
        cached = spec._time = (cost, spec.n * sum(cost.node_time(sub, m) for m in sub.ops())
                               + fission_glue(cost.device, node))
    return cached[1]


def fission_glue(dev: DeviceProfile, node: Node) -> float:
    """Seconds of a fission loop's own work besides its parts' ops, as the exported script does it
    (``codegen.emit.ScriptWriter.emit_fission``): each full-size output allocated once (zero-filled
    when the parts are summed), and per part a slice (a view) of each split input and, per output,
    a copy of the part into its slice (a view and a copy) or an in-place add (a sum)."""
    spec = node.fission
    if spec is None:
        return 0.0
    sub = spec.graph
    once = 0.0
    per_part = dev.view_overhead * sum(d is not None for d in spec.in_dims)
    parts = [sub.tensor(r) for r in sub.outputs.values()]
    for (how, _d), full, part in zip(spec.out_combine, node.outputs, parts, strict=False):
        if how == "sum":
            once += roofline(dev, 0.0, full.logical_bytes)
            per_part += roofline(dev, part.numel, 3 * part.logical_bytes)
        else:
            once += dev.launch_overhead
            per_part += dev.view_overhead + roofline(dev, 0.0, 2 * part.logical_bytes)
    return once + spec.n * per_part


OP_CLASSES = ("compute", "memory", "view")  # what calibration fits separately (``core.cost.calibrate``)


def op_class(g: Graph, node: Node) -> str:
    """The roofline class of an op: ``view`` (metadata only: no kernel), ``compute`` (matmul and
    convolution: the matmul peak) or ``memory`` (every other op: vector FLOP/s or bandwidth)."""
    d = ops.get(node.op)
    if d is not None and d.category == "view" and not any(t.nbytes for t in node.outputs):
        return "view"
    return "compute" if d is not None and d.category in MATMUL_CATEGORIES else "memory"


def op_features(g: Graph, node: Node) -> tuple[str, float, float]:
    """(class, FLOPs, bytes moved) of an op: what the roofline's time depends on."""
    c = ops.ctx(node, g.tensor)
    return op_class(g, node), float(ops.flops(c)), float(ops.bytes_moved(c))


def op_signature(g: Graph, node: Node) -> tuple:
    """What an op's cost depends on: the op, its input and output tensors and its other arguments
    (two ops with equal signatures take equal time -- a recomputed copy costs what its original does)."""
    ins = tuple((t.shape, t.dtype, t.alias is not None) for t in map(g.tensor, node.inputs()))
    outs = tuple((t.shape, t.dtype, t.nbytes) for t in node.outputs)
    return node.op, ins, outs, repr(map_refs((node.args, node.kwargs), lambda r: None))


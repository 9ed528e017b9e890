"""Analytic per-op latency: a roofline with size-dependent efficiency.

    t(op) = launch + max( (F + F_half) / (P * e_c),  (B + B_half) / (W * e_m) )

F = FLOPs and B = bytes moved (from the ops registry), P = peak FLOP/s for the op class and dtype,
W = memory bandwidth, e_c / e_m = the best reachable fractions of peak.  F_half = P * e_c * t_half
(and likewise B_half) is the work at which an op reaches half of its best throughput, so small
ops run far below peak: achieved efficiency is e * F / (F + F_half).  Splitting an op into n parts
(fission) therefore costs n * (launch + t_half) more than the unsplit op, which is what makes
MAGIS's fission a latency/memory trade-off rather than a free lunch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import ops
from ..ir.graph import Graph, Node, NodeKind, map_refs
from .devices import DeviceProfile, get_device

MATMUL_CATEGORIES = ("matmul", "conv")


@dataclass
class OpCost:
    flops: float
    bytes: float
    seconds: float


class CostModel:
    """Interface: seconds for one node of a graph."""

    device: DeviceProfile

    def node_time(self, g: Graph, node: Node) -> float:
        raise NotImplementedError

    def transfer_time(self, nbytes: float) -> float:
        return self.device.launch_overhead + nbytes / self.device.host_bandwidth


class AnalyticCost(CostModel):
    def __init__(self, device: str | DeviceProfile = "rtx3090") -> None:
        self.device = get_device(device) if isinstance(device, str) else device
        self._cache: dict[tuple, float] = {}  # op signature -> seconds

    def op_cost(self, g: Graph, node: Node) -> OpCost:
        c = ops.ctx(node, g.tensor)
        f = ops.flops(c)
        b = ops.bytes_moved(c)
        d = ops.get(node.op)
        dev = self.device
        if d is not None and d.category in ("view",) and not any(t.nbytes for t in node.outputs):
            return OpCost(0.0, 0.0, 0.0)  # metadata only: no kernel
        dtype = node.outputs[0].dtype if node.outputs else "float32"
        peak = dev.matmul_peak(dtype) if d is not None and d.category in MATMUL_CATEGORIES else dev.vector_flops
        pc = peak * dev.compute_efficiency
        pm = dev.mem_bandwidth * dev.memory_efficiency
        t_c = (f + pc * dev.half_time) / pc if f > 0 else 0.0
        t_m = (b + pm * dev.half_time) / pm if b > 0 else 0.0
        return OpCost(f, b, dev.launch_overhead + max(t_c, t_m))

    def node_time(self, g: Graph, node: Node) -> float:
        if node.kind == NodeKind.PLACEHOLDER:
            return 0.0
        if node.kind in (NodeKind.STORE, NodeKind.LOAD):
            return self.transfer_time(sum(t.logical_bytes for t in node.outputs))
        if node.kind == NodeKind.FISSION and node.fission is not None:
            spec = node.fission  # its sub-graph does not change once built: timed once per model
            cached = getattr(spec, "_time", None)
            if cached is None or cached[0] is not self:
                sub = spec.graph
                cached = spec._time = (self, spec.n * sum(self.node_time(sub, m) for m in sub.ops()))
            return cached[1]
        key = op_signature(g, node)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self.op_cost(g, node).seconds
        return t


def op_signature(g: Graph, node: Node) -> tuple:
    """What an op's cost depends on: the op, its input and output tensors and its other arguments
    (two ops with equal signatures take equal time -- a recomputed copy costs what its original does)."""
    ins = tuple((t.shape, t.dtype, t.alias is not None) for t in map(g.tensor, node.inputs()))
    outs = tuple((t.shape, t.dtype, t.nbytes) for t in node.outputs)
    return node.op, ins, outs, repr(map_refs((node.args, node.kwargs), lambda r: None))


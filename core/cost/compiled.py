"""A fusion-aware cost model: what ``torch.compile`` (Inductor) charges, on the analytic roofline.

Inductor runs matmuls and convolutions as library kernels and generates its own kernels for every
other op, fusing chains of them: a pointwise op, a reduction, a normalisation, a copy or an
indexing op reads its producer's value in registers when the producer is fused with it, and an
intermediate that no kernel outside the chain reads is never written to memory.  Eager PyTorch pays
each op's full memory traffic and one launch per op; a compiled step pays them per fused kernel.

:class:`CompiledCost` charges each op as one part of such a kernel (per op, so that every method's
plan and every search step is timed by the same ``node_time`` as under the analytic model):

* an *extern* op (matmul, convolution, an op the registry does not know, sort/top-k, CTC) costs
  what the analytic roofline says;
* a *fusible* op (every other registered op) is fused with a fusible producer of the same *phase*
  (forward, or backward -- a gradient op or a recomputed copy; Inductor compiles the forward and
  the backward as separate graphs, so no kernel spans both).  It costs
  ``max(F / P, B / W)`` at the profile's efficiencies, where B counts only the inputs read from
  outside its kernel (their producer is extern, a graph input, a host copy, a fission loop, or of
  the other phase) and the outputs written for a reader outside it (an extern op, the other phase,
  a host copy, a graph output); an op none of whose inputs comes from a fused producer starts a
  kernel and also pays the launch and the half-throughput latency of the roofline;
* a view that moves no bytes costs nothing (no dispatch in a compiled graph).

So a recomputed pointwise op read by a backward pointwise op costs reading its own inputs, not a
kernel of its own: torch's min-cut partitioner is at its design point, and every other method's
recomputation is charged the same way.  Memory is not changed: the simulator still counts every
op's output as allocated (Inductor would not allocate a fused intermediate; eager's peak under
compile is lower than the one reported).  Not modelled: horizontal fusion of independent ops,
matmul epilogue fusion (max-autotune templates), an input read twice by one kernel counted once,
CUDA graphs, and recompilation.

An op's time depends on its neighbours, so an edit that changes a node's inputs or readers changes
its neighbours' times too: :meth:`CompiledCost.affected` names the nodes to time again after an
edit (the delta evaluator and OCGGS ask for it).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..ir import ops
from ..ir.graph import EditLog, Graph, Node, NodeKind, TRef, map_refs
from ..ir.types import TensorKind
from .devices import DEFAULT_PROFILE, DeviceProfile
from .model import AnalyticCost, op_signature

# op categories of the registry that Inductor lowers to its own (fusible) kernels
FUSIBLE = frozenset({"elementwise", "reduce", "softmax", "norm", "copy", "creation", "view", "pool", "index",
                     "loss", "embedding"})
# registered ops Inductor runs as fallbacks (library kernels): never fused
EXTERN_OPS = frozenset({"aten.sort.default", "aten.sort.stable", "aten.topk.default", "aten._ctc_loss.Tensor",
                        "aten._ctc_loss_backward.Tensor", "aten._ctc_loss.default",
                        "aten._ctc_loss_backward.default"})


SIGNATURES = 1_000_000  # op signatures kept (``CompiledCost._signature``) before the cache starts afresh
_FUSIBLE: dict[str, bool] = {}  # op -> fusible
_VIEWS: dict[str, bool] = {}  # op -> of the registry's view category


def fusible(node: Node) -> bool:
    """Whether Inductor generates ``node``'s kernel (and may fuse it with its neighbours)."""
    if node.kind != NodeKind.OP:
        return False
    f = _FUSIBLE.get(node.op)
    if f is None:
        d = ops.get(node.op)
        f = _FUSIBLE[node.op] = node.op not in EXTERN_OPS and d is not None and d.category in FUSIBLE
    return f


def phase(node: Node) -> str:
    """``"backward"`` for a gradient op or a recomputed copy, ``"forward"`` otherwise."""
    if node.recompute_of is not None or any(t.kind == TensorKind.GRADIENT for t in node.outputs):
        return "backward"
    return "forward"


def is_view(node: Node) -> bool:
    """A metadata-only op: every output aliases an input and owns no bytes."""
    if node.kind != NodeKind.OP:
        return False
    v = _VIEWS.get(node.op)
    if v is None:
        d = ops.get(node.op)
        v = _VIEWS[node.op] = d is not None and d.category == "view"
    return v and not any(t.nbytes for t in node.outputs)


class CompiledCost(AnalyticCost):
    """The analytic roofline with Inductor's fusion (module docstring)."""

    contextual = True

    def __init__(self, device: str | DeviceProfile = DEFAULT_PROFILE) -> None:
        super().__init__(device)
        self._fused: dict[tuple, float] = {}  # (signature, read mask, write mask, starts) -> seconds
        self._outs: dict[int, tuple[dict, set[TRef]]] = {}  # id(graph) -> (its outputs, their refs and roots)
        self._sigs: dict[int, tuple] = {}  # node id -> (node, its args, its kwargs, op_signature)

    # ---- the neighbourhood --------------------------------------------------------------------
    def _source(self, g: Graph, ref: TRef) -> Node:
        """The node whose kernel computes the value ``ref`` reads (views followed to their base)."""
        node = g.nodes[ref.node]
        while is_view(node):
            ins = node.inputs()
            if not ins:
                break
            node = g.nodes[ins[0].node]
        return node

    def _fused_with(self, a: Node, b: Node) -> bool:
        return fusible(a) and fusible(b) and not is_view(a) and phase(a) == phase(b)

    def _read_outside(self, g: Graph, node: Node, ref: TRef, depth: int = 0) -> bool:
        """Whether output ``ref`` of ``node`` is read outside ``node``'s kernel (through views)."""
        for u in g.users(ref.node):
            reader = g.nodes[u]
            if ref not in reader.inputs():
                continue
            if is_view(reader) and depth < 16:
                if any(self._read_outside(g, node, TRef(u, j), depth + 1) for j in range(len(reader.outputs))):
                    return True
                continue
            if not self._fused_with(node, reader) and not (is_view(reader) and depth >= 16):
                return True
        return False

    def node_time(self, g: Graph, node: Node) -> float:
        if node.kind != NodeKind.OP or not fusible(node):
            return super().node_time(g, node)
        if is_view(node):
            return 0.0
        ins = node.inputs()
        reads = tuple(not self._fused_with(self._source(g, r), node) for r in ins)
        outs = self._outputs(g)
        writes = tuple(TRef(node.id, j) in outs or self._read_outside(g, node, TRef(node.id, j))
                       for j in range(len(node.outputs)))
        starts = all(reads)
        key = (self._signature(g, node), reads, writes, starts)
        t = self._fused.get(key)
        if t is None:
            t = self._fused[key] = self._fused_time(g, node, ins, reads, writes, starts)
        return t

    def _fused_time(self, g: Graph, node: Node, ins: tuple[TRef, ...], reads: tuple[bool, ...],
                    writes: tuple[bool, ...], starts: bool) -> float:
        dev = self.device
        f = float(ops.flops(ops.ctx(node, g.tensor)))
        b = sum(g.tensor(r).logical_bytes for r, rd in zip(ins, reads, strict=True) if rd)
        b += sum(t.logical_bytes for t, w in zip(node.outputs, writes, strict=True) if w)
        pc = dev.vector_flops * dev.compute_efficiency
        pm = dev.mem_bandwidth * dev.memory_efficiency
        t = max(f / pc, b / pm)
        if starts:
            t += dev.launch_overhead + dev.half_time
        return t

    def _signature(self, g: Graph, node: Node) -> tuple:
        """``op_signature`` of ``node``, kept while its arguments stay the same objects (they are
        assigned, never mutated: ``Node``)."""
        hit = self._sigs.get(node.id)
        if hit is not None and hit[0] is node and hit[1] is node._args and hit[2] is node._kwargs:
            return hit[3]
        if len(self._sigs) > SIGNATURES:
            self._sigs.clear()
        sig = op_signature(g, node)
        self._sigs[node.id] = (node, node._args, node._kwargs, sig)
        return sig

    def _outputs(self, g: Graph) -> set[TRef]:
        """The graph's outputs and the storages they live in (cached while the outputs stay the same)."""
        hit = self._outs.get(id(g))
        if hit is None or hit[0] != g.outputs:
            refs = set(g.outputs.values()) | {g.storage_root(r) for r in g.outputs.values()}
            hit = self._outs[id(g)] = (dict(g.outputs), refs)
            if len(self._outs) > 64:
                self._outs.pop(next(iter(self._outs)))
        return hit[1]

    # ---- what an edit re-times ----------------------------------------------------------------
    def affected(self, g: Graph, log: EditLog) -> set[int]:
        """The nodes of ``g`` whose time an edit journalled in ``log`` may have changed: those it
        touched and their neighbours before and after it (producers and readers, through views)."""
        seeds = set(log.touched())
        for e in log.edits:
            if e.kind == "erase" and e.node is not None:
                seeds.update(r.node for r in e.node.inputs())
            elif e.kind == "args" and e.old is not None:
                found: list[TRef] = []
                map_refs(e.old, found.append)
                seeds.update(r.node for r in found)
        return self.neighbourhood(g, seeds)

    def neighbourhood(self, g: Graph, seeds: Iterable[int]) -> set[int]:
        """``seeds`` present in ``g`` with what their times depend on and what depends on theirs: their
        producers and readers, and through a view the view's own producers (up) or readers (down)."""
        out: set[int] = set()
        walked: tuple[set[int], set[int]] = (set(), set())  # expanded upwards, downwards
        for v in seeds:
            if v not in g.nodes:
                continue
            out.add(v)
            for step, seen in ((g.preds, walked[0]), (g.users, walked[1])):
                todo = list(step(v))
                while todo:
                    w = todo.pop()
                    if w in seen or w not in g.nodes:
                        continue
                    seen.add(w)
                    out.add(w)
                    if is_view(g.nodes[w]):
                        todo.extend(step(w))
        return {v for v in out if g.nodes[v].kind != NodeKind.PLACEHOLDER}

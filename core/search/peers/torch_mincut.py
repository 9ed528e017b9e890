"""torch's own rematerialisation: AOTAutograd's min-cut partitioner
(``torch._functorch.partitioners.min_cut_rematerialization_partition``, the default of
``torch.compile`` training; its memory budget is ``torch._functorch.config.activation_memory_budget``,
solved by the knapsack "dp" solver).

The knapsack weighs each op it may recompute by ``partitioners.estimate_runtime``, which reads
``config.activation_memory_budget_runtime_estimator``: torch's default ``"flops"`` counts FLOPs, so
memory-bound ops look free.  ``estimator="ours"`` (the default) passes a
``torch._inductor.custom_graph_pass.CustomRuntimeEstimator`` there instead
(:class:`CostModelEstimator`): each fx node is timed by our cost model's ``node_time`` of the node of
the same name.  Only the knapsack uses the estimate: torch's min-cut itself (budget 1, and the
"aggressive" cuts it tries first below 1) recomputes pointwise ops and norms by its own rules,
assuming Inductor fuses them.  So every point reports two latencies: ``Plan.metrics.latency``
charges each recomputation its full cost, ``stats["latency_fused"]`` charges nothing for a
recomputed pointwise op (:func:`fused_latency`), as when Inductor fuses it into its consumer.

The joint graph is built once per run and deep-copied for each budget (the partitioner runs DCE
on it in place); the budgets are 0 to 1 in steps of 0.05, run coarse to fine (1, 0, 0.5, 0.75, 0.25, ...:
``common.coarse_to_fine``) so a time budget that ends early thins the sweep evenly.

torch runs on the joint forward+backward graph built from our graph itself (:func:`joint_from_graph`:
every fx node calls our node's aten op under our node's name, with fake-tensor values), so a graph
file alone -- an upload, with no model code -- gets torch's min-cut too; the backward's seed
``ones_like(loss)`` becomes the ``tangents_1`` input the partitioner expects.  Its decision -- which forward values the backward graph receives (saved) and which
forward ops it runs again (recomputed) -- is mapped by name onto our graph: each recomputed op
gets one recomputed instance that the backward ops torch placed in the backward read, through
our ``remat`` rule (``common.two_instance_decision``).  CSE is off by default so that the
partitioner sees our graph node for node.  The budget is a fraction of saved-activation memory,
not of the peak: the simulated peaks need not be monotonic in it.  Nodes that cannot be mapped, or
recomputed ops our rule cannot recompute (random ops), are listed in ``Plan.stats`` and left as
saved.
"""

from __future__ import annotations

import copy
import operator
import time
from collections import Counter
from typing import Any

from ...cost.model import CostModel
from ...ir import ops as ops_registry
from ...ir.graph import Graph, Node, NodeKind, TRef
from ...simulate import simulate
from .base import Method
from .common import (
    Failure,
    Realised,
    candidates,
    coarse_to_fine,
    forward_ops,
    make_plan,
    own_bytes,
    realise,
    two_instance_decision,
)

BUDGETS = tuple(round(1.0 - 0.05 * i, 2) for i in range(21))  # 1.0, 0.95, ..., 0.05, 0.0
ESTIMATORS = ("ours", "flops")  # the knapsack's runtimes: our cost model, or torch's FLOP count
FUSIBLE = ("elementwise", "copy")  # ops registry categories Inductor fuses into their consumer


def joint_from_graph(g: Graph):
    """(joint fx GraphModule with a ``tangents_1`` input, number of forward outputs, names of our ops)
    of ``g``, which needs no model code: an fx graph calling the same aten op, node for
    node and name for name, with fake-tensor values computed by running each op under one
    ``FakeTensorMode``.  Placeholders become ``primals_<k>`` and the backward's seed
    ``ones_like(loss)`` the ``tangents_1`` input the partitioner expects; the outputs are the updated
    buffers and the loss (the forward's), then the gradients and any other output."""
    import torch
    import torch.fx as fx
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ...frontend.fake_kernels import capture_kernels
    from ...ir.torch_bridge import materialize, resolve_op, torch_dtype

    if any(n.kind not in (NodeKind.PLACEHOLDER, NodeKind.OP) or n.recompute_of is not None for n in g):
        raise ValueError("torch_mincut runs on an imported graph, not on one with fission, swap or "
                         "recomputed nodes")
    loss = g.outputs.get("loss")
    if loss is None:
        raise ValueError("torch_mincut needs a training graph (one with a 'loss' output)")
    seeds = [n.id for n in g.ops() if n.op == "aten.ones_like.default" and n.inputs() == (loss,)]
    if len(seeds) != 1:
        raise ValueError("the graph has no ones_like(loss) backward seed")
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    graph = fx.Graph()
    env: dict[TRef, Any] = {}  # our tensor -> its fx node
    vals: dict[TRef, Any] = {}  # our tensor -> its fake value

    def bind(ref: TRef, node, val) -> None:
        node.meta["val"] = vals[ref] = val
        env[ref] = node

    def empty(t):
        with mode:
            return torch.empty(t.shape, dtype=torch_dtype(t.dtype))

    for k, n in enumerate(g.placeholders()):
        bind(TRef(n.id, 0), graph.placeholder(f"primals_{k + 1}"), empty(n.outputs[0]))
    with capture_kernels():  # the fake kernels capture gives ops torch has none for (CTC loss)
        for n in g.ops():  # the traced order: an imported graph's node order
            v = n.id
            if v == seeds[0]:
                bind(TRef(v, 0), graph.placeholder("tangents_1"), empty(n.outputs[0]))
                continue
            target = resolve_op(n.op)
            with mode:
                out = target(*materialize(n.args, vals.__getitem__, "cpu"),
                             **materialize(n.kwargs, vals.__getitem__, "cpu"))
            node = graph.call_function(target, tuple(materialize(n.args, env.__getitem__, "cpu")),
                                       materialize(n.kwargs, env.__getitem__, "cpu"), name=n.name)
            if out is None:  # an op without results (``_assert_tensor_metadata``): no value, as torch leaves it
                continue
            if isinstance(out, (tuple, list)):
                node.meta["val"] = out
                for j, val in enumerate(out[:len(n.outputs)]):
                    bind(TRef(v, j), graph.call_function(operator.getitem, (node, j)), val)
            else:
                bind(TRef(v, 0), node, out)
    buffers = [r for key, r in g.outputs.items() if key.startswith("buffer:")]
    rest = [r for key, r in g.outputs.items() if key != "loss" and not key.startswith("buffer:")]
    graph.output(tuple(env[r] for r in [*buffers, loss, *rest]))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    return gm, len(buffers) + 1, {n.name for n in g.ops()}


def _fx_bytes(node) -> int:
    """Bytes of the tensors an fx node reads and writes (its ``meta['val']`` and its inputs')."""
    import torch
    from torch.utils._pytree import tree_leaves

    vals = [a.meta.get("val") for a in node.all_input_nodes] + tree_leaves(node.meta.get("val"))
    return sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))


def cost_model_estimator(g: Graph, cost: CostModel):
    """A ``torch._inductor.custom_graph_pass.CustomRuntimeEstimator`` that times fx nodes with
    ``cost`` (:class:`CostModelEstimator`); built here so that torch is imported only when needed."""
    from torch._inductor.custom_graph_pass import CustomRuntimeEstimator

    class CostModelEstimator(CustomRuntimeEstimator):
        """torch's knapsack runtime of an fx node (``partitioners.estimate_runtime`` with
        ``config.activation_memory_budget_runtime_estimator`` set to this object):
        ``cost.node_time`` of the node of ``g`` with the fx node's name, in microseconds (the dp
        solver keeps runtimes in float32).  A node ``g`` does not have is timed as a memory-bound
        kernel of the bytes it reads and writes (``unmapped`` lists them)."""

        def __init__(self) -> None:
            self.by_name: dict[str, Node] = {n.name: n for n in g.ops()}
            self.calls = 0
            self.unmapped: list[str] = []

        def __call__(self, node) -> float:
            self.calls += 1
            ours = self.by_name.get(node.name)
            if ours is not None:
                return cost.node_time(g, ours) * 1e6
            self.unmapped.append(node.name)
            dev = cost.device
            return (dev.launch_overhead + _fx_bytes(node) / (dev.mem_bandwidth * dev.memory_efficiency)) * 1e6

        def uuid(self) -> Any:
            return ("magis-cost-model", type(cost).__name__, cost.device.name)

    return CostModelEstimator()


def partition(joint: tuple, budget: float, *, solver: str = "dp", cse: bool = False, estimator: Any = "flops"):
    """torch's (forward module, backward module) at ``budget`` on a copy of ``joint`` (what
    :func:`joint_from_graph` returns); ``estimator``: the knapsack's runtime estimator
    (``config.activation_memory_budget_runtime_estimator``: ``"flops"`` or a
    ``CustomRuntimeEstimator``, e.g. :func:`cost_model_estimator`)."""
    import torch._functorch.config as fconfig
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    gm, n_fwd, _ = joint
    gm = copy.deepcopy(gm)  # the partitioner edits the joint graph in place (DCE, CSE)
    with fconfig.patch(activation_memory_budget=budget, activation_memory_budget_solver=solver, cse=cse,
                       activation_memory_budget_runtime_estimator=estimator):
        fw, bw = min_cut_rematerialization_partition(gm, None, num_fwd_outputs=n_fwd)
    return fw, bw


class _FusedRecompute(CostModel):
    """``base``, but the nodes in ``free`` take no time."""

    def __init__(self, base: CostModel, free: set[int]) -> None:
        self.base, self.free, self.device = base, free, base.device

    def node_time(self, g: Graph, node: Node) -> float:
        return 0.0 if node.id in self.free else self.base.node_time(g, node)

    def transfer_time(self, nbytes: float) -> float:
        return self.base.transfer_time(nbytes)


def fused_latency(r: Realised, cost: CostModel) -> tuple[float, int]:
    """(latency of ``r`` with its recomputed pointwise ops fused, how many were): a recomputed copy
    of an op of the ``FUSIBLE`` categories (elementwise, copy) runs inside the kernel of its one
    reader, as Inductor fuses pointwise producers into their consumer, so it costs no launch and no
    memory traffic of its own -- it takes no time.  (The consumer reads the copy's inputs instead of
    its output: as many bytes for a unary op, so this is the fused latency of an ideal Inductor.)
    Norms, reductions and matmuls recomputed keep their full cost."""
    h = r.graph
    free = set()
    for v in r.order:
        n = h.nodes[v]
        d = ops_registry.get(n.op) if n.recompute_of is not None else None
        if d is not None and d.category in FUSIBLE:
            free.add(v)
    return simulate(h, r.order, _FusedRecompute(cost, free)).latency, len(free)


def _kind(op: str) -> str:
    """An op's name without namespace and overload (``aten.addmm.default`` -> ``addmm``)."""
    parts = op.split(".")
    return parts[1] if len(parts) == 3 else op


def _names(gm) -> tuple[set[str], list[str]]:
    """(names of the ops a module runs, names of its placeholders); a getitem is its source op."""
    ops, phs = set(), []
    for n in gm.graph.nodes:
        if n.op == "call_function":
            src = n.args[0] if n.target is operator.getitem else n
            ops.add(src.name)
        elif n.op == "placeholder":
            phs.append(n.name)
    return ops, phs


class TorchMinCut(Method):
    name = "torch_mincut"
    label = "torch min-cut"
    colour = "#16a34a"
    symbol = "triangle-up"
    family = "peer"
    paper = "PyTorch AOTAutograd min_cut_rematerialization_partition (activation_memory_budget)"

    def _run(self, g, cost, *, time_budget, progress, budgets=BUDGETS, solver="dp", cse=False,
             estimator="ours", **_):
        """``estimator``: the knapsack's runtimes, ``"ours"`` (``cost``, :func:`cost_model_estimator`)
        or ``"flops"`` (torch's default)."""
        if estimator not in ESTIMATORS:
            raise ValueError(f"torch_mincut's estimator is one of {', '.join(ESTIMATORS)}, not {estimator!r}")
        t0 = time.perf_counter()
        joint = joint_from_graph(g)  # once; copied per budget
        trace_s = time.perf_counter() - t0
        est = cost_model_estimator(g, cost) if estimator == "ours" else "flops"
        progress(f"torch_mincut: joint graph built ({trace_s:.1f} s)")
        by_name = {n.name: n.id for n in g.ops()}
        fwd = forward_ops(g)
        cand = candidates(g)
        plans, failures = [], []
        for b in coarse_to_fine(sorted(budgets, reverse=True)):  # the whole range first, then finer
            label = f"budget {b:g}"
            if time.perf_counter() - t0 > time_budget:
                failures.append(Failure(label, f"time budget {time_budget:g} s spent"))
                continue
            t1 = time.perf_counter()
            try:
                fw, bw = partition(joint, b, solver=solver, cse=cse, estimator=est)
            except Exception as e:  # noqa: BLE001 -- torch's failure is this point's failure
                failures.append(Failure(label, f"torch's partitioner failed: {type(e).__name__}: {str(e)[:120]}"))
                continue
            torch_s = time.perf_counter() - t1
            fw_ops, _ = _names(fw)
            bw_ops, bw_in = _names(bw)
            unmapped = sorted(x for x in fw_ops | bw_ops if x not in by_name)
            rec_names = sorted(x for x in fw_ops & bw_ops if x in by_name)
            recompute = {by_name[x] for x in rec_names if by_name[x] in fwd}
            not_ours = sorted(g.nodes[v].name for v in recompute - cand)
            recompute &= cand
            readers = {by_name[x] for x in bw_ops if x in by_name} - recompute
            saved = {by_name[x] for x in bw_in if x in by_name}
            d = two_instance_decision(g, recompute, readers)
            r = realise(g, d)
            fused, n_fused = fused_latency(r, cost)
            kinds = Counter(_kind(g.nodes[by_name[x]].op) for x in rec_names)
            plans.append(make_plan(
                self.name, label, r, cost, activation_memory_budget=b, solver=solver, cse=cse,
                estimator=estimator, latency_fused=fused, fused_recomputations=n_fused,
                recomputed_ops=dict(sorted(kinds.items())), recomputed_names=rec_names,
                trace_seconds=round(trace_s, 3), torch_seconds=round(torch_s, 3), saved_values=len(bw_in) - 1,
                saved_activation_bytes=sum(own_bytes(g, v) for v in saved if v in fwd),
                recomputed_by_torch=len(rec_names), unmapped=unmapped[:20], unmapped_count=len(unmapped),
                not_recomputable=not_ours))
            progress(f"torch_mincut {label}: {len(rec_names)} ops recomputed by torch, "
                     f"{len(bw_in) - 1} saved values ({torch_s:.1f} s)")
        if estimator == "ours" and est.unmapped:
            for p in plans:
                p.stats["estimated_unmapped"] = sorted(set(est.unmapped))[:20]
        plans.sort(key=lambda p: -p.stats["activation_memory_budget"])
        failures.sort(key=lambda f: -float(f.label.split()[-1]))
        return plans, failures


__all__ = ["BUDGETS", "ESTIMATORS", "FUSIBLE", "TorchMinCut", "cost_model_estimator", "fused_latency",
           "joint_from_graph", "partition"]

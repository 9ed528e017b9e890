"""torch's own rematerialisation: AOTAutograd's min-cut partitioner
(``torch._functorch.partitioners.min_cut_rematerialization_partition``, the default of
``torch.compile`` training; its memory budget is ``torch._functorch.config.activation_memory_budget``,
solved by the knapsack "dp" solver over FLOP-estimated runtimes).

torch runs on the joint forward+backward graph of the workload, traced again exactly as our
importer traces it (AOTAutograd ``aot_export_module``, so every fx node has the name of our node),
with the backward's seed ``ones_like(loss)`` turned into the ``tangents_1`` input the partitioner
expects.  Its decision -- which forward values the backward graph receives (saved) and which
forward ops it runs again (recomputed) -- is mapped by name onto our graph: each recomputed op
gets one recomputed instance that the backward ops torch placed in the backward read, through
our ``remat`` rule (``common.two_instance_decision``).  CSE is off by default so that the
partitioner sees our graph node for node.  The budget is a fraction of saved-activation memory,
not of the peak: the simulated peaks need not be monotonic in it.  Nodes that cannot be mapped, or
recomputed ops our rule cannot recompute (random ops), are listed in ``Plan.stats`` and left as
saved.
"""

from __future__ import annotations

import operator
import time
from typing import Any

from .base import Peer
from .common import Failure, candidates, forward_ops, make_plan, own_bytes, realise, two_instance_decision

BUDGETS = (1.0, 0.8, 0.5, 0.3, 0.1, 0.0)


def joint_graph(workload: Any, traced_as: str = "eager"):
    """(joint fx GraphModule with a ``tangents_1`` input, number of forward outputs, names of the
    joint graph's ops, the seed's included) of a workload (``module``, ``inputs``, ``loss_fn``),
    traced as ``core.frontend.torch_import`` traces it."""
    import contextlib

    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    from ...frontend.torch_import import _trace, _TrainStep, _unused_parameters, export_tracing_state
    from ...frontend.workload import workload_fns

    loss_fn, _ = workload_fns(workload)
    wrapper = _TrainStep(workload.module, loss_fn)
    state = export_tracing_state if traced_as == "export" else contextlib.nullcontext
    with state():
        try:
            gm, sig = _trace(wrapper, tuple(workload.inputs), True)
        except Exception as e:  # noqa: BLE001 -- the importer's retry for parameters without gradient
            if "did not receive a gradient" not in str(e):
                raise
            wrapper.unused = _unused_parameters(wrapper, tuple(workload.inputs))
            gm, sig = _trace(wrapper, tuple(workload.inputs), True)
    graph = gm.graph
    outs = list(next(iter(graph.find_nodes(op="output"))).args[0])
    n_fwd = len(sig.buffers_to_mutate) + 1
    loss = outs[n_fwd - 1]
    seeds = [u for u in loss.users if u.op == "call_function" and str(u.target) == "aten.ones_like.default"]
    if len(seeds) != 1:
        raise ValueError("the joint graph has no ones_like(loss) backward seed")
    seed = seeds[0]
    names = {n.name for n in graph.nodes if n.op == "call_function"}
    last_ph = list(graph.find_nodes(op="placeholder"))[-1]
    with graph.inserting_after(last_ph):
        tangent = graph.placeholder("tangents_1")
    tangent.meta["val"] = seed.meta["val"]
    seed.replace_all_uses_with(tangent)
    graph.erase_node(seed)
    # every value in one fake mode (AOTAutograd's export leaves several; the FLOP estimator mixes them)
    modes: dict[int, list] = {}
    for n in graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, FakeTensor):
            modes.setdefault(id(v.fake_mode), [v.fake_mode, 0])[1] += 1
    if modes:
        mode = max(modes.values(), key=lambda x: x[1])[0]
        for n in graph.nodes:
            v = n.meta.get("val")
            if isinstance(v, FakeTensor) and v.fake_mode is not mode:
                with mode:
                    n.meta["val"] = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
    gm.recompile()
    return gm, n_fwd, names


def partition(workload: Any, budget: float, *, solver: str = "dp", cse: bool = False, traced_as: str = "eager"):
    """torch's (forward module, backward module, names of the joint graph's ops) at ``budget``."""
    import torch._functorch.config as fconfig
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    gm, n_fwd, names = joint_graph(workload, traced_as)
    with fconfig.patch(activation_memory_budget=budget, activation_memory_budget_solver=solver, cse=cse):
        fw, bw = min_cut_rematerialization_partition(gm, None, num_fwd_outputs=n_fwd)
    return fw, bw, names


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


class TorchMinCut(Peer):
    name = "torch_mincut"
    label = "torch min-cut"
    colour = "#16a34a"
    symbol = "triangle-up"
    family = "peer"
    needs = ("model",)
    paper = "PyTorch AOTAutograd min_cut_rematerialization_partition (activation_memory_budget)"

    def _run(self, g, cost, *, time_budget, progress, model=None, budgets=BUDGETS, solver="dp",
             cse=False, **_):
        """``model``: the workload the graph was captured from (module, inputs, loss_fn), built under
        fake tensors (``frontend.workload.build_fake``)."""
        if model is None:
            raise ValueError("torch_mincut needs the model the graph was captured from (module, inputs, loss_fn)")
        workload = model
        t0 = time.perf_counter()
        by_name = {n.name: n.id for n in g.ops()}
        fwd = forward_ops(g)
        cand = candidates(g)
        backward_ops = {n.id for n in g.ops()} - fwd
        plans, failures = [], []
        for b in budgets:
            label = f"budget {b:g}"
            if time.perf_counter() - t0 > time_budget:
                failures.append(Failure(label, f"time budget {time_budget:g} s spent"))
                continue
            t1 = time.perf_counter()
            try:
                fw, bw, joint = partition(workload, b, solver=solver, cse=cse, traced_as=g.meta.get("traced_as", "eager"))
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
            readers |= {v for v in backward_ops if g.nodes[v].name not in joint}  # ours only (sums of tied grads)
            saved = {by_name[x] for x in bw_in if x in by_name}
            d = two_instance_decision(g, recompute, readers)
            r = realise(g, d)
            plans.append(make_plan(
                self.name, label, r, cost, activation_memory_budget=b, solver=solver, cse=cse,
                torch_seconds=round(torch_s, 3), saved_values=len(bw_in) - 1,
                saved_activation_bytes=sum(own_bytes(g, v) for v in saved if v in fwd),
                recomputed_by_torch=len(rec_names), unmapped=unmapped[:20], unmapped_count=len(unmapped),
                not_recomputable=not_ours))
            progress(f"torch_mincut {label}: {len(rec_names)} ops recomputed by torch, "
                     f"{len(bw_in) - 1} saved values ({torch_s:.1f} s)")
        return plans, failures


__all__ = ["BUDGETS", "TorchMinCut", "joint_graph", "partition"]

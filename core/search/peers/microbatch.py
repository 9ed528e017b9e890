"""Micro-batching: gradient accumulation over k parts of the batch, the baseline every user of a
training loop already has (``for part in batch.chunk(k): loss(part).backward()``, the weight
gradients summed over the parts).

It is realised with our own rule: MAGIS's F-Trans (section 4) of the whole training step along the
batch of the activation input.  The D-Graph (``analysis.dgraph``) joins the dims of every op through
the ops registry's dim links; S = every op with a D-node in the component of the input's batch
(dim 0 of ``analysis.dominators.activation_entry``) whose values depend on the batch -- the attention
mask and position ids a model builds from the input's shape run once, before the loop, and each
part reads its slice (``batch_dependent``) -- and ``plan_split`` checks that F-Trans (S, D, k) is
valid: the forward, the loss and the backward of each part run in a loop, the weight gradients (a
reduce axis along the batch) are summed over the parts, a mean loss is summed and divided once.
That is exactly gradient accumulation; the ops outside S read only weights (a weight's transpose is
made once, before the loop) or build from shapes.  Where the exact F-Trans is refused, the split of
gradient accumulation itself (``MicroBatchFission``, ``transform.microbatch``): dropout draws its
own masks per micro-batch (the plan records it: ``stats["random"]``, and its outputs are not
compared with eager's bit for bit), and a mixture of experts routes each part's tokens by itself
(``analysis.routing``).  One point per k that divides the batch (2, 4, 8, ... up to the batch), each
the split alone, in PyTorch's traced order of the transformed graph; a point no better than PyTorch
eager in either peak or latency is not a result (a failure saying so).

Training batch norm reduces over the batch, so its D-links do not carry it: the batch then stops at
the first batch norm and the split is refused -- a failure saying why, never an exception (a user
who micro-batches such a model changes its statistics; the plan would not compute the same step).
"""

from __future__ import annotations

import time

from ...analysis.dgraph import DGraph, Split, SplitError, plan_split, value_free
from ...analysis.dominators import activation_entry
from ...ir import ops
from ...ir.graph import Graph, NodeKind, TensorKind
from ...ir.ops_routing import ARANGES
from ...simulate import simulate
from ...transform.fission import Fission, apply_split
from ...transform.microbatch import MicroBatchFission
from ...transform.rule import Application
from ..plan import Plan
from .base import Method
from .common import Failure, coarse_to_fine, dominated_by_eager, traced_order
from .sqrt_n import Sweep

RANDOM_PER_PART = ops.RANDOM_PER_PART  # a plan's stats["random"]: not eager's draws


def batch_split(g: Graph, order: list[int] | None = None, *, microbatching: bool = False) -> tuple[Split | None, str]:
    """The F-Trans of the whole training step along the input's batch (dim 0 of the activation
    input), or (None, why it is not valid).  ``order``: a schedule of ``g`` whose order of the split
    ops each part follows (default: ``dgraph.topological``).

    S is every op of the batch's component (the D-Graph) whose values depend on the batch
    (:func:`batch_dependent`); the rest of the component runs once before the parts.  The split is
    MAGIS's exact F-Trans; with ``microbatching`` (the micro-batching methods), where that is not
    valid, the split of gradient accumulation (``Split.micro_batch``: random ops draw per part,
    tokens routed by a mixture of experts split with the batch; ``transform.microbatch``)."""
    try:
        entry = activation_entry(g)
    except ValueError as e:
        return None, f"the graph has no batch to split: {e}"
    if not g.nodes[entry].out.shape:
        return None, f"the activation input {g.nodes[entry].name!r} is a scalar: no batch to split"
    split, why = _split(g, entry, order, accumulation=False)
    if split is None and microbatching:
        split, why = _split(g, entry, order, accumulation=True)
        if split is not None:
            split.micro_batch = True
    return split, why


def _split(g: Graph, entry: int, order: list[int] | None, accumulation: bool) -> tuple[Split | None, str]:
    """The split along the batch of ``entry``: exact, or with gradient accumulation's options."""
    dg = DGraph(g, routing=accumulation)
    comp = dg.component((entry, 0, 0))
    in_comp = dg.components().get(comp, set())
    dep = batch_dependent(g, [n.id for n in g.placeholders() if n.id in in_comp and n.out.kind == TensorKind.INPUT])
    s = {v for v in in_comp if v in dep and g.nodes[v].kind in (NodeKind.OP, NodeKind.FISSION)}
    if accumulation:  # an arange of row positions read by S: each part counts its own rows
        s |= {v for v in in_comp if g.nodes[v].op in ARANGES and g.users(v) and set(g.users(v)) <= s}
    try:
        ordered = None if order is None else [v for v in order if v in s]
        return plan_split(g, dg, sorted(s), comp, order=ordered, random_per_part=accumulation,
                          routing=accumulation, seed_cuts=accumulation), ""
    except SplitError as e:
        why = f"the batch does not split: {e}"
        loss = g.outputs.get("loss")
        stop = _stop(g, dg, comp, s) if loss is not None and loss.node not in s else ""
        return None, why + (f"; {stop}" if stop else "")


def batch_dependent(g: Graph, sources: list[int]) -> set[int]:
    """The ops whose values depend on the values of ``sources`` (the graph inputs that carry the
    batch: token ids, labels, images).  A value-free op (``ones_like``: ``dgraph.value_free``)
    depends on its input's shape alone: it depends on the batch only where it reads an op that
    does (``zeros_like`` of an activation, made per part), not where it reads a graph input
    (``ones_like(input_ids)``, the attention mask a model builds when none is given).

    The ops of the batch's component that depend on none of them -- the attention mask and
    position ids built from the input's shape, ``arange`` of the batch used as an index, noise drawn
    from nothing -- are not part of the micro-batch loop: they run once at full size before it, as
    the imported graph runs them, and each part reads its slice of their outputs (``plan_split``:
    an input of S sliced along the dim its reader links into the batch)."""
    dep: set[int] = set()
    for v in g.topo_order():
        n = g.nodes[v]
        if v in sources:
            dep.add(v)
        elif n.kind != NodeKind.PLACEHOLDER and any(
                p in dep and (not value_free(g, v) or g.nodes[p].kind != NodeKind.PLACEHOLDER)
                for p in g.preds(v)):
            dep.add(v)
    return dep


def _stop(g: Graph, dg: DGraph, comp, s: set[int]) -> str:
    """Where the batch stops (when it does not reach the loss): the first op (traced order) that
    reads a tensor carrying the batch and carries none of it on (training batch norm: its statistics
    are reduced over the batch)."""
    for v in traced_order(g):
        n = g.nodes[v]
        if v in s or v in dg.unknown or value_free(g, v) or not any(t.nbytes for t in n.outputs):
            continue
        for r in n.inputs():
            if r.node in s and any(k[1] == r.index and k[2] >= 0 for k in dg.keys(r.node, comp)):
                return f"the batch stops at {n.name!r} ({n.op}), which reads it and carries none of it on"
    return ""


def split_application(split: Split, k: int, ordered: bool = False) -> Application:
    """The application of ``split`` in ``k`` parts: MAGIS's ``Fission`` where the split is exact,
    ``MicroBatchFission`` where it is gradient accumulation's (``Split.micro_batch``); ``ordered``:
    each part runs S in the split's order (``Fission.ordered_application``)."""
    rule = MicroBatchFission if split.micro_batch else Fission
    return (rule.ordered_application if ordered else rule.application)(k, split.comp, split.nodes)


def split_stats(g: Graph, split: Split, k: int) -> dict:
    """What a micro-batching point records of its split: parts, batch, ops, and -- where the
    imported graph draws random numbers inside the loop -- that each part draws its own (the
    plan's outputs are then not eager's values: ``codegen.emit.per_part_draws``)."""
    stats = {"parts": k, "batch": split.length, "split_ops": len(split.nodes)}
    drawn = sorted(g.nodes[v].name for v in split.nodes if ops.node_draws_random(g.nodes[v]))
    if drawn:
        stats["random"] = RANDOM_PER_PART
        stats["random_ops"] = drawn
    return stats


def drop_dominated(g: Graph, cost, plans: list[Plan]) -> tuple[list[Plan], list[Failure]]:
    """``plans`` less those no better than PyTorch eager (the imported graph in its traced order,
    ``peers.eager``) in either peak or latency: a point worse in both is never a method's result;
    each becomes a failure that says so."""
    if not plans:
        return plans, []
    eager = simulate(g, traced_order(g), cost)
    kept, dropped = [], []
    for p in plans:
        if dominated_by_eager(p.peak, p.latency, eager.peak, eager.latency):
            dropped.append(Failure(p.label, f"no better than PyTorch eager: peak {p.peak / eager.peak:.3f}x, "
                                            f"latency {p.latency / eager.latency:.3f}x"))
        else:
            kept.append(p)
    return kept, dropped


class Microbatch(Method):
    name = "microbatch"
    label = "micro-batching"
    colour = "#92400e"
    symbol = "triangle-left"
    family = "baseline"
    paper = "gradient accumulation over k micro-batches (MAGIS F-Trans of the whole step along the batch)"

    def _run(self, g, cost, *, time_budget, progress, parts=None, **_):
        """One point per k of ``parts`` (default: every k > 1 that divides the batch), run coarse to
        fine (both ends, then the middle of the widest gap: ``coarse_to_fine``) while ``time_budget``
        lasts, given in increasing k; a plan of the same peak and latency as an earlier one once.
        ``extra``: ``Sweep.stats`` (``grid``: the counts listed)."""
        t0 = time.perf_counter()
        split, why = batch_split(g, microbatching=True)
        if split is None:
            return [], [Failure("all", why)]
        sweep = Sweep(time_budget, t0)
        ks = list(parts) if parts else coarse_to_fine(split.divisors())
        for k in ks:
            label = f"k={k}"
            if k < 2 or split.length % k:
                sweep.failures.append(Failure(label, f"{k} parts do not divide the batch of {split.length}"))
                continue
            if not sweep.reach(label):
                continue
            h = g.copy()
            try:
                apply_split(h, split, k)  # what the rule's ``apply`` does, without planning it again
            except SplitError as e:
                sweep.failures.append(Failure(label, str(e)))
                continue
            order = traced_order(h)
            sim = simulate(h, order, cost)
            if sweep.add(Plan(self.name, [split_application(split, k)], order, sim.metrics(), label,
                              split_stats(g, split, k))):
                progress(f"microbatch {label}: peak {sim.peak} latency {sim.latency:.6f}")
        extra = sweep.finish()
        plans = sweep.plans if parts else sorted(sweep.plans, key=lambda p: p.stats["parts"])
        plans, worse = drop_dominated(g, cost, plans)
        return plans, sweep.failures + worse, extra


__all__ = ["RANDOM_PER_PART", "Microbatch", "batch_dependent", "batch_split", "drop_dominated",
           "split_application", "split_stats"]

"""Micro-batching: gradient accumulation over k parts of the batch, the baseline every user of a
training loop already has (``for part in batch.chunk(k): loss(part).backward()``, the weight
gradients summed over the parts).

It is realised with our own rule: MAGIS's F-Trans (section 4) of the whole training step along the
batch of the activation input.  The D-Graph (``analysis.dgraph``) joins the dims of every op through
the ops registry's dim links; S = every op with a D-node in the component of the input's batch
(dim 0 of ``analysis.dominators.activation_entry``), and ``plan_split`` checks that F-Trans (S, D, k)
is valid -- the forward, the loss and the backward of each part run in a loop, the weight gradients
(a reduce axis along the batch) are summed over the parts, a mean loss is summed and divided once.
That is exactly gradient accumulation; the ops outside S read only weights (a weight's transpose is
made once, before the loop).  One point per k that divides the batch (2, 4, 8, ... up to the batch),
each ``Fission(k, D, S)`` alone, in PyTorch's traced order of the transformed graph.

Training batch norm reduces over the batch, so its D-links do not carry it: the batch then stops at
the first batch norm and the split is refused -- a failure saying why, never an exception (a user
who micro-batches such a model changes its statistics; the plan would not compute the same step).
"""

from __future__ import annotations

import time

from ...analysis.dgraph import DGraph, Split, SplitError, plan_split, value_free
from ...analysis.dominators import activation_entry
from ...ir.graph import Graph, NodeKind
from ...simulate import simulate
from ...transform.fission import Fission, apply_split
from ..plan import Plan
from .base import Method
from .common import Failure, traced_order


def batch_split(g: Graph, order: list[int] | None = None) -> tuple[Split | None, str]:
    """The F-Trans of the whole training step along the input's batch (dim 0 of the activation
    input), or (None, why it is not valid).  ``order``: a schedule of ``g`` whose order of the split
    ops each part follows (default: ``dgraph.topological``)."""
    try:
        entry = activation_entry(g)
    except ValueError as e:
        return None, f"the graph has no batch to split: {e}"
    if not g.nodes[entry].out.shape:
        return None, f"the activation input {g.nodes[entry].name!r} is a scalar: no batch to split"
    dg = DGraph(g)
    comp = dg.component((entry, 0, 0))
    s = sorted(v for v in dg.components().get(comp, ()) if g.nodes[v].kind == NodeKind.OP)
    try:
        mine = set(s)
        return plan_split(g, dg, s, comp, order=None if order is None else [v for v in order if v in mine]), ""
    except SplitError as e:
        why = f"the batch does not split: {e}"
        loss = g.outputs.get("loss")
        stop = _stop(g, dg, comp, set(s)) if loss is not None and loss.node not in s else ""
        return None, why + (f"; {stop}" if stop else "")


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


class Microbatch(Method):
    name = "microbatch"
    label = "micro-batching"
    colour = "#92400e"
    symbol = "triangle-left"
    family = "baseline"
    paper = "gradient accumulation over k micro-batches (MAGIS F-Trans of the whole step along the batch)"

    def _run(self, g, cost, *, time_budget, progress, parts=None, **_):
        t0 = time.perf_counter()
        split, why = batch_split(g)
        if split is None:
            return [], [Failure("all", why)]
        rule = Fission()
        plans: list[Plan] = []
        failures: list[Failure] = []
        for k in list(parts) if parts else split.divisors():
            label = f"k={k}"
            if k < 2 or split.length % k:
                failures.append(Failure(label, f"{k} parts do not divide the batch of {split.length}"))
                continue
            if time.perf_counter() - t0 > time_budget:
                failures.append(Failure(label, f"time budget {time_budget:g} s spent"))
                continue
            h = g.copy()
            apply_split(h, split, k)  # what ``rule.apply(h, app)`` does, without planning it again
            order = traced_order(h)
            sim = simulate(h, order, cost)
            app = rule.application(k, split.comp, split.nodes)
            plans.append(Plan(self.name, [app], order, sim.metrics(), label,
                              {"parts": k, "batch": split.length, "split_ops": len(split.nodes)}))
            progress(f"microbatch {label}: peak {sim.peak} latency {sim.latency:.6f}")
        return plans, failures


__all__ = ["Microbatch", "batch_split"]

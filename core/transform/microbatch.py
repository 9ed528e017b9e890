"""Gradient accumulation as a rule: ``MicroBatchFission(n, comp, S)`` is the F-Trans of a whole
training step along its batch (MAGIS section 4.2, ``transform.fission``) with the semantics a
training loop over n micro-batches has -- what the micro-batching baselines apply
(``search.peers.microbatch``) where the exact F-Trans does not:

* random ops of S draw per part, at part size (each micro-batch draws its own dropout masks from
  the same distribution; the plan computes another draw than the imported graph's single call:
  ``analysis.dgraph.plan_split(random_per_part=True)``);
* rows routed by their values (a mixture of experts sorts each part's tokens by expert) split with
  the batch where the sub-graph as a whole keeps each token's result its own
  (``analysis.routing``; ``plan_split(routing=True)`` on the D-Graph with ``ir.ops_routing``'s
  links).

Its parameters, application and inverse are ``Fission``'s; only the planning options differ, so a
plan file replays it by name.  It is never matched: only micro-batching issues it."""

from __future__ import annotations

from ..analysis.dgraph import DGraph, plan_split
from ..ir.graph import Graph
from .fission import Fission, apply_split
from .rule import Application


class MicroBatchFission(Fission):
    """MicroBatchFission(n, comp node, comp output, comp dim, *S): F-Trans (S, D, n) as gradient
    accumulation (random ops drawn per part, routed rows split by token)."""

    name = "microbatch_fission"
    text = "F-Trans of the training step along its batch as gradient accumulation (random draws per micro-batch)"
    option = None
    needs_ftree = False

    @staticmethod
    def application(n: int, comp, nodes) -> Application:
        return Application(MicroBatchFission.name, (n, *comp, *sorted(nodes)))

    @staticmethod
    def ordered_application(n: int, comp, order: list[int]) -> Application:
        return Application(MicroBatchFission.name, (n, *comp, *order))

    def edit(self, g: Graph, app: Application) -> None:
        n, cn, cj, cd, *nodes = app.params
        dg = DGraph(g, nodes, routing=True) if cn in nodes else DGraph(g, routing=True)
        order = None if nodes == sorted(nodes) else list(nodes)
        split = plan_split(g, dg, nodes, (cn, cj, cd), order=order, random_per_part=True, routing=True,
                           seed_cuts=True)
        apply_split(g, split, n)


__all__ = ["MicroBatchFission"]

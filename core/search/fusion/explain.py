"""Explainers: which edges of an invalid fusion group make it invalid (GET, paper section III-B).

Each is a function ``(problem, group, beta, k) -> edges`` (at most ``k``, most responsible first):

* ``gnn`` -- GNNExplainer (Ying et al. 2019) on the validity classifier: a soft mask over the group's
  edges, optimised to keep the prediction "invalid" with as few edges as possible (``gnn.py``);
* ``grad`` -- the gradient of the "invalid" logit with respect to that edge mask (saliency);
* ``oracle`` -- the exact reference: F_beta itself, each edge scored by how far the best cut through it
  lowers the larger side's buffer need;
* ``random`` -- edges drawn at random (a reference for the tree split, not the random split).

``EXPLAINERS`` holds how to build each, by name; ``make_explainer`` builds one (the GNN ones train or
load the classifier).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...registry import Registry
from .problem import FusionProblem, Group
from .split import Edge, Explainer, candidate_cuts, group_edges

Progress = Callable[[str], None]
# (the problems a classifier learns from, seed, progress) -> an explainer
ExplainerFactory = Callable[[list[FusionProblem] | None, int, Progress | None], Explainer]


def oracle_explainer(problem: FusionProblem, group: Group, beta: float, k: int) -> list[Edge]:
    """Edges ranked by the least max-part F_beta of the cuts through them (ties: topological)."""
    scored = []
    for e in group_edges(problem, group):
        cuts = candidate_cuts(problem, group, [e])
        if cuts:
            worst = min(max(problem.buffer(x) for x in parts) for parts in cuts)
            scored.append((worst, e))
    scored.sort()
    return [e for _, e in scored[:k]]


def random_explainer(seed: int = 0) -> Explainer:
    rng = np.random.default_rng(seed)

    def explain(problem: FusionProblem, group: Group, beta: float, k: int) -> list[Edge]:
        edges = group_edges(problem, group)
        idx = rng.permutation(len(edges))[:k]
        return [edges[i] for i in idx]

    return explain


def _gnn_explainer(name: str) -> ExplainerFactory:
    """``gnn`` or ``grad`` on the validity classifier of the problems' graphs and scheme."""

    def build(problems: list[FusionProblem] | None, seed: int, progress: Progress | None) -> Explainer:
        from .gnn import gnn_explainer, gradient_explainer, validity_model

        if not problems:
            raise ValueError("the GNN explainers need the problem to train their classifier on")
        model = validity_model(problems, seed=seed, progress=progress)
        return gnn_explainer(model) if name == "gnn" else gradient_explainer(model)

    return build


EXPLAINERS: Registry[ExplainerFactory] = Registry("explainer")
EXPLAINERS.register("gnn", _gnn_explainer("gnn"))
EXPLAINERS.register("grad", _gnn_explainer("grad"))
EXPLAINERS.register("oracle", lambda problems, seed, progress: oracle_explainer)
EXPLAINERS.register("random", lambda problems, seed, progress: random_explainer(seed))


def make_explainer(name: str, problems: list[FusionProblem] | None = None, seed: int = 0,
                   progress: Progress | None = None) -> Explainer:
    """Explainer ``name`` (ValueError listing the explainers for an unknown one); ``gnn`` and
    ``grad`` use the validity classifier of the problems' graphs and scheme (trained at first use,
    then cached on disk)."""
    return EXPLAINERS.get(name)(problems, seed, progress)

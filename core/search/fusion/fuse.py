"""``fuse``: a fusion plan for a graph under an on-chip buffer -- the search, the splitting (guided by an
explainer or random) and the plan file ``magis fuse`` writes.

The plan keeps the tree-split steps behind its groups (``split_steps``, at most ``SPLIT_STEPS_KEPT``):
for each invalid group the best plan's search met and split, in the order Algorithm 1 split them, the
group's ops and F_beta, the edges the explainer proposed, the edges the chosen cut removed and the
parts it produced -- what the app steps through.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...fmt import format_bytes
from ...ir.graph import Graph
from .explain import EXPLAINERS, make_explainer
from .problem import FusionError, FusionProblem, Group, check_plan, parse_scheme
from .search import SEARCHES, SECOND_OBJECTIVES, plan_latency, run_search
from .split import SplitStep, Splitter

PLAN_FORMAT = "magis-fusion-plan"
PLAN_VERSION = 1
SPLITTERS = (*EXPLAINERS, "none")  # "none": the searches' random split (no explainer)
SPLIT_STEPS_KEPT = 200  # split steps behind a plan kept in it (the rest are counted)


def step_json(p: FusionProblem, step: SplitStep, beta: float) -> dict[str, Any]:
    """One split step as the plan file holds it: op names for positions, edges as [producer, consumer],
    F_beta in bytes (null where it is infinite: BRR with a squeeze-excite gate inside)."""
    names = p.names

    def ops_of(gr: Group) -> list[str]:
        return [names[v] for v in sorted(gr)]

    def fb(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {
        "ops": ops_of(step.group), "buffer_bytes": fb(step.buffer), "depth": step.depth, "how": step.how,
        "explained": [[names[u], names[v]] for u, v in step.explained],
        "cut": [[names[u], names[v]] for u, v in step.cut_edges(p)],
        "parts": [{"ops": ops_of(x), "buffer_bytes": fb(p.buffer(x)), "valid": p.buffer(x) < beta}
                  for x in step.parts],
    }


@dataclass
class FusionPlan:
    """A partition plan found for one graph, buffer and scheme, with how it was found."""

    graph: str
    scheme: str
    beta: int
    search: str
    explainer: str
    plans: int
    seed: int
    groups: list[list[str]]
    group_dram: list[float]
    group_buffer: list[float]
    dram: float
    trivial_dram: float
    latency: float
    trivial_latency: float
    unfused: list[str]  # ops too big for the buffer alone (left out of the search)
    splits: dict[str, float]
    cache: dict[str, int]
    classifier: dict[str, Any] | None
    seconds: float
    front: list[tuple[float, float]] = field(default_factory=list)
    split_steps: list[dict[str, Any]] = field(default_factory=list)  # ``step_json`` of each, in order
    split_steps_total: int = 0  # split steps behind the plan, before ``SPLIT_STEPS_KEPT``
    cancelled: bool = False  # the search was stopped before its plan budget: the best so far

    @property
    def reduction(self) -> float:
        return 1 - self.dram / self.trivial_dram if self.trivial_dram else 0.0

    @property
    def max_buffer(self) -> float:
        """Peak on-chip bytes: the largest F_beta of a valid group (the paper's MBU)."""
        return max((b for b in self.group_buffer if b < self.beta), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT, "version": PLAN_VERSION, "graph": self.graph, "scheme": self.scheme,
            "buffer_bytes": self.beta, "search": self.search, "explainer": self.explainer, "plans": self.plans,
            "seed": self.seed, "metrics": {"dram": self.dram, "latency": self.latency},
            "dram_bytes": self.dram, "trivial_dram_bytes": self.trivial_dram, "reduction": self.reduction,
            "latency_seconds": self.latency, "trivial_latency_seconds": self.trivial_latency,
            "max_buffer_bytes": self.max_buffer, "unfused": self.unfused,
            "fused_groups": sum(len(gr) > 1 for gr in self.groups),
            "groups": [{"ops": gr, "dram_bytes": d, "buffer_bytes": b}
                       for gr, d, b in zip(self.groups, self.group_dram, self.group_buffer, strict=True)],
            "splits": self.splits, "cache": self.cache, "classifier": self.classifier,
            "seconds": self.seconds, "front": self.front,
            "split_steps": self.split_steps, "split_steps_total": self.split_steps_total,
            "cancelled": self.cancelled,
        }

    def summary(self) -> str:
        fused = [gr for gr in self.groups if len(gr) > 1]
        lines = [
            f"{self.graph}: {self.scheme.upper()} fusion under a {format_bytes(self.beta)} buffer, "
            f"{self.search} search of {self.plans} plans, split by {self.explainer}"
            + (" (cancelled: the best plan so far)" if self.cancelled else ""),
            f"  DRAM traffic   {format_bytes(self.dram)} (unfused: {format_bytes(self.trivial_dram)}, "
            f"-{self.reduction:.1%})",
            f"  latency        {self.latency * 1e3:.3f} ms (unfused: {self.trivial_latency * 1e3:.3f} ms)",
            f"  groups         {len(self.groups)} ({len(fused)} fused, largest {max(map(len, self.groups))} ops), "
            f"peak on-chip {format_bytes(self.max_buffer)}",
            f"  invalid groups {int(self.splits['invalid'])} met, {int(self.splits['rectified'])} rectified by "
            f"the explanation cuts ({self.splits['rectify_rate']:.0%})",
        ]
        if self.classifier:
            c = self.classifier
            how = "cached" if c["cached"] else "trained in {:.1f} s".format(c["seconds"])
            lines.append(f"  classifier     held-out accuracy {c['accuracy']:.1%} (majority class "
                         f"{c['majority']:.1%}), {how}")
        if self.unfused:
            more = f" and {len(self.unfused) - 8} more" if len(self.unfused) > 8 else ""
            lines.append(f"  unfused        {len(self.unfused)} ops need more than the buffer alone: "
                         f"{', '.join(self.unfused[:8])}{more}")
        lines.append(f"  seconds        {self.seconds:.1f}")
        return "\n".join(lines)


def fuse(g: Graph, beta: int, scheme: str = "lbdf", search: str = "local", explainer: str = "grad",
         plans: int = 1000, seed: int = 0, second: str = "groups", strict: bool = False,
         progress: Callable[[str], None] | None = None, on_plan: Callable[[int, float], None] | None = None,
         cancel: Any = None) -> FusionPlan:
    """Search a fusion plan of ``g`` under a buffer of ``beta`` bytes (FusionError for bad input).
    ``progress`` hears each stage, ``on_plan(plans evaluated, best DRAM so far)`` each plan; setting
    ``cancel`` (a ``threading.Event``) ends the search with its best plan so far."""
    t0 = time.perf_counter()
    scheme = parse_scheme(scheme)
    if search not in SEARCHES:
        raise FusionError(f"unknown search {search!r}; known: {', '.join(SEARCHES)}")
    if explainer not in SPLITTERS:
        raise FusionError(f"unknown explainer {explainer!r}; known: {', '.join(SPLITTERS)}")
    if second not in SECOND_OBJECTIVES:
        raise FusionError(f"unknown second objective {second!r}; known: {', '.join(SECOND_OBJECTIVES)}")
    if beta <= 0 or plans <= 0:
        raise FusionError("the buffer and the number of plans must be positive")
    p = FusionProblem(g, scheme)
    unfused = p.unfusable(beta)
    names = [p.names[v] for v in unfused]
    if strict and unfused:
        more = f" and {len(names) - 10} more" if len(names) > 10 else ""
        raise FusionError(f"a {format_bytes(beta)} buffer is too small for {len(names)} single ops under "
                          f"{scheme.upper()}: {', '.join(names[:10])}{more}")
    bad = set(unfused)
    if not any(u not in bad and v not in bad for u, v in p.edges()):
        why = "no two connected ops fit the buffer" if p.n > 1 else "the graph has fewer than two ops"
        raise FusionError(f"nothing to fuse in {g.name}: {why} ({p.n} ops, {len(unfused)} too big for a "
                          f"{format_bytes(beta)} buffer alone)")
    classifier = None
    ex = None
    if explainer in ("gnn", "grad"):
        from .gnn import gnn_explainer, gradient_explainer, validity_model

        m = validity_model([p], seed=seed, progress=progress)
        classifier = {"accuracy": m.accuracy, "majority": m.majority, "samples": m.samples,
                      "seconds": m.seconds, "cached": m.cached}
        ex = gnn_explainer(m) if explainer == "gnn" else gradient_explainer(m)
    elif explainer != "none":
        ex = make_explainer(explainer, [p], seed=seed)
    if progress:
        progress(f"{search} search over {plans} plans ({scheme.upper()}, {format_bytes(beta)})")
    splitter = Splitter(p, beta, ex, seed=seed)
    r = run_search(p, beta, search, splitter, plans, seed=seed, second=second, on_plan=on_plan, cancel=cancel)
    assert not check_plan(p, r.groups)
    groups: list[Group] = r.groups
    plan = FusionPlan(
        graph=g.name, scheme=scheme, beta=int(beta), search=search, explainer=explainer, plans=r.plans, seed=seed,
        groups=[[p.names[v] for v in sorted(gr)] for gr in groups],
        group_dram=[p.dram(gr) for gr in groups], group_buffer=[p.buffer(gr) for gr in groups],
        dram=r.dram, trivial_dram=r.trivial_dram, latency=plan_latency(p, groups),
        trivial_latency=plan_latency(p, p.trivial()), unfused=names, splits=splitter.stats.as_dict(),
        cache=p.stats.as_dict(), classifier=classifier, seconds=time.perf_counter() - t0, front=r.front,
        split_steps_total=len(r.steps), cancelled=r.cancelled)
    plan.split_steps = [step_json(p, st, beta) for st in r.steps[:SPLIT_STEPS_KEPT]]
    return plan

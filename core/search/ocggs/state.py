"""What every substitution search shares (OCGGS sections 2-4): the graph's cost as the sum of its
ops' times, node labels and keys, and the matches of a state kept up to date from its parent.

* Cost (:class:`GraphCost`): the analytic cost model's time of each op, summed -- with one compute
  stream and no copies that is the simulator's latency.  On a forward (inference) graph, ops that
  read only weights (a concatenation of two filters, a folded batch norm's scale) run once when the
  model is loaded, as TASO and every inference compiler fold them, so they are left out
  (``fold_weights``); on a training step every op counts.
* Labels (section 4.1): an original node has label (0, id); the j-th node created by the k-th
  substitution of a sequence has (k, j).  key(tau) is the largest label among the nodes tau
  replaces; a sequence is *ordered* when its keys strictly increase (Theorem 4 / Corollary 1: the
  ordered sequences reach every graph the unordered ones reach), so an exact search explores only
  those.
* :class:`Walk` holds one graph and edits it in place: ``push`` applies a substitution (journaled),
  ``pop`` undoes it.  Its matches after a push are found either from scratch (``reuse=False``:
  Pruning) or, as DPP does (section 4.2), by keeping the parent's matches that do not touch a
  replaced node and searching new ones only around the nodes the substitution created.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ...cost.model import CostModel
from ...errors import RuleNotApplicable
from ...ir.graph import EditLog, Graph, NodeKind, TensorKind, TRef, map_refs
from ...transform.rule import Application
from ...transform.substitution import SUBSTITUTE_RULES, Substitute
from ...transform.substitution.pattern import find_matches

Label = tuple[int, int]

# commutativity makes every add and mul a match of equal cost; searches leave it out unless asked
DEFAULT_EXCLUDE = ("add_comm", "mul_comm")


def search_rules(names: Iterable[str] | None = None) -> dict[str, Substitute]:
    """The substitution rules a search uses: ``names``, or every rule but commutativity."""
    by = {r.name: r for r in SUBSTITUTE_RULES}
    if names is None:
        return {k: r for k, r in by.items() if k not in DEFAULT_EXCLUDE}
    names = list(names)
    unknown = [n for n in names if n not in by]
    if unknown:
        raise ValueError(f"unknown substitution rule(s) {', '.join(unknown)}; known: {', '.join(by)}")
    return {n: by[n] for n in names}


class GraphCost:
    """Per-op times of a graph and their sum, kept per node id (ids are never reused within one
    graph's history, and a re-applied substitution recreates the same ids with the same ops)."""

    def __init__(self, g: Graph, cost: CostModel, fold_weights: bool | None = None) -> None:
        self.cost = cost
        self.fold = g.meta.get("mode") == "forward" if fold_weights is None else fold_weights
        self.times: dict[int, float] = {}
        self.const: dict[int, bool] = {}
        for nid in g.topo_order():
            self.note(g, nid)

    def note(self, g: Graph, nid: int) -> float:
        """Record node ``nid``'s time (0 for a folded weight-only op); returns it."""
        n = g.nodes[nid]
        if n.kind == NodeKind.PLACEHOLDER:
            const = all(t.kind == TensorKind.WEIGHT for t in n.outputs)
        else:
            const = self.fold and bool(n.inputs()) and all(self.const.get(p, False) for p in g.preds(nid))
        self.const[nid] = const
        t = 0.0 if const or n.kind == NodeKind.PLACEHOLDER else self.cost.node_time(g, n)
        self.times[nid] = t
        return t

    def copy(self) -> GraphCost:
        c = GraphCost.__new__(GraphCost)
        c.cost, c.fold, c.times, c.const = self.cost, self.fold, dict(self.times), dict(self.const)
        return c

    def total(self, g: Graph) -> float:
        return sum(self.times[v] for v in g.nodes)

    def delta(self, g: Graph, log: EditLog, keep: bool = True) -> float:
        """The change of the total made by the recorded substitution (its added nodes noted; under a
        cost model whose op times depend on their neighbours, ``CostModel.contextual``, the
        neighbours timed again, and their old times put back unless ``keep``)."""
        gone = sum(self.times[e.nid] for e in log.edits if e.kind == "erase")
        new = sorted(log.added())
        added = sum(self.note(g, v) for v in new)
        if not self.cost.contextual:
            return added - gone
        fresh = set(new)
        old = {v: self.times[v] for v in self.cost.affected(g, log) if v not in fresh and v in self.times}
        changed = sum(self.note(g, v) - t for v, t in old.items())
        if not keep:
            self.times.update(old)
        return added - gone + changed


@dataclass
class Step:
    """One substitution of a sequence: the application, the labels it consumed and created."""

    app: Application
    log: EditLog
    key: Label
    replaced: tuple[int, ...]
    created: tuple[int, ...]
    cost: float  # the graph's cost after it


@dataclass
class Stats:
    states: int = 0  # sequences (graphs) evaluated
    matches: int = 0  # substitutions found (summed over states)
    refused: int = 0  # applications refused (a cycle)
    match_seconds: float = 0.0
    best_at: float = 0.0  # seconds into the search when its final best was found


@dataclass
class Walk:
    """One graph edited in place along a sequence of substitutions (``push`` / ``pop``)."""

    g: Graph
    rules: dict[str, Substitute]
    gc: GraphCost
    reuse: bool = True
    stats: Stats = field(default_factory=Stats)
    steps: list[Step] = field(default_factory=list)
    labels: dict[int, Label] = field(default_factory=dict)
    deltas: dict[tuple, float] = field(default_factory=dict)  # ``signature`` -> cost change (shared by forks)
    run: int = 0  # Sampling: the successive cost increases the sequence ends with
    _matches: list[list[Application]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.labels = {v: (0, v) for v in self.g.nodes}
        self.cost = self.root_cost = self.gc.total(self.g)
        self.floor = 0
        self._matches = [self._find()]

    @property
    def depth(self) -> int:
        return len(self.steps)

    @property
    def last_key(self) -> Label:
        return self.steps[-1].key if self.steps else (-1, -1)

    def key(self, app: Application) -> Label:
        rule = self.rules[app.rule]
        return max(self.labels[v] for v in app.params[:rule.sub.n_source])

    def matches(self) -> list[Application]:
        """Every substitution of the current graph."""
        return self._matches[-1]

    def ordered(self) -> list[Application]:
        """The substitutions that may extend the current sequence in an ordered one."""
        last = self.last_key
        return [a for a in self._matches[-1] if self.key(a) > last]

    def push(self, app: Application) -> Step:
        """Apply ``app`` (RuleNotApplicable: the graph unchanged)."""
        rule = self.rules[app.rule]
        key = self.key(app)
        try:
            log = rule.apply(self.g, app)
        except RuleNotApplicable:
            self.stats.refused += 1
            raise
        created = tuple(sorted(log.added()))
        k = len(self.steps) + 1
        for j, v in enumerate(created):
            self.labels[v] = (k, j)
        self.cost += self.gc.delta(self.g, log)
        step = Step(app, log, key, tuple(app.params[:rule.sub.n_source]), created, self.cost)
        self.steps.append(step)
        self._matches.append(self._after(step) if self.reuse else self._find())
        self.stats.states += 1
        return step

    def signature(self, app: Application) -> tuple:
        """What the cost change of ``app`` depends on: the rule, its numbers and, per source op, the
        op, its constant arguments and the shapes (and foldedness) of what it reads and makes.  A
        substitution keeps every tensor's shape, so one match seen in many states of a search
        changes the cost by the same amount in each."""
        g, gc = self.g, self.gc
        n = self.rules[app.rule].sub.n_source

        def ref(r: TRef) -> tuple:
            t = g.tensor(r)
            return (t.shape, t.dtype, t.alias is not None, gc.const.get(r.node, False))

        return (app.rule, app.params[n:], tuple(
            (g.nodes[v].op, repr(map_refs(g.nodes[v].args, ref)), repr(map_refs(g.nodes[v].kwargs, ref)),
             tuple(t.shape for t in g.nodes[v].outputs)) for v in app.params[:n]))

    def _trial(self, app: Application) -> float | None:
        """Apply ``app`` and take it back: the cost change it makes, or None (refused: a cycle)."""
        rule = self.rules[app.rule]
        try:
            log = rule.apply(self.g, app)
        except RuleNotApplicable:
            self.stats.refused += 1
            return None
        d = self.gc.delta(self.g, log, keep=False)
        rule.inverse(self.g, log)
        return d

    def check(self, app: Application) -> bool:
        """Whether ``app`` applies here (it may close a cycle); the graph is left as it was."""
        return self._trial(app) is not None

    def estimate(self, app: Application) -> float:
        """The cost after ``app`` from the change it made wherever the same match was applied before
        (``signature``), applying it only the first time; whether it applies here (a cycle) is not
        checked: ``check`` or ``push`` does that before a sequence is kept."""
        key = self.signature(app)
        d = None if self.gc.cost.contextual else self.deltas.get(key)  # a neighbour-dependent time: no reuse
        if d is None:
            d = self._trial(app)
            if d is None:
                return math.inf
            self.deltas[key] = d
        self.stats.states += 1
        return self.cost + d

    def try_cost(self, app: Application) -> float | None:
        """The cost after ``app`` (None if it does not apply), the graph left as it was."""
        d = self._trial(app)
        if d is None:
            return None
        self.stats.states += 1
        return self.cost + d

    def fork(self) -> Walk:
        """An independent walk at this state (its own copy of the graph); it cannot pop below
        this state's depth."""
        w = Walk.__new__(Walk)
        w.g, w.rules, w.gc, w.reuse, w.stats = self.g.copy(), self.rules, self.gc.copy(), self.reuse, self.stats
        w.steps = list(self.steps)
        w.labels = dict(self.labels)
        w._matches = [self._matches[-1]]
        w.cost, w.root_cost, w.deltas = self.cost, self.root_cost, self.deltas
        w.floor = len(self.steps)
        w.run = self.run
        return w

    def pop(self) -> Step:
        if len(self.steps) <= self.floor:
            raise IndexError("a forked walk cannot undo the steps before the fork")
        step = self.steps.pop()
        self._matches.pop()
        self.rules[step.app.rule].inverse(self.g, step.log)
        if self.gc.cost.contextual:  # the neighbours' times as they were
            for v in self.gc.cost.affected(self.g, step.log):
                if v in self.gc.times:
                    self.gc.note(self.g, v)
        self.cost = self.steps[-1].cost if self.steps else self.root_cost
        return step

    def sequence(self) -> list[Application]:
        return [s.app for s in self.steps]

    # ---- matches --------------------------------------------------------------------------------
    def _find(self, anchor: Iterable[int] | None = None) -> list[Application]:
        import time

        t0 = time.perf_counter()
        out = [Application(name, p) for name, r in self.rules.items()
               for p in find_matches(self.g, r.sub, anchor=anchor)]
        self.stats.match_seconds += time.perf_counter() - t0
        self.stats.matches += len(out)
        return out

    def _after(self, step: Step) -> list[Application]:
        """DPP's reuse: the parent's matches away from the change, plus the matches that contain a
        node next to it -- created, reading or read by a created node, an input of a created or
        replaced node and that input's other readers (siblings), a re-pointed reader."""
        import time

        t0 = time.perf_counter()
        g = self.g
        gone = set(step.replaced)
        region: set[int] = set(step.created)
        for v in step.created:
            for p in g.preds(v):
                region.add(p)
                region.update(g.users(p))  # siblings: a pattern joined through a shared input
            region.update(g.users(v))
        for e in step.log.edits:
            if e.kind == "erase" and e.node is not None:
                for p in e.node._preds:
                    if p in g.nodes:
                        region.add(p)
                        region.update(g.users(p))
            elif e.kind == "args" and e.nid in g.nodes:
                region.add(e.nid)
        # a match away from the change (no replaced node, none next to it) is still one; those next
        # to it are found again with the new ones (a guard may read the neighbourhood: a sibling
        # merged away); whether an application closes a cycle is checked when it is applied
        kept = [a for a in self._matches[-1] if gone.isdisjoint(ids := a.params[:self.rules[a.rule].sub.n_source])
                and region.isdisjoint(ids)]
        self.stats.match_seconds += time.perf_counter() - t0
        fresh = self._find(anchor=sorted(region))
        return sorted(fresh + kept, key=lambda a: (a.rule, a.params))


__all__ = ["DEFAULT_EXCLUDE", "GraphCost", "Label", "Stats", "Step", "Walk", "search_rules"]

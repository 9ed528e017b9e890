"""What the peer methods share: the forward/backward split of a training graph, and the
translation of a rematerialisation decision into applications of the ``remat`` rule.

Every rematerialisation method decides *instances*: instance 0 of an op is its first computation
(at its place in the traced order), instances 1, 2, ... are recomputations; each reader instance
reads one instance of each of its producers.  :class:`RematDecision` holds that (plus the order
in which the method runs the instances), and :func:`realise` turns it into a plan of our own
rules:

* ``Remat(A, B)`` gives reader B a fresh copy of A, so a copy has one reader.  An instance read by
  several readers is realised by the *original* node (which keeps all its readers) -- for each op
  the instance with the most readers is the one the original realises (the first computation of
  an activation that sqrt(n) recomputes for two backward readers becomes a copy in the forward,
  the original runs in the backward).  Only where two instances of one op both have several
  readers is one of them duplicated per reader (``stats["duplicates"]``: extra recomputations the
  method itself would not run).
* Nodes are fixed readers-first (reverse topological order), so every application is
  ``remat(original, reader)`` and a copy reads what its original read before being re-wired: the
  sequence depends only on the graph and replays exactly.
* The schedule runs each instance where the method runs it (its event order); duplicates run just
  before their reader; an op nobody reads (a dead ``detach`` view) reads whatever instance its
  producer's original realises and runs right after it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ...cost.model import CostModel
from ...ir.graph import Graph, NodeKind, TensorKind, TRef
from ...ir.topo import pull_order
from ...schedule.baselines import TracedOrder
from ...simulate import simulate
from ...transform.remat import Remat, recomputable
from ...transform.rule import Application
from ..plan import Plan

T = TypeVar("T")
Inst = tuple[int, int]  # (op node id, instance); instance 0 is the op's first computation


# ---- the training graph ------------------------------------------------------------------------
def traced_order(g: Graph) -> list[int]:
    """PyTorch's order of the ops of ``g`` (the eager baseline's schedule)."""
    return TracedOrder().order(g)


def dominated_by_eager(peak: float, latency: float, eager_peak: float, eager_latency: float) -> bool:
    """A point that holds at least eager's peak and takes at least its time, and is not eager's own
    point: never a method's result (the one rule for every method, ``compare`` and the baselines)."""
    return peak >= eager_peak and latency >= eager_latency and (peak, latency) != (eager_peak, eager_latency)


def forward_ops(g: Graph) -> set[int]:
    """Ops of the forward pass: no output is a gradient (the importer marks the ancestors of the
    loss as forward: activations, the loss, and updated buffers such as batch-norm statistics)."""
    return {n.id for n in g.ops() if n.kind == NodeKind.OP and n.outputs
            and all(t.kind != TensorKind.GRADIENT for t in n.outputs)}


def kept_ops(g: Graph) -> set[int]:
    """Ops whose storage is (a view of) a graph output: alive to the end, never recomputed."""
    out = set()
    for r in g.outputs.values():
        out.add(r.node)
        out.add(g.storage_root(r).node)
    return out


def own_bytes(g: Graph, nid: int) -> int:
    """Bytes of the storages op ``nid`` allocates (0 for a view)."""
    return sum(t.nbytes for t in g.nodes[nid].outputs if t.alias is None and t.device == "device")


def candidates(g: Graph) -> set[int]:
    """Forward ops a peer may recompute: recomputable (not random; views included) and not only
    graph outputs (batch norm is one: its updated statistics are outputs, its activation is not;
    a copy recomputes them all and the graph's outputs stay the original's)."""
    kept = {g.storage_root(r) for r in g.outputs.values()} | set(g.outputs.values())
    return {v for v in forward_ops(g) if recomputable(g, v)
            and any(TRef(v, j) not in kept for j in range(len(g.nodes[v].outputs)))}


def storage_members(g: Graph) -> dict[int, set[int]]:
    """op id -> the ops that read any storage it owns, directly or through views (the storage's
    members in ``analysis.lifetimes``), plus the ops that read its view outputs."""
    out: dict[int, set[int]] = {v: set() for v in g.nodes}
    for n in g.nodes.values():
        if n.kind == NodeKind.PLACEHOLDER:
            continue
        for r in n.inputs():
            out[r.node].add(n.id)
            root = g.storage_root(r).node
            if root != r.node:
                out[root].add(n.id)
    for v in out:
        out[v].discard(v)
    return out


# ---- a method's decision ---------------------------------------------------------------------
@dataclass
class RematDecision:
    """What a rematerialisation method decided, in instances.

    ``events``: every instance the method runs, in the order it runs them (each op's instance 0
    included).  ``reads[(x, k)][p]``: the instance of producer p that instance k of op x reads
    (missing: instance 0)."""

    events: list[Inst]
    reads: dict[Inst, dict[int, int]] = field(default_factory=dict)

    def want(self, reader: Inst, producer: int) -> int:
        return self.reads.get(reader, {}).get(producer, 0)


def pull_events(g: Graph, recomputed: Iterable[Inst], reads: dict[Inst, dict[int, int]],
                late: Iterable[int] = ()) -> list[Inst]:
    """Events for a decision without its own timing: the traced order, each recomputed instance
    (and the first computation of each ``late`` op) run just before the first instance that reads
    it, its own missing inputs first."""
    late = set(late)
    extra = set(recomputed) | {(v, 0) for v in late}
    order = traced_order(g)
    done: set[Inst] = set()
    out: list[Inst] = []

    def wanted(x: Inst) -> list[Inst]:
        r = reads.get(x, {})
        return [(p, r.get(p, 0)) for p in g.preds(x[0]) if g.nodes[p].kind != NodeKind.PLACEHOLDER]

    for v in order:
        if v in late:
            continue
        stack: list[tuple[Inst, list[Inst]]] = [((v, 0), wanted((v, 0)))]
        while stack:
            x, todo = stack[-1]
            while todo:
                p = todo.pop(0)
                if p not in done and p in extra:
                    stack.append((p, wanted(p)))
                    break
            else:
                stack.pop()
                if x not in done:
                    done.add(x)
                    out.append(x)
    return out


def backward_start(g: Graph, order: list[int] | None = None) -> int:
    """Position in the traced order of the first op that depends on the loss (the backward's
    seed); the length of the order when there is none."""
    order = order or traced_order(g)
    loss = g.outputs.get("loss")
    if loss is None:
        return len(order)
    seen, stack = set(), list(g.users(loss.node))
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            stack.extend(g.users(v))
    return min((i for i, v in enumerate(order) if v in seen), default=len(order))


def two_instance_decision(g: Graph, recompute: set[int], readers: set[int]) -> RematDecision:
    """The checkpointing decision of sqrt(n) and the min-cut partitioner: every op in ``recompute``
    is computed again once (instance 1) for the backward; ``readers`` (backward ops) and the
    recomputed instances read instance 1 of recomputed producers, everything else instance 0.
    Only instances some reader needs are kept.

    A reader the trace placed in the forward (``detach`` views of activations that the backward
    reads later) is run late, just before its first reader, so that it reads the recomputed value
    where the backward needs it; readers nobody reads (dead ``detach`` ops) read the forward's."""
    order = traced_order(g)
    pos = {v: i for i, v in enumerate(order)}
    start = backward_start(g, order)
    outputs = {r.node for r in g.outputs.values()}
    reads: dict[Inst, dict[int, int]] = {}
    need: set[int] = set()
    late: set[int] = set()
    stack = []
    for x in sorted(readers, key=pos.__getitem__):
        if not g.users(x) and x not in outputs:
            continue
        ps = {p: 1 for p in g.preds(x) if p in recompute}
        if ps:
            reads[(x, 0)] = ps
            stack.extend(ps)
        if pos[x] < start and (ps or any(p in late for p in g.preds(x))):
            late.add(x)
    while stack:
        p = stack.pop()
        if p in need:
            continue
        need.add(p)
        ps = {q: 1 for q in g.preds(p) if q in recompute}
        if ps:
            reads[(p, 1)] = ps
            stack.extend(q for q in ps if q not in need)
    insts = [(p, 1) for p in sorted(need)]
    return RematDecision(pull_events(g, insts, reads, late), reads)


# ---- realisation as remat applications -------------------------------------------------------
@dataclass
class Realised:
    graph: Graph
    applications: list[Application]
    order: list[int]
    stats: dict[str, Any]


def _topo_rank(g: Graph) -> dict[int, int]:
    return {v: i for i, v in enumerate(g.topo_order())}


def realise(g: Graph, d: RematDecision) -> Realised:
    """The remat applications and schedule that run decision ``d`` on a copy of ``g`` (module
    docstring).  Raises ValueError when ``d`` recomputes an op the rule cannot."""
    g2 = g.copy()
    insts: dict[int, list[int]] = {}
    key = {}
    for i, (v, k) in enumerate(d.events):
        key[(v, k)] = i
        if k:
            insts.setdefault(v, []).append(k)
            if not recomputable(g, v):
                raise ValueError(f"the decision recomputes {g.nodes[v].name!r}, which cannot be recomputed")
    ops = [n.id for n in g.ops()]
    rank = _topo_rank(g)
    # an op nobody reads (a dead ``detach`` view) reads whichever instance the original realises
    # and runs right after it: it counts as no reader
    out_nodes = {r.node for r in g.outputs.values()}
    dead = {x for x in ops if not g.users(x) and x not in out_nodes and x not in insts}
    # readers of every instance
    readers: dict[Inst, list[Inst]] = {}
    for x in ops:
        if x in dead:
            continue
        for k in [0] + insts.get(x, []):
            for p in g.preds(x):
                if g.nodes[p].kind == NodeKind.PLACEHOLDER:
                    continue
                readers.setdefault((p, d.want((x, k), p)), []).append((x, k))
    # the instance each original realises: the one with the most realised readers
    orig: dict[int, int] = {}
    count: dict[Inst, int] = {}
    outputs = kept_ops(g)

    def realisations(x: Inst) -> int:
        return 1 if orig.get(x[0]) == x[1] else count.get(x, 0)

    for x in sorted(ops, key=rank.__getitem__, reverse=True):
        ks = [0] + insts.get(x, [])
        for k in ks:
            count[(x, k)] = sum(realisations(r) for r in readers.get((x, k), []))
        if len(ks) == 1 or (x in outputs and not count[(x, 0)]):
            orig[x] = 0  # a graph output is the forward's: its first computation stays
        else:
            orig[x] = max(ks, key=lambda k: (count[(x, k)], -k))
    # fix readers first; every copy is remat(original, reader) and is fixed at once
    rule = Remat()
    apps: list[Application] = []
    realises: dict[int, Inst] = {v: (v, orig.get(v, 0)) for v in g2.nodes}
    copies_of: dict[Inst, list[int]] = {}
    for n0 in sorted(ops, key=rank.__getitem__, reverse=True):
        stack = [n0]
        while stack:
            n = stack.pop()
            reader = realises[n]
            for m in g2.preds(n):
                if g2.nodes[m].kind == NodeKind.PLACEHOLDER:
                    continue
                p, have = realises[m]
                want = orig.get(p, 0) if n in dead else d.want(reader, p)
                if want == have:
                    continue
                app = Application(rule.name, (m, n))
                c = g2.new_id()
                rule.apply(g2, app)
                apps.append(app)
                realises[c] = (p, want)
                copies_of.setdefault((p, want), []).append(c)
                stack.append(c)
    # schedule: one realisation of every instance at the method's time, duplicates pulled
    primary: dict[Inst, int] = {}
    for v, inst in realises.items():
        if g2.nodes[v].kind != NodeKind.PLACEHOLDER and g2.nodes[v].recompute_of is None:
            primary[inst] = v
    for inst, cs in copies_of.items():  # else the copy whose reader runs first
        if inst not in primary:
            primary[inst] = min(cs, key=lambda c: key.get(realises[g2.users(c)[0]], len(key)))
    at = {inst: float(key.get(inst, len(key))) for inst in primary}
    for x in dead:
        at[(x, 0)] = max([at[(x, 0)]] + [at[realises[m]] + 0.5 for m in g2.preds(x)
                                           if g2.nodes[m].kind != NodeKind.PLACEHOLDER])
    anchors = sorted((at[inst], v) for inst, v in primary.items())
    # the anchors in order, each preceded by its inputs not yet scheduled; then any op left (none)
    order = pull_order(g2, [v for _, v in anchors] + [n.id for n in g2.ops()],
                       lambda v: (p for p in g2.preds(v) if g2.nodes[p].kind != NodeKind.PLACEHOLDER),
                       "the decision's schedule has a cycle")
    stats = {"recomputed": len(order) - len(ops),  # ops run more than once, duplicates included
             "duplicates": len(order) - len(primary),  # realisations beyond one per instance
             "moved_originals": sum(1 for k in orig.values() if k)}
    return Realised(g2, apps, order, stats)


# ---- plans -----------------------------------------------------------------------------------
def make_plan(method: str, label: str, r: Realised, cost: CostModel, **stats: Any) -> Plan:
    """A Plan of realised decision ``r``, simulated on ``cost``."""
    sim = simulate(r.graph, r.order, cost)
    return Plan(method, list(r.applications), list(r.order), sim.metrics(), label, {**r.stats, **stats})


def coarse_to_fine(values: Sequence[T]) -> list[T]:
    """``values`` (a sweep, e.g. budgets from high to low) in the order a method with a time budget
    runs them: both ends, then again and again the middle of the widest gap left (the first of
    equal ones) -- so a budget that runs out leaves the sweep evenly thinned rather than cut off at
    one end (a peer whose every point takes seconds would otherwise never reach its low budgets)."""
    n = len(values)
    if n <= 2:
        return list(values)
    picked = [0, n - 1]
    gaps = [(-(n - 1), 0, n - 1)]  # (minus the width, start, end): the widest first, then the first
    while gaps:
        _, a, b = heapq.heappop(gaps)
        if b - a > 1:
            m = (a + b) // 2
            picked.append(m)
            heapq.heappush(gaps, (-(m - a), a, m))
            heapq.heappush(gaps, (-(b - m), m, b))
    return [values[i] for i in picked]


@dataclass
class Failure:
    """A point a method could not produce (budget infeasible, thrashing, not solved in time)."""

    label: str
    reason: str


__all__ = ["Failure", "Inst", "Realised", "RematDecision", "backward_start", "candidates", "coarse_to_fine",
           "forward_ops", "kept_ops",
           "make_plan",
           "own_bytes", "pull_events", "realise", "storage_members", "traced_order", "two_instance_decision"]

"""F-Tree mutation rules (MAGIS section 5.1) over the F-Tree of the imported graph.

The F-Tree (``analysis.ftree``) is built once; which of its nodes are enabled, and with which n, is
read off the graph itself: an enabled node is a fission node whose ``members`` (the imported ops it
stands for, nested fission expanded) are the tree node's S.  The four rules:

* **Enable** -- a disabled leaf, or the parent of an enabled node, without enabled ancestors: the
  ``fission`` rule on S as it stands in the graph (the enabled children inside it become nested
  fission), at n = the smallest divisor of the split dimension.
* **Lift** -- an enabled node without enabled ancestors is disabled and its parent enabled (its enabled
  descendants stay enabled, now nested in the parent).
* **Disable** -- an enabled node without enabled descendants goes back to n = 1.
* **Mutate** -- an enabled node's n becomes the next number that divides its dimension.

Disable and Mutate reach a node nested in enabled ancestors by taking the ancestors back, changing it
and applying the ancestors again, in one application.  Applications name fission nodes by their ids
and F-Tree nodes by their S (node ids of the imported graph), so a plan replays without the F-Tree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..analysis.dgraph import DGraph, SplitError, plan_split
from ..analysis.ftree import FNode, FTree
from ..ir.graph import Graph, NodeKind, TRef
from ..ir.lint import recomputes_same
from .fission import Fission, apply_split, defission
from .ftree_text import FTreeNamed
from .rule import Application, Rule, RuleNotApplicable, RuleOption, Where


def _refission(g: Graph, nodes: list[int], comp: tuple[int, int, int], n: int) -> int:
    return apply_split(g, plan_split(g, DGraph(g, nodes), nodes, comp), n)


def _at(g: Graph, top: int, target: tuple[int, ...], change) -> list[int]:
    """Apply ``change(g, fid) -> ids that replace fid`` to the fission node standing for the
    F-Tree node ``target`` = (comp node, output, dim, |S|, min S), found at or under fission node
    ``top``; returns the ids that replace ``top``."""
    node = g.nodes.get(top)
    if node is None or node.kind != NodeKind.FISSION:
        raise RuleNotApplicable(f"node {top} is not a fission node")
    spec = node.fission
    if _identity(spec) == target:
        return change(g, top)
    if spec.origin is None or spec.comp is None:
        raise RuleNotApplicable(f"{node.name!r} does not record the nodes it replaced")
    n, comp = spec.n, spec.comp
    inner = defission(g, top)
    size, low = target[3], target[4]
    child = next((v for v in inner if g.nodes[v].kind == NodeKind.FISSION
                  and low in g.nodes[v].fission.members and len(g.nodes[v].fission.members) >= size), None)
    if child is None:
        raise RuleNotApplicable(f"{node.name!r} has no enabled F-Tree node of size {size} inside")
    nodes = [v for v in inner if v != child] + _at(g, child, target, change)
    return [_refission(g, nodes, comp, n)]


def _identity(spec) -> tuple[int, ...]:
    return (*(spec.comp or (-1, -1, -1)), len(spec.members), min(spec.members, default=-1))


class Disable(FTreeNamed, Rule):
    """Disable(F, comp node, output, dim, |S|, min S): the F-Tree node split along that component
    with that S, enabled at or under fission node F, goes back to n = 1 (it must have no enabled
    descendants)."""

    name = "disable"
    family = "fission"
    text = "F-Tree Disable: undo a fission"
    option = RuleOption("--disable", "ID", "Disable: take back enabled F-Tree node ID (one without enabled descendants)")

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        # params: (F, comp node, output, dim, |S|, min S)
        return ("node", "node", "n", "n", "n", "node")[:len(params)]

    def match(self, g: Graph, hot: Iterable[TRef] = (), where: Where | None = None) -> list[Application]:
        return []  # applications come from FTreeMutations

    def edit(self, g: Graph, app: Application) -> None:
        top, *target = app.params
        _at(g, top, tuple(target), _disable)


def _disable(g: Graph, fid: int) -> list[int]:
    if any(m.kind == NodeKind.FISSION for m in g.nodes[fid].fission.graph.ops()):
        raise RuleNotApplicable(f"{g.nodes[fid].name!r} has enabled descendants: disable them first")
    restored = defission(g, fid)
    for v in restored:  # a recomputed copy in S that now reads another fission node's output where its
        n = g.nodes.get(v)  # original reads the op itself: no longer the same values (``ir.lint``)
        if n is not None and n.recompute_of is not None and n.recompute_of in g.nodes \
                and not recomputes_same(g, n, g.nodes[n.recompute_of]):
            raise RuleNotApplicable(f"disabling {fid} leaves {n.name!r} reading other values than its original")
    return restored


class Mutate(FTreeNamed, Rule):
    """Mutate(F, comp node, output, dim, |S|, min S, n): that enabled F-Tree node is split into n
    parts instead."""

    name = "mutate"
    family = "fission"
    text = "F-Tree Mutate: change the number of parts"
    option = RuleOption("--mutate", "ID[:N]", "Mutate: split enabled F-Tree node ID into N parts instead (default: the next divisor)")

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        # params: (F, comp node, output, dim, |S|, min S, n)
        return ("node", "node", "n", "n", "n", "node", "n")[:len(params)]

    def match(self, g: Graph, hot: Iterable[TRef] = (), where: Where | None = None) -> list[Application]:
        return []

    def edit(self, g: Graph, app: Application) -> None:
        top, *target, n = app.params

        def change(h: Graph, fid: int) -> list[int]:
            comp = h.nodes[fid].fission.comp
            nodes = defission(h, fid)
            return [_refission(h, nodes, comp, n)]

        _at(g, top, tuple(target), change)


class Lift(FTreeNamed, Rule):
    """Lift(F, n, comp..., *S'): disable fission node F (no enabled ancestors) and enable the
    parent F-Tree node, whose S is S' once F is taken back, at n."""

    name = "lift"
    family = "fission"
    text = "F-Tree Lift: widen an enabled fission to its parent region"
    option = RuleOption("--lift", "ID", "Lift: disable enabled F-Tree node ID and enable its parent")

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        # params: (F, n, comp node, output, dim, *S)
        return ("node", "n", "node", "n", "n") + ("node",) * (len(params) - 5)

    def match(self, g: Graph, hot: Iterable[TRef] = (), where: Where | None = None) -> list[Application]:
        return []

    def edit(self, g: Graph, app: Application) -> None:
        fid, n, cn, cj, cd, *nodes = app.params
        defission(g, fid)
        _refission(g, list(nodes), (cn, cj, cd), n)


@dataclass
class Enabled:
    """An enabled F-Tree node: the top-level fission node it is (or lies under), its n, depth."""

    top: int
    path: tuple[int, ...]  # fission node ids from the top-level one down to its own
    n: int
    nested: bool
    leaf: bool  # no enabled descendants


class FTreeMutations:
    """The four mutation rules' applications on a graph, for the F-Tree of its imported graph."""

    def __init__(self, ftree: FTree) -> None:
        self.ft = ftree
        dg = ftree.dgraph
        self.by_s = {(frozenset(f.split.nodes), dg.component(f.split.comp)): f.id for f in ftree.nodes}

    def enabled(self, g: Graph) -> dict[int, Enabled]:
        """F-Tree node id -> how it is enabled in ``g``."""
        out: dict[int, Enabled] = {}

        def walk(graph: Graph, path: tuple[int, ...]) -> None:
            for m in graph.nodes.values():
                if m.kind != NodeKind.FISSION or m.fission is None or m.recompute_of is not None:
                    continue
                spec = m.fission
                f = self.by_s.get((spec.members, self.ft.dgraph.component(spec.comp))) if spec.comp else None
                leaf = not any(x.kind == NodeKind.FISSION for x in m.fission.graph.nodes.values())
                here = (*path, m.id)
                if f is not None:
                    out[f] = Enabled(here[0], here, m.fission.n, bool(path), leaf)
                walk(m.fission.graph, here)

        walk(g, ())
        return out

    def _current(self, g: Graph, f: FNode, on: dict[int, Enabled], without: int | None = None) -> list[int] | None:
        """S of ``f`` as it stands in ``g``: its ops, enabled descendants as their fission nodes
        (``without``: that one taken back); None if an enabled node straddles S's boundary."""
        s = set(f.split.nodes)
        cur = set(s)
        back: set[int] = set()
        for fid, e in on.items():
            if e.nested:
                continue
            spec = g.nodes[e.top].fission
            if spec.members <= s:
                cur -= spec.members
                if fid == without:
                    back = set(spec.origin.split) if spec.origin is not None else {-1}
                    cur |= back
                else:
                    cur.add(e.top)
            elif spec.members & s:
                return None
        if any(v not in g.nodes and v not in back for v in cur):
            return None
        return sorted(cur)

    def _comp(self, g: Graph, f: FNode, nodes: list[int]) -> tuple[int, int, int] | None:
        """A D-node of the split component on one of S's imported ops in ``nodes``."""
        s = set(nodes)
        for r, d in f.split.out_dims.items():
            if r.node in s:
                return (r.node, r.index, d)
        return None

    @staticmethod
    def _spec(g: Graph, e: Enabled):
        graph = g
        for fid in e.path:
            spec = graph.nodes[fid].fission
            graph = spec.graph
        return spec

    def _ancestors(self, f: FNode) -> list[int]:
        out = []
        while f.parent is not None:
            out.append(f.parent)
            f = self.ft.nodes[f.parent]
        return out

    def applications(self, g: Graph) -> list[Application]:
        """Every application of the four rules in ``g``."""
        on = self.enabled(g)
        apps: list[Application] = []
        for f in self.ft.nodes:
            for rule in ("fission", "disable", "mutate", "lift"):
                try:
                    apps.append(self.application(g, rule, f.id, on=on))
                except RuleNotApplicable:
                    pass
        return apps

    def application(self, g: Graph, rule: str, fid: int, n: int | None = None,
                    on: dict[int, Enabled] | None = None) -> Application:
        """The application of ``rule`` (fission = Enable, lift, disable, mutate) to F-Tree node
        ``fid`` in ``g`` (``n``: the fission number for Enable / Mutate, default the next divisor);
        ValueError saying why the rule does not apply."""
        if not 0 <= fid < len(self.ft.nodes):
            raise RuleNotApplicable(f"no F-Tree node {fid} (the tree has {len(self.ft.nodes)} nodes)")
        f = self.ft.nodes[fid]
        on = self.enabled(g) if on is None else on
        e = on.get(fid)
        up_on = any(a in on for a in self._ancestors(f))
        if rule == "fission":
            if e is not None:
                raise RuleNotApplicable(f"F-Tree node {fid} is enabled already (n={e.n}); mutate it to change n")
            if up_on:
                raise RuleNotApplicable(f"F-Tree node {fid} lies inside an enabled node")
            if f.children and not any(c in on for c in f.children):
                raise RuleNotApplicable(f"F-Tree node {fid} is neither a leaf nor the parent of an enabled node "
                                 f"(enable a leaf below it first)")
            nodes = self._current(g, f, on)
            comp = self._comp(g, f, nodes) if nodes else None
            if comp is None:
                raise RuleNotApplicable(f"F-Tree node {fid}: an enabled node or another rule cuts across its sub-graph")
            n = f.split.divisors()[0] if n is None else n
            if n < 2 or f.split.length % n:
                raise RuleNotApplicable(f"F-Tree node {fid}: n={n} does not divide its dimension of size {f.split.length}")
            return Fission.application(n, comp, nodes)
        if e is None:
            raise RuleNotApplicable(f"F-Tree node {fid} is not enabled")
        target = _identity(self._spec(g, e))
        if rule == "disable":
            if not e.leaf:
                raise RuleNotApplicable(f"F-Tree node {fid} has enabled descendants: disable them first")
            return Application("disable", (e.top, *target))
        if rule == "mutate":
            o = g.nodes[e.top].fission.origin if not e.nested else None
            length = o.length if o is not None else f.split.length
            if n is None:
                bigger = [k for k in range(e.n + 1, length + 1) if length % k == 0]
                if not bigger:
                    raise RuleNotApplicable(f"F-Tree node {fid}: n={e.n} is the largest divisor of {length}")
                n = bigger[0]
            if n < 2 or n == e.n or length % n:
                raise RuleNotApplicable(f"F-Tree node {fid}: n={n} is not a new divisor of its dimension of size {length}")
            return Application("mutate", (e.top, *target, n))
        if rule == "lift":
            if up_on:
                raise RuleNotApplicable(f"F-Tree node {fid} lies inside an enabled node")
            if f.parent is None:
                raise RuleNotApplicable(f"F-Tree node {fid} is a root: there is no parent to lift it to")
            p = self.ft.nodes[f.parent]
            nodes = self._current(g, p, on, without=fid)
            comp = self._comp(g, p, nodes) if nodes is not None else None
            if comp is None:
                raise RuleNotApplicable(f"F-Tree node {fid}: an enabled node or another rule cuts across its parent")
            n = e.n if p.split.length % e.n == 0 else p.split.divisors()[0]
            return Application("lift", (e.top, n, *comp, *nodes))
        raise RuleNotApplicable(f"unknown F-Tree rule {rule!r} (fission, lift, disable, mutate)")


class FTreeRule(Rule):
    """The F-Tree mutation rules as one rule object for a search: ``match`` lists the applications of
    Enable, Lift, Disable and Mutate; each is applied by its own rule (``fission``, ``lift``,
    ``disable``, ``mutate``)."""

    name = "ftree"

    def __init__(self, ftree: FTree | Callable[[], FTree]) -> None:
        """``ftree``: the F-Tree, or a function that builds it when the rule is first matched (on a
        long graph the F-Tree takes seconds, and a short search may never match the rule)."""
        self._ftree = ftree
        self._mutations: FTreeMutations | None = None

    @property
    def mutations(self) -> FTreeMutations:
        if self._mutations is None:
            self._mutations = FTreeMutations(self._ftree if isinstance(self._ftree, FTree) else self._ftree())
        return self._mutations

    def match(self, g: Graph, hot: Iterable[TRef] = (), where: Where | None = None) -> list[Application]:
        return self.mutations.applications(g)


__all__ = ["Disable", "Enabled", "FTreeMutations", "FTreeRule", "Lift", "Mutate", "SplitError"]

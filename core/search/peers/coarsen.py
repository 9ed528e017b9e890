"""Checkmate at the granularity its paper solves at: the traced order cut into *groups* of
consecutive ops, each a node of a coarse Checkmate problem (``checkmate.Problem`` with ``groups``).

Checkmate (Jain et al., MLSys 2020) formulates its MILP over the layers of a network; formulated
per aten op it has O(n^2) variables and no solver answers on a graph of thousands of ops.  A
:class:`Grouping` cuts the traced order into runs of consecutive ops:

* ``module depth D`` -- a run of ops whose module paths (``Node.module``) agree on their first D
  components (a module call at depth D: "encoder.layer.3" at depth 4), forward and backward alike
  (a level where one run holds more than a twelfth of the ops -- a stack of layers -- and every
  coarser one is not used);
* ``segments N`` -- the traced order in about N runs of about equal op counts, cut only between
  the deepest module calls.

Either way a run never mixes recomputable forward ops, other forward ops (random ops) and
backward ops (:func:`kinds`): only a group of recomputable ops with a candidate among them
(``common.candidates``) is recomputed, so a group that reads a tensor no recomputation can
reproduce is never one.  :func:`levels` yields the groupings from the finest (the deepest module
level) to the coarsest (the fewest segments); ``checkmate`` takes the finest whose MILP fits.

:func:`coarse_problem` is Checkmate's problem on a grouping.  A group's cost is the sum of its ops'
times.  Its *outputs* -- the tensors made inside it and read outside it (or graph outputs), with
the storages such a view aliases -- are bundled into a few checkpoints: the storages a later
forward group reads, the storages only the backward reads, and per storage of another group the
views of it the group makes (no bytes; kept only while that storage is).  A bundle is kept or
freed whole, freed after the last reader of any of its storages.  A group reads the bundles its
ops read, and is a member of those its storages live in.  While a group runs it holds its
internal working set: ``work`` is the peak, over its ops in traced order, of the bytes it has
allocated and not yet freed (an internal tensor is freed after its last reader in the group; its
outputs stay).  Its inputs are freed only once the whole group has run (a coarse stage frees at
its end).  So the model over-counts memory rather than under-counts it -- not exactly: every plan
is measured by the simulator, and ``checkmate`` keeps only those within their budget.

:func:`coarse_decision` maps a coarse solution back to instances of ops: a group recomputed in
stage t recomputes its ops (in traced order, before the stage's group), then every recomputation
that no later instance reads is dropped -- a group recomputed for one of its outputs recomputes
only the ops that output needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ...ir.graph import Graph, NodeKind, TRef
from .common import RematDecision, backward_start, candidates, traced_order

CAND, FORWARD, BACKWARD = "c", "f", "b"
MIN_SEGMENTS = 8


@dataclass
class Grouping:
    name: str  # "module depth 4", "segments 120" (what a plan's stats["granularity"] says)
    groups: list[list[int]]  # op ids, each group consecutive in the traced order


def kinds(g: Graph, order: list[int] | None = None) -> dict[int, str]:
    """Per op: BACKWARD from the backward's first op on (the forward ops the trace places among the
    backward's -- weight transposes, views -- run with it); before it CAND where the op can be
    recomputed (``transform.remat.recomputable``), else FORWARD (random ops).  The forward's
    recomputable ops that are no candidates themselves (``detach`` views the backward reads, the
    update of a batch-norm counter that is a graph output) join the candidates' groups: a
    recomputed group recomputes them where a reader needs them (the backward then reads the
    ``detach`` of the recomputed activation, not the first one's)."""
    from ...transform.remat import recomputable

    order = order if order is not None else traced_order(g)
    start = backward_start(g, order)
    return {v: BACKWARD if k >= start else CAND if recomputable(g, v) else FORWARD for k, v in enumerate(order)}


def _runs(order: list[int], key) -> list[list[int]]:
    groups: list[list[int]] = []
    prev = object()
    for k, v in enumerate(order):
        x = key(k, v)
        if groups and x == prev:
            groups[-1].append(v)
        else:
            groups.append([v])
            prev = x
    return groups


def module_groups(g: Graph, order: list[int], kind: dict[int, str], depth: int) -> list[list[int]]:
    """Runs of ops of one kind whose module paths agree on their first ``depth`` components."""

    def key(_k: int, v: int):
        m = g.nodes[v].module
        return kind[v], ".".join(m.split(".")[:depth]) if m else ""

    return _runs(order, key)


def segment_groups(order: list[int], kind: dict[int, str], n: int,
                   atoms: list[list[int]] | None = None) -> list[list[int]]:
    """The traced order in about ``n`` runs of about equal op counts, cut where the kind of op
    changes; given ``atoms`` (runs of the order: the deepest module calls), cut only between them
    (an atom longer than a run is one run)."""
    total = max(len(order), 1)
    if atoms is None:
        return _runs(order, lambda k, v: (kind[v], k * n // total))
    target = total / max(n, 1)
    groups: list[list[int]] = []
    prev = None
    for atom in atoms:
        k = kind[atom[0]]
        if groups and k == prev and len(groups[-1]) + len(atom) <= target:
            groups[-1].extend(atom)
        else:
            groups.append(list(atom))
        prev = k
    return groups


def levels(g: Graph, order: list[int] | None = None, kind: dict[int, str] | None = None) -> Iterator[Grouping]:
    """Groupings from the finest to the coarsest, each with fewer groups than the one before: module
    depths from the deepest to 1 (while no group holds more than a twelfth of the ops: a stack of
    layers is not a module call), then segments of the deepest module calls, 0.7 times fewer each,
    down to ``MIN_SEGMENTS``."""
    order = order if order is not None else traced_order(g)
    kind = kind if kind is not None else kinds(g, order)
    deepest = max((len(g.nodes[v].module.split(".")) for v in order if g.nodes[v].module), default=0)
    last = len(order)
    atoms = module_groups(g, order, kind, deepest) if deepest else None
    for d in range(deepest, 0, -1):
        gr = module_groups(g, order, kind, d)
        if max(map(len, gr)) > max(16, len(order) // 12):
            break
        if len(gr) < last:
            last = len(gr)
            yield Grouping(f"module depth {d}", gr)
    n = int(last * 0.7)
    while n >= MIN_SEGMENTS:
        gr = segment_groups(order, kind, n, atoms)
        if len(gr) < last:
            last = len(gr)
            yield Grouping(f"segments {n}", gr)
        n = int(n * 0.7)
    n = min(MIN_SEGMENTS, len(order)) or 1
    gr = segment_groups(order, kind, n)
    if len(gr) < last:
        yield Grouping(f"segments {n}", gr)


def coarsest(g: Graph) -> Grouping:
    """The last grouping :func:`levels` yields (or one group per op of a graph too small for any)."""
    out = Grouping("op", [[v] for v in traced_order(g)])
    for grouping in levels(g):
        out = grouping
    return out


def _own(t) -> int:
    return t.nbytes if t.alias is None and t.device == "device" else 0


def coarse_parts(g: Graph, cost, grouping: Grouping, backward_only: bool = False) -> tuple[tuple, dict]:
    """What Checkmate's problem on ``grouping`` is made of (module docstring): the arguments of
    ``checkmate.assemble`` (node i is group i) and the coarse problem's own fields (``groups``,
    ``granularity``, the working sets ``work``, ``out_refs``, ``recompute_from``);
    ``checkmate.coarse_problem`` puts them together."""
    groups = grouping.groups
    gid = {v: i for i, grp in enumerate(groups) for v in grp}
    kind = kinds(g)
    kept_roots = {g.storage_root(r) for r in g.outputs.values()}
    exported: set[TRef] = set()
    for r in g.outputs.values():
        if r.node in gid:
            exported.add(r)
            root = g.storage_root(r)
            if root.node in gid:
                exported.add(root)
    for v, i in gid.items():
        for r in g.nodes[v].inputs():
            if r.node in gid and gid[r.node] != i:
                exported.add(r)
            root = g.storage_root(r)
            if root.node in gid and gid[root.node] != i:
                exported.add(root)
    # a view read outside its group keeps its storage: the storage is an output too
    for r in list(exported):
        root = g.storage_root(r)
        if root.node in gid:
            exported.add(root)
    # a group's outputs are bundled into few checkpoints (Checkmate's one value per layer; per
    # tensor, the S variables of a coarse problem are as many as per op): the storages a forward
    # op of a later group reads ("f": the layer's activations), the storages only the backward
    # reads ("b": what it saves for the backward), and per storage of another group (or input) the
    # views of it the group makes (no bytes; kept only while that storage is)
    fwd_read: set[TRef] = set()
    for v, i in gid.items():
        if kind[v] == BACKWARD:
            continue
        for r in g.nodes[v].inputs():
            root = g.storage_root(r)
            if root.node in gid and gid[root.node] != i:
                fwd_read.add(root)
    pos = {v: k for k, v in enumerate(v for grp in groups for v in grp)}
    key_of: dict[TRef, tuple] = {}

    def key(r: TRef) -> tuple:
        if r not in key_of:
            i = gid[r.node]
            root = g.storage_root(r)
            if root.node in gid and gid[root.node] == i:
                key_of[r] = (i, "f" if root in fwd_read else "b")
            else:
                key_of[r] = (i, "v", key(root) if root.node in gid else None)
        return key_of[r]

    val: dict[tuple, tuple[int, int]] = {}
    outs: list[list[int]] = [[] for _ in groups]
    kept = [0] * len(groups)
    refs: list[list[list[TRef]]] = [[] for _ in groups]
    for r in sorted(exported, key=lambda r: (pos[r.node], r.index)):
        i = gid[r.node]
        k = key(r)
        if k not in val:
            val[k] = (i, len(outs[i]))
            outs[i].append(0)
            refs[i].append([])
        x = val[k]
        refs[i][x[1]].append(r)
        if g.storage_root(r) == r:
            own = _own(g.tensor(r))
            if r in kept_roots:
                kept[i] += own
            else:
                outs[i][x[1]] += own
    base = {val[k]: val[k[2]] for k in val if k[1] == "v" and k[2] is not None}
    reads: list[set] = [set() for _ in groups]
    owners: list[set] = [set() for _ in groups]
    for v, i in gid.items():
        for r in g.nodes[v].inputs():
            if r.node in gid and gid[r.node] != i:
                reads[i].add(val[key(r)])
            root = g.storage_root(r)
            if root.node in gid and gid[root.node] != i:
                owners[i].add(val[key(root)])
    cst = [float(sum(cost.node_time(g, g.nodes[v]) for v in grp)) for grp in groups]
    ops_cand = candidates(g)
    cand = {i for i, grp in enumerate(groups) if all(kind[v] == CAND for v in grp) and any(v in ops_cand for v in grp)}
    work = [working_set(g, grp, exported, kept_roots) for grp in groups]
    resident = sum(_own(t) for p in g.placeholders() for t in p.outputs)
    back = next((i for i, grp in enumerate(groups) if kind[grp[0]] == BACKWARD), len(groups))
    return (([grp[0] for grp in groups], cst, outs, kept, reads, owners, base, cand, resident),
            {"groups": [list(x) for x in groups], "granularity": grouping.name, "work": work, "out_refs": refs,
             "recompute_from": back if backward_only else 0})


def working_set(g: Graph, group: list[int], exported: set[TRef], kept_roots: set[TRef]) -> int:
    """The peak bytes group ``group`` holds of what it allocates while its ops run in order: every
    storage it allocates from its op on, an internal one (not in ``exported``) freed after its last
    reader in the group (directly or through a view)."""
    inside = set(group)
    last: dict[TRef, int] = {}
    for k, v in enumerate(group):
        for r in g.nodes[v].inputs():
            root = g.storage_root(r)
            if root.node in inside:
                last[root] = k
    live = peak = 0
    frees: dict[int, int] = {}
    for k, v in enumerate(group):
        node = g.nodes[v]
        for j, t in enumerate(node.outputs):
            b = _own(t)
            if not b:
                continue
            live += b
            r = TRef(v, j)
            if r not in exported and r not in kept_roots:
                at = last.get(r, k)  # an output nobody reads dies right after its op
                frees[at] = frees.get(at, 0) + b
        peak = max(peak, live)
        live -= frees.pop(k, 0)
    return peak


def coarse_decision(g: Graph, groups: list[list[int]], chosen: set[tuple[int, int]]) -> RematDecision:
    """Stage by stage: the recomputed groups' ops in index order, then the stage's group; each
    instance reads the latest computed instance of its inputs.  Recomputations nobody reads are
    dropped and each op's instances numbered again 0, 1, ..."""
    n = len(groups)
    per_stage: list[list[int]] = [[] for _ in range(n)]
    for t, i in chosen:
        per_stage[t].append(i)
    cur: dict[int, int] = {}
    events: list[tuple[int, int]] = []
    reads: dict[tuple[int, int], dict[int, int]] = {}
    for t in range(n):
        for i in sorted(per_stage[t]) + [t]:
            for v in groups[i]:
                k = cur.get(v, -1) + 1
                cur[v] = k
                events.append((v, k))
                rd = {q: cur[q] for q in g.preds(v) if g.nodes[q].kind != NodeKind.PLACEHOLDER and cur.get(q, 0)}
                if rd:
                    reads[(v, k)] = rd
    used: set[tuple[int, int]] = set()
    keep: list[tuple[int, int]] = []
    for ev in reversed(events):
        if ev[1] == 0 or ev in used:
            keep.append(ev)
            used.update(reads.get(ev, {}).items())
    keep.reverse()
    renum: dict[tuple[int, int], int] = {}
    count: dict[int, int] = {}
    for v, k in keep:
        renum[(v, k)] = count.get(v, 0)
        count[v] = renum[(v, k)] + 1
    new_reads = {}
    for ev in keep:
        rd = {q: renum[(q, k)] for q, k in reads.get(ev, {}).items()}
        rd = {q: k for q, k in rd.items() if k}
        if rd:
            new_reads[(ev[0], renum[ev])] = rd
    return RematDecision([(v, renum[(v, k)]) for v, k in keep], new_reads)


__all__ = ["BACKWARD", "CAND", "FORWARD", "MIN_SEGMENTS", "Grouping", "coarse_decision", "coarse_parts",
           "coarsest", "kinds", "levels", "module_groups", "segment_groups", "working_set"]

"""Substitution rules as data: a source pattern, a target pattern and the mapping of their outputs
(OCGGS section 2, TASO's rule format), with the matcher and the rewriter that every rule shares.

A rule phi = (G_s, G_t, f) is written as two lists of pattern ops (:class:`POp`).  A pattern op's
arguments are templates over the aten arguments of our IR:

* ``In("X")`` -- an input of the pattern: any tensor, the same one wherever ``X`` appears;
* ``Ref("y", k)`` -- output ``k`` of the pattern op named ``y`` (an edge inside the pattern);
* ``Var("s")`` -- a non-tensor argument (a stride, a dimension), equal wherever ``s`` appears;
* ``Fn(f)`` -- target only: a value computed from the match (``f(match)``), e.g. split sizes;
* anything else -- a literal that the node's argument must equal; lists and tuples match
  element-wise.

A match (:class:`Match`) maps the source ops injectively onto graph ops of the same aten overload
whose arguments unify with the templates, and holds OCGGS's conditions: the match is an induced
sub-graph (no input of the pattern is an output of a matched op) and every edge that leaves it
starts at a mapped output (``Substitution.outputs``); recomputed ops and ops with recomputed copies
are left alone.  The rewrite adds the target ops (output shapes from running each op on meta
tensors), points every reader of a mapped output at its image and erases the source ops, through
the graph's checked primitives, so the rule's inverse is its journal run backwards.  A rewrite
that would close a cycle (a pattern input computed from a pattern output) is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ...errors import RuleNotApplicable
from ...ir import ops
from ...ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef


@dataclass(frozen=True)
class In:
    name: str


@dataclass(frozen=True)
class Opt:
    """An optional input: a tensor (then like ``In``) or None (an absent bias)."""

    name: str


@dataclass(frozen=True)
class Ref:
    node: str
    index: int = 0


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Fn:
    fn: Callable[[Match], Any]


@dataclass(frozen=True)
class POp:
    """One op of a pattern: its name (for ``Ref``), aten overload and argument templates."""

    name: str
    op: str
    args: tuple = ()
    kwargs: tuple[tuple[str, Any], ...] = ()


def pop(name: str, op: str, *args: Any, **kwargs: Any) -> POp:
    """``pop("y", "aten.mm.default", In("A"), In("B"))`` -- a pattern op, briefly."""
    return POp(name, op if op.count(".") == 2 else f"aten.{op}", tuple(args), tuple(sorted(kwargs.items())))


@dataclass
class Match:
    """A source pattern bound to a graph: pattern ops -> node ids, inputs -> tensors, variables ->
    values, plus the rule's extra parameters (``Substitution.extras``)."""

    g: Graph
    nodes: dict[str, int] = field(default_factory=dict)
    tensors: dict[str, TRef] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    extra: tuple[int, ...] = ()

    def copy(self) -> Match:
        return Match(self.g, dict(self.nodes), dict(self.tensors), dict(self.values), self.extra)

    def meta(self, name: str) -> TensorMeta:
        """The tensor bound to input ``name`` (or output 0 of the source op ``name``)."""
        ref = self.tensors.get(name)
        return self.g.tensor(ref if ref is not None else TRef(self.nodes[name], 0))

    def shape(self, name: str) -> tuple[int, ...]:
        return self.meta(name).shape


@dataclass(frozen=True)
class Substitution:
    """phi = (G_s, G_t, f): ``source`` and ``target`` pattern ops, ``outputs`` maps each source
    tensor that may be read outside the match to its target tensor.  ``kind`` is "A-Trans"
    (aggregates ops: fewer, larger kernels) or "I-Trans" (an identity that opens the way for
    others); ``training`` says whether the rule stays valid on a training step (a rewrite of
    parameters' values is only valid on an inference graph).  ``unordered`` lists groups of source
    op positions that are interchangeable (matched with ascending node ids, so a symmetric match is
    found once); ``guard`` is any further condition on a match; ``extras`` gives the rule's numeric
    parameters for a match (one application each), e.g. the kernel size to enlarge to."""

    name: str
    text: str
    kind: str
    source: tuple[POp, ...]
    target: tuple[POp, ...]
    outputs: tuple[tuple[Ref, Ref], ...]
    training: bool = True
    unordered: tuple[tuple[int, ...], ...] = ()
    guard: Callable[[Match], bool] | None = None
    extras: Callable[[Match], Iterable[tuple[int, ...]]] | None = None

    def __post_init__(self) -> None:
        names = [p.name for p in self.source] + [p.name for p in self.target]
        if len(set(names)) != len(names):
            raise ValueError(f"substitution {self.name!r}: pattern op names must be distinct")
        if not self.source or not self.target or not self.outputs:
            raise ValueError(f"substitution {self.name!r} needs source, target and outputs")

    @property
    def n_source(self) -> int:
        return len(self.source)


# ---- unification ---------------------------------------------------------------------------------
class _NoMatch(Exception):
    pass


def _unify(t: Any, v: Any, m: Match, pending: dict[str, TRef]) -> None:
    if isinstance(t, In):
        if not isinstance(v, TRef):
            raise _NoMatch
        old = m.tensors.setdefault(t.name, v)
        if old != v:
            raise _NoMatch
    elif isinstance(t, Opt):
        if v is None:
            if m.tensors.get(t.name) is not None or m.values.setdefault(t.name, None) is not None:
                raise _NoMatch
        else:
            _unify(In(t.name), v, m, pending)
    elif isinstance(t, Ref):
        if not isinstance(v, TRef) or v.index != t.index:
            raise _NoMatch
        bound = m.nodes.get(t.node, pending.get(t.node, TRef(v.node, -1)).node)
        if bound != v.node:
            raise _NoMatch
        if t.node not in m.nodes:
            pending[t.node] = v
    elif isinstance(t, Var):
        if isinstance(v, TRef):
            raise _NoMatch
        if t.name in m.values:
            if m.values[t.name] != v:
                raise _NoMatch
        else:
            m.values[t.name] = v
    elif isinstance(t, (list, tuple)):
        if not isinstance(v, (list, tuple)) or len(v) != len(t):
            raise _NoMatch
        for a, b in zip(t, v, strict=True):
            _unify(a, b, m, pending)
    elif isinstance(t, Fn):
        raise ValueError("Fn templates belong to target patterns")
    else:
        if isinstance(v, TRef) or v != t:
            raise _NoMatch


def _bind(p: POp, nid: int, m: Match, pending: dict[str, TRef]) -> bool:
    """Bind pattern op ``p`` to node ``nid`` (in place; False and ``m`` unusable if it fails)."""
    node = m.g.nodes[nid]
    if node.op != p.op or node.kind != NodeKind.OP or nid in m.nodes.values():
        return False
    args = node.args
    if len(args) < len(p.args):  # trailing arguments left at their defaults (cat's dim 0)
        defaults = schema_defaults(node.op)
        if len(defaults) < len(p.args) or any(d is _REQUIRED for d in defaults[len(args):len(p.args)]):
            return False
        args = list(args) + list(defaults[len(args):len(p.args)])
    if len(args) != len(p.args) or set(node.kwargs) != {k for k, _ in p.kwargs}:
        return False
    m.nodes[p.name] = nid
    try:
        _unify(p.args, args, m, pending)
        for k, t in p.kwargs:
            _unify(t, node.kwargs[k], m, pending)
    except _NoMatch:
        return False
    return True


_REQUIRED = object()


@cache
def schema_defaults(op: str) -> tuple[Any, ...]:
    """The default of each positional argument of aten overload ``op`` (``_REQUIRED`` where there
    is none), from its schema."""
    from ...ir.torch_bridge import resolve_op

    try:
        schema = resolve_op(op)._schema
    except (AttributeError, ValueError, RuntimeError):
        return ()
    out = []
    for a in schema.arguments:
        if a.kwarg_only:
            break
        d = a.default_value if a.has_default_value() else _REQUIRED
        out.append(list(d) if isinstance(d, tuple) else d)
    return tuple(out)


def _templates(x: Any) -> Iterable[Any]:
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _templates(y)
    else:
        yield x


# memos keyed by the pattern's identity (each entry holds its key's object, so an id is never reused
# while it is in there); rules made at run time (OCGGS's, a test's) could grow them, so each is
# emptied once it holds MEMO_MAX entries
MEMO_MAX = 4096
_USES: dict[int, tuple[POp, list[Any]]] = {}
_ORDERS: dict[tuple[int, int], tuple[Substitution, list[int]]] = {}


def _uses(p: POp) -> list[Any]:
    """The templates of ``p``'s arguments, flattened (memoised per pattern op)."""
    hit = _USES.get(id(p))
    if hit is None or hit[0] is not p:
        if len(_USES) >= MEMO_MAX:
            _USES.clear()
        hit = _USES[id(p)] = (p, list(_templates(p.args)) + [t for _, v in p.kwargs for t in _templates(v)])
    return hit[1]


# ---- matching ------------------------------------------------------------------------------------
def _candidates(sub: Substitution, i: int, m: Match, pending: dict[str, TRef]) -> Iterable[int]:
    p = sub.source[i]
    g = m.g
    if p.name in pending:
        return (pending[p.name].node,)
    for t in _uses(p):
        if isinstance(t, Ref) and t.node in m.nodes:
            return g.readers(TRef(m.nodes[t.node], t.index))
        if isinstance(t, In) and t.name in m.tensors:
            return g.readers(m.tensors[t.name])
    return g.nodes_of(p.op)


def _order(sub: Substitution, first: int) -> list[int]:
    """Source positions from ``first`` on, each connected to an earlier one where possible
    (memoised per rule and first position)."""
    hit = _ORDERS.get((id(sub), first))
    if hit is None or hit[0] is not sub:
        if len(_ORDERS) >= MEMO_MAX:
            _ORDERS.clear()
        hit = _ORDERS[(id(sub), first)] = (sub, _make_order(sub, first))
    return hit[1]


def _make_order(sub: Substitution, first: int) -> list[int]:
    order = [first]
    names = {sub.source[first].name}
    ins = {t.name for t in _uses(sub.source[first]) if isinstance(t, In)}
    rest = [i for i in range(sub.n_source) if i != first]
    while rest:
        def linked(i: int, names: set[str] = names, ins: set[str] = ins) -> bool:
            p = sub.source[i]
            us = _uses(p)
            if any(isinstance(t, Ref) and t.node in names for t in us) or any(
                    isinstance(t, (In, Opt)) and t.name in ins for t in us):
                return True
            return any(isinstance(t, Ref) and t.node == p.name for j in order for t in _uses(sub.source[j]))
        i = next((i for i in rest if linked(i)), rest[0])
        rest.remove(i)
        order.append(i)
        names.add(sub.source[i].name)
        ins |= {t.name for t in _uses(sub.source[i]) if isinstance(t, In)}
    return order


def _search(sub: Substitution, order: list[int], k: int, m: Match, pending: dict[str, TRef],
            out: list[Match]) -> None:
    if k == len(order):
        out.append(m)
        return
    p = sub.source[order[k]]
    for nid in list(_candidates(sub, order[k], m, pending)):
        m2 = m.copy()
        pend = dict(pending)
        pend.pop(p.name, None)
        if _bind(p, nid, m2, pend):
            _search(sub, order, k + 1, m2, pend, out)


def find_matches(g: Graph, sub: Substitution, *, anchor: Iterable[int] | None = None) -> list[tuple[int, ...]]:
    """Every valid application's parameters (source op ids in source order, then extras) of ``sub``
    in ``g``; with ``anchor``, only the matches that contain one of those nodes."""
    found: dict[tuple[int, ...], None] = {}
    if anchor is None:
        starts = [(0, g.nodes_of(sub.source[0].op))]
    else:
        ids = [v for v in anchor if v in g.nodes]
        starts = [(i, [v for v in ids if g.nodes[v].op == p.op]) for i, p in enumerate(sub.source)]
    for first, nodes in starts:
        order = _order(sub, first)
        for nid in nodes:
            m = Match(g)
            pending: dict[str, TRef] = {}
            if not _bind(sub.source[first], nid, m, pending):
                continue
            res: list[Match] = []
            _search(sub, order, 1, m, pending, res)
            for mm in res:
                if not valid(g, sub, mm):
                    continue
                ids_ = tuple(mm.nodes[p.name] for p in sub.source)
                for extra in (sub.extras(mm) if sub.extras else [()]):
                    found[ids_ + tuple(extra)] = None
    return sorted(found)


def bind(g: Graph, sub: Substitution, params: tuple[int, ...]) -> Match:
    """The match that an application's parameters name; RuleNotApplicable if it is not one now."""
    n = sub.n_source
    if len(params) < n or any(v not in g.nodes for v in params[:n]):
        raise RuleNotApplicable(f"{sub.name}{params}: not nodes of this graph")
    m = Match(g, extra=tuple(params[n:]))
    pending: dict[str, TRef] = {}
    for p, nid in zip(sub.source, params[:n], strict=True):
        if pending.pop(p.name, TRef(nid, 0)).node != nid:
            raise RuleNotApplicable(f"{sub.name}{params}: {g.nodes[nid].name!r} is not the op the pattern reads")
        if not _bind(p, nid, m, pending):
            raise RuleNotApplicable(f"{sub.name}: {g.nodes[nid].name!r} does not match its {p.op} op")
    if pending or not valid(g, sub, m):
        raise RuleNotApplicable(f"{sub.name}{params}: the pattern's conditions do not hold here")
    if sub.extras is not None and tuple(params[n:]) not in {tuple(e) for e in sub.extras(m)}:
        raise RuleNotApplicable(f"{sub.name}{params}: parameters {params[n:]} are not offered here")
    return m


def valid(g: Graph, sub: Substitution, m: Match) -> bool:
    """OCGGS's conditions on a complete binding, then the rule's guard."""
    ids = [m.nodes[p.name] for p in sub.source]
    if len(set(ids)) != len(ids):
        return False
    for group in sub.unordered:
        seq = [ids[i] for i in group]
        if seq != sorted(seq):
            return False
    inside = set(ids)
    if any(r.node in inside for r in m.tensors.values()):
        return False  # not induced: an input of the pattern is made inside the match
    if g.meta.get("mode") == "train" and not sub.training:
        return False
    visible = {TRef(m.nodes[s.node], s.index) for s, _ in sub.outputs}
    graph_outs = g.output_refs()
    for v in ids:
        node = g.nodes[v]
        if node.recompute_of is not None or g.copies(v):
            return False
        for j in range(len(node.outputs)):
            ref = TRef(v, j)
            if ref in visible:
                continue
            if ref in graph_outs or any(u not in inside for u in g.readers(ref)):
                return False  # an edge leaves the match from an unmapped output
    if sub.guard is not None and not sub.guard(m):
        return False
    return True


# ---- rewriting -----------------------------------------------------------------------------------
def _instantiate(t: Any, m: Match, made: dict[str, int]) -> Any:
    if isinstance(t, In):
        return m.tensors[t.name]
    if isinstance(t, Opt):
        return m.tensors.get(t.name)
    if isinstance(t, Ref):
        return TRef(made[t.node], t.index)
    if isinstance(t, Var):
        return m.values[t.name]
    if isinstance(t, Fn):
        return t.fn(m)
    if isinstance(t, list):
        return [_instantiate(x, m, made) for x in t]
    if isinstance(t, tuple):
        return [_instantiate(x, m, made) for x in t]  # aten list arguments are lists in the IR
    return t


def _reaches(g: Graph, starts: Iterable[int], targets: set[int], skip: set[int]) -> bool:
    """Whether a path leaves ``starts`` (through nodes outside ``skip``) and reaches a node of
    ``targets``: searched from both ends at once, one node each in turn, so the cost is about twice
    the smaller of the two cones (a match early in an unrolled RNN has a huge forward cone; its
    inputs, a weight and a slice of the graph's input, have tiny backward ones)."""
    starts = set(starts)
    targets = {t for t in targets if g.nodes[t].kind != NodeKind.PLACEHOLDER}  # nothing reaches those
    if not targets:
        return False
    fwd = [u for s in starts for u in g.users(s) if u not in skip]
    fseen = set(fwd)
    bwd = list(targets)
    bseen = set(bwd)
    while fwd and bwd:
        v = fwd.pop()
        if v in bseen:
            return True
        for u in g.users(v):
            if u not in fseen:
                fseen.add(u)
                fwd.append(u)
        x = bwd.pop()
        if x in fseen:
            return True
        for p in g.preds(x):
            if p in starts:
                return True
            if p not in bseen and p not in skip:
                bseen.add(p)
                bwd.append(p)
    return False


def rewrite(g: Graph, sub: Substitution, m: Match) -> list[int]:
    """Replace the match by the target pattern; the ids of the ops added.  Edits through the
    graph's primitives only (call inside ``Graph.recording`` for an inverse)."""
    ids = [m.nodes[p.name] for p in sub.source]
    inside = set(ids)
    producers = {r.node for r in m.tensors.values()}
    if _reaches(g, ids, producers, inside):
        raise RuleNotApplicable(f"{sub.name}: the rewrite would close a cycle")
    module = g.nodes[ids[0]].module
    kinds = {(t.node, t.index): g.tensor(TRef(m.nodes[s.node], s.index)).kind for s, t in sub.outputs}
    made: dict[str, int] = {}
    for p in sub.target:
        args = _instantiate(p.args, m, made)
        kwargs = {k: _instantiate(v, m, made) for k, v in p.kwargs}
        outs = infer_outputs(g, p.op, args, kwargs)
        for j, t in enumerate(outs):
            if kinds.get((p.name, j)) == TensorKind.OUTPUT:
                t.kind = TensorKind.OUTPUT
        node = g.add_node(name=f"{p.op.split('.')[1]}_{sub.name}_{g.new_id()}", op=p.op, args=args,
                          kwargs=kwargs, outputs=outs, module=module)
        made[p.name] = node.id
    for s, t in sub.outputs:
        g.replace_all_uses_with(TRef(m.nodes[s.node], s.index), TRef(made[t.node], t.index))
    for v in reversed(ids):
        g.erase_node(v)
    return list(made.values())


_META_CACHE: dict[tuple, list[tuple[tuple[int, ...], str]]] = {}


def _sig(x: Any, g: Graph) -> Any:
    if isinstance(x, TRef):
        t = g.tensor(x)
        return ("T", t.shape, t.dtype)
    if isinstance(x, (list, tuple)):
        return tuple(_sig(y, g) for y in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _sig(v, g)) for k, v in x.items()))
    return ("c", repr(x))


def infer_outputs(g: Graph, op: str, args: list[Any], kwargs: dict[str, Any]) -> list[TensorMeta]:
    """Output tensors of ``op`` on these arguments: shapes and dtypes from running it on meta
    tensors (cached per signature), aliases from its schema as the importer sets them."""
    key = (op, _sig(args, g), _sig(kwargs, g))
    shapes = _META_CACHE.get(key)
    if shapes is None:
        import torch

        from ...ir.torch_bridge import materialize, resolve_op, torch_dtype

        def fake(r: TRef) -> Any:
            t = g.tensor(r)
            return torch.empty(t.shape, dtype=torch_dtype(t.dtype), device="meta")

        out = resolve_op(op)(*materialize(args, fake, "meta"), **materialize(kwargs, fake, "meta"))
        vals = list(out) if isinstance(out, (tuple, list)) else [out]
        shapes = _META_CACHE[key] = [(tuple(v.shape), str(v.dtype).removeprefix("torch.")) for v in vals]
    outs = [TensorMeta(s, d, TensorKind.ACTIVATION) for s, d in shapes]
    ops.set_output_aliases(op, args, outs)  # as the importer sets them
    return outs


__all__ = ["Fn", "In", "Match", "Opt", "POp", "Ref", "Substitution", "Var", "bind", "find_matches", "infer_outputs", "pop", "rewrite", "valid"]

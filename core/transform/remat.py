"""Rematerialization (MAGIS section 5.2): give one user B of tensor A a recomputed copy A' (same op,
same inputs, ``recompute_of`` = A); De-remat merges a copy back into its original.  Chains of
recomputation arise from applying Remat to a copy.  Remat applies only to hot-spot tensors
(heuristic H2); ops that draw random numbers are never recomputed.  A view op is matched never (it
owns no storage, so recomputing it alone frees nothing) but may be applied: as a link of a chain --
its base recomputed for the recomputed view -- it is how a reader that reads an activation through
a view (``mm(t(grad), view(x))``) gets a recomputed activation."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

from ..ir import ops
from ..ir.graph import Graph, NodeKind, TRef, copy_struct
from .names import tensor_and_user
from .rule import Application, Rule, RuleNotApplicable, RuleOption, Where


def recomputable(g: Graph, nid: int, views: bool = True) -> bool:
    """An op whose outputs can be produced again from its inputs: not a placeholder, copy or
    fission node and not random.  A view op (an output aliases an input) is one unless ``views``
    is False: its copy is a view of whatever the copy reads (``Graph.replace_input`` re-points the
    alias when a chain gives it a recomputed base)."""
    n = g.nodes[nid]
    if n.kind != NodeKind.OP or not n.outputs:
        return False
    if not views and any(t.alias is not None for t in n.outputs):
        return False
    return not ops.node_draws_random(n)


def recomputed_copy(g: Graph, v: int):
    """A copy of op ``v`` reading what ``v`` reads (``recompute_of`` = ``v``)."""
    src = g.nodes[v]
    return g.add_node(name=f"{src.name}_recompute_{g.new_id()}", op=src.op, kind=src.kind,
                      args=copy_struct(src.args), kwargs=copy_struct(src.kwargs),
                      outputs=[copy.copy(t) for t in src.outputs], module=src.module, recompute_of=v)


class Remat(Rule):
    """Remat(A, B): B reads a recomputed copy of A's outputs instead of A's."""

    name = "remat"
    family = "remat"
    text = "Remat: a reader gets a recomputed copy of the tensor"
    option = RuleOption("--remat", "TENSOR:USER", "USER reads a recomputed copy of TENSOR")

    def from_text(self, g: Graph, text: str, *, where: Where | None = None, ftree=None) -> Application:
        ref, b = tensor_and_user(g, text, self.option.flag)
        return Application(self.name, (ref.node, b))  # the whole op is recomputed: every output USER reads

    def match(self, g: Graph, hot: Iterable[TRef], where: Where | None = None) -> list[Application]:
        apps: list[Application] = []
        for a in sorted({r.node for r in hot}):
            if a not in g.nodes or not recomputable(g, a, views=False):
                continue
            users = g.users(a)
            if len(users) < 2:  # a single user gains nothing from its own copy
                continue
            apps.extend(Application(self.name, (a, b)) for b in users  # a copy gains nothing from it
                        if g.nodes[b].kind in (NodeKind.OP, NodeKind.FISSION))
        return apps

    def edit(self, g: Graph, app: Application) -> None:
        a, b = app.params
        src = g.nodes[a]
        if b not in g.users(a):
            raise RuleNotApplicable(f"{g.nodes[b].name!r} does not read {src.name!r}")
        dup = recomputed_copy(g, a)
        for j in range(len(src.outputs)):
            g.replace_input(b, TRef(a, j), TRef(dup.id, j))


CHAIN_OPS = 8  # the most ops a RematChain recomputes (views not counted: they compute nothing)
CHAIN_SMALL = 64  # inputs under 1/64 of the hot tensor's bytes are kept rather than recomputed


def storage_readers(g: Graph, root: TRef) -> tuple[set[int], dict[int, int]]:
    """The nodes that read the storage of ``root`` (directly or through views), and each view op
    of it with the node it views (its input in the storage)."""
    readers: set[int] = set()
    views: dict[int, int] = {}
    stack = [root]
    seen = {root}
    while stack:
        ref = stack.pop()
        for r in g.readers(ref):
            readers.add(r)
            for k, t in enumerate(g.nodes[r].outputs):
                out = TRef(r, k)
                if t.alias is not None and out not in seen and g.storage_root(out) == root:
                    seen.add(out)
                    views[r] = ref.node
                    stack.append(out)
    return readers, views


class RematChain(Rule):
    """RematChain(U; S): the readers U read recomputed copies of the ops S instead of S's outputs;
    a copy reads another copy where its original read a member of S.  ``params`` =
    ``(len(U), *U, *S)``, S in an order where each op comes after the members it reads.

    ``match`` needs the schedule (``where``): for a hot-spot tensor A alive across a peak step P,
    U = A's readers after P (through views too), and S grows from A's producer (and the views
    between it and U) by every input that nothing else keeps alive at U's first position, up to
    ``CHAIN_OPS`` ops besides views; inputs of under 1/``CHAIN_SMALL`` of A's bytes are read as they are."""

    name = "remat_chain"
    family = "remat"
    text = "Remat chain: the readers after the peak get recomputed copies of the tensor and its inputs"

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        # params: (|U|, *U, *S)
        return ("n",) + ("node",) * (len(params) - 1)

    def match(self, g: Graph, hot: Iterable[TRef], where: Where | None = None) -> list[Application]:
        if where is None or not where.peaks:
            return []
        pos = where.pos
        apps: list[Application] = []
        done: set[tuple[int, ...]] = set()
        for ref in sorted(set(hot)):
            a = ref.node
            if a not in g.nodes or a not in pos or not recomputable(g, a, views=False):
                continue
            readers, views = storage_readers(g, ref)
            at = [pos[r] for r in readers if r in pos]
            if not at:
                continue
            last = max(at)
            p = where.peak_between(pos[a], last)  # one chain per hot-spot, from the first peak inside
            if p is not None:
                app = self._chain(g, ref, readers, views, p, pos)
                if app is not None and app.params not in done:
                    done.add(app.params)
                    apps.append(app)
        return apps

    def _chain(self, g: Graph, ref: TRef, readers: set[int], views: dict[int, int], p: int,
               pos: Mapping[int, int]) -> Application | None:
        late = sorted(r for r in readers if pos.get(r, -1) > p)
        if not late or any(g.nodes[r].kind not in (NodeKind.OP, NodeKind.FISSION) for r in late):
            return None
        first = min(pos[r] for r in late)
        members = {ref.node}
        for r in late:  # the early views between A and a late reader are recomputed with it
            for x in g.preds(r):
                while x in views and x not in members and x not in late:
                    members.add(x)
                    x = views[x]
        small = g.nodes[ref.node].outputs[ref.index].nbytes // CHAIN_SMALL
        outputs = {g.storage_root(o) for o in g.output_refs()}
        frontier = sorted(members)
        computing = sum(not any(t.alias is not None for t in g.nodes[v].outputs) for v in members)
        while frontier:
            v = frontier.pop()
            for x in g.preds(v):
                if x in members or computing >= CHAIN_OPS or not recomputable(g, x):
                    continue
                roots = {g.storage_root(TRef(x, k)) for k in range(len(g.nodes[x].outputs))}
                big = [r for r in roots if g.tensor(r).nbytes > small]
                if not big or not outputs.isdisjoint(big):
                    continue  # too small to matter, or kept to the end
                if all(any(pos.get(u, -1) >= first for u in storage_readers(g, r)[0] if u not in members)
                       for r in big):
                    continue  # alive at the copies' time anyway
                members.add(x)
                computing += not any(t.alias is not None for t in g.nodes[x].outputs)
                frontier.append(x)
        users = [r for r in late if not members.isdisjoint(g.preds(r))]
        if not users or len(members) == 1 and len(users) == 1:
            return None  # nothing to re-point, or the plain Remat(A, B)
        chain = sorted(members, key=lambda v: pos.get(v, -1))
        return Application(self.name, (len(users), *users, *chain))

    def edit(self, g: Graph, app: Application) -> None:
        k = app.params[0]
        users, chain = app.params[1:k + 1], app.params[k + 1:]
        if k < 1 or not chain or set(users) & set(chain):
            raise RuleNotApplicable(f"{app}: needs readers and ops to recompute, apart")
        inside = set(chain)
        copies: dict[int, int] = {}
        for v in chain:
            if v not in g.nodes or not recomputable(g, v):
                raise RuleNotApplicable(f"{app}: node {v} cannot be recomputed")
            src = g.nodes[v]
            if any(p in inside and p not in copies for p in g.preds(v)):
                raise RuleNotApplicable(f"{app}: {src.name!r} comes before an op it reads")
            dup = recomputed_copy(g, v)
            for p in g.preds(v):
                if p in copies:
                    for j in range(len(g.nodes[p].outputs)):
                        g.replace_input(dup.id, TRef(p, j), TRef(copies[p], j))
            copies[v] = dup.id
        for b in users:
            if b not in g.nodes or not any(p in inside for p in g.preds(b)):
                raise RuleNotApplicable(f"{app}: node {b} reads none of the recomputed ops")
            for p in g.preds(b):
                if p in copies:
                    for j in range(len(g.nodes[p].outputs)):
                        g.replace_input(b, TRef(p, j), TRef(copies[p], j))


class DeRemat(Rule):
    """DeRemat(A'): the readers of a recomputed copy A' read its original again; A' is erased, and
    so are the copies it read that nothing reads any more (a ``RematChain``'s).  A chain of copies
    of copies is merged from its end."""

    name = "deremat"
    family = "remat"
    text = "De-remat: merge a recomputed copy back"
    option = RuleOption("--deremat", "COPY", "merge a recomputed copy into its original")

    def match(self, g: Graph, hot: Iterable[TRef] = (), where: Where | None = None) -> list[Application]:
        ends = sorted(c for o in g.recomputed() for c in g.copies(o) if not g.copies(c))
        return [Application(self.name, (c,)) for c in ends]

    def edit(self, g: Graph, app: Application) -> None:
        (c,) = app.params
        node = g.nodes[c]
        if node.recompute_of is None:
            raise RuleNotApplicable(f"{node.name!r} is not a recomputed copy")
        if g.copies(c):
            raise RuleNotApplicable(f"{node.name!r} is recomputed itself: merge the end of the chain first")
        for j in range(len(node.outputs)):
            g.replace_all_uses_with(TRef(c, j), TRef(node.recompute_of, j))
        stack = [c]
        outputs = {r.node for r in g.output_refs()}
        while stack:
            v = stack.pop()
            preds = g.preds(v)
            g.erase_node(v)
            stack.extend(p for p in preds if g.nodes[p].recompute_of is not None and not g.users(p)
                         and p not in outputs and p not in stack)


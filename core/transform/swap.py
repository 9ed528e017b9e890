"""Swapping (MAGIS section 5.2): a tensor A is copied to host memory after it is produced (STORE) and
copied back before one of its users B (LOAD), so between the two copies its device memory is free.

``Swap(A, B)`` gives B a loaded copy of A; one STORE per tensor is shared by all of its LOADs (a
second Swap of A for another user adds only a LOAD).  ``SwapLate(A)`` gives every reader of A's
storage after a peak step one loaded copy -- a tensor read again and again after the peak (a U-Net's
skip connection, read by the decoder's concat, the recomputed copies and the backward) is off the
device only when all of them are -- and applies to a loaded copy too (a second LOAD of the same host
copy for the readers after a later peak).  ``DeSwap(L)`` takes a LOAD back: its readers read A
again, the LOAD is erased, and so is the STORE once no LOAD reads it.  Where the copies go in
the schedule (STORE as early as possible, LOAD as late as the transfer stays hidden) is the
scheduler's part: ``core.schedule.placement``.  Swap applies only to hot-spot tensors (H2).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from ..ir.graph import Graph, NodeKind, TRef
from .names import tensor_and_user, tensor_named
from .remat import recomputed_copy, storage_readers
from .rule import Application, Rule, RuleNotApplicable, RuleOption, Where


def swappable(g: Graph, ref: TRef) -> bool:
    """A device tensor an op owns (not a view, not a graph input or weight, not a copy's output),
    laid out as a plain dense tensor (a copy keeps its values and strides), with bytes to free."""
    node = g.nodes.get(ref.node)
    if node is None or node.kind != NodeKind.OP or ref.index >= len(node.outputs):
        return False
    t = node.outputs[ref.index]
    return (t.alias is None and t.device == "device" and t.nbytes > 0
            and (t.storage_bytes is None or t.storage_bytes == t.numel * t.itemsize))


def _user_ok(g: Graph, b: int) -> bool:
    """A user that may read a loaded copy: a compute op that does not re-interpret the storage."""
    n = g.nodes[b]
    return n.kind == NodeKind.OP and not n.op.startswith("aten.as_strided")


def store_of(g: Graph, ref: TRef) -> int | None:
    """The STORE node that copies ``ref`` to the host, if there is one."""
    for u in g.users(ref.node):
        n = g.nodes[u]
        if n.kind == NodeKind.STORE and n.inputs() == (ref,):
            return u
    return None


class Swap(Rule):
    """Swap(A, j, B): B reads a copy of A's output j that was stored to the host and loaded back.

    ``match`` offers every compute reader B; given the schedule (``where``), only the readers after
    the first peak step inside A's lifetime (a swap for an earlier reader keeps A on the device
    across that peak), and no swap of a tensor that no peak step finds alive between two readers."""

    name = "swap"
    family = "swap"
    text = "Swap: store the tensor to host memory, load it back before its reader"
    option = RuleOption("--swap", "TENSOR:USER", "TENSOR is stored to the host after it is produced and loaded "
                        "back for USER")

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        # params: (A, j, B)
        return ("node", "n", "node")[:len(params)]

    def from_text(self, g: Graph, text: str, *, where: Where | None = None, ftree=None) -> Application:
        ref, b = tensor_and_user(g, text, self.option.flag)
        return Application(self.name, (ref.node, ref.index, b))

    def match(self, g: Graph, hot: Iterable[TRef], where: Where | None = None) -> list[Application]:
        apps: list[Application] = []
        for ref in sorted(set(hot)):
            if not swappable(g, ref):
                continue
            readers = [b for b in g.readers(ref) if _user_ok(g, b)]
            if where is not None and where.peaks:
                pos = where.pos
                at = [pos[b] for b in g.readers(ref) if b in pos]
                last = max(at, default=-1)
                p = where.peak_between(pos.get(ref.node, last), last)
                readers = [] if p is None else [b for b in readers if pos.get(b, -1) > p]
            apps.extend(Application(self.name, (ref.node, ref.index, b)) for b in readers)
        return apps

    def edit(self, g: Graph, app: Application) -> None:
        a, j, b = app.params
        ref = TRef(a, j)
        if not swappable(g, ref):
            raise RuleNotApplicable(f"output {j} of {g.nodes[a].name!r} cannot be swapped (a view, an input, "
                             f"a copy's output, or an empty tensor)")
        if b not in g.readers(ref) or not _user_ok(g, b):
            raise RuleNotApplicable(f"{g.nodes[b].name!r} is not a compute op reading {g.nodes[a].name!r}")
        load = add_load(g, ref, store_of(g, ref), g.nodes[b].module)
        g.replace_input(b, ref, TRef(load.id, 0))


def add_load(g: Graph, ref: TRef, st: int | None, module: str):
    """A new LOAD of ``ref``'s host copy in ``module`` (its node): from STORE ``st``, or where that is
    None from a new STORE of ``ref`` (added first)."""
    src = g.nodes[ref.node]
    if st is None:
        host = copy.copy(src.outputs[ref.index])
        host.device, host.storage_bytes = "host", None
        st = g.add_node(name=f"{src.name}_store", op="store", kind=NodeKind.STORE, args=[ref],
                        outputs=[host], module=src.module).id
    dev = copy.copy(src.outputs[ref.index])
    dev.storage_bytes = None
    return g.add_node(name=f"{src.name}_load_{g.new_id()}", op="load", kind=NodeKind.LOAD,
                      args=[TRef(st, 0)], outputs=[dev], module=module)


def _host_copy(g: Graph, ref: TRef) -> int | None:
    """The STORE whose host copy holds ``ref``'s values: ``ref``'s own STORE, or for a LOAD's output
    the STORE it loads from (None if there is none yet)."""
    node = g.nodes[ref.node]
    if node.kind == NodeKind.LOAD:
        return node.inputs()[0].node
    return store_of(g, ref)


def late_swappable(g: Graph, ref: TRef) -> bool:
    """A tensor ``SwapLate`` applies to: one ``swappable`` tensor, or a LOAD's output."""
    node = g.nodes.get(ref.node)
    if node is not None and node.kind == NodeKind.LOAD:
        return g.nodes[node.inputs()[0].node].kind == NodeKind.STORE
    return swappable(g, ref)


class SwapLate(Rule):
    """SwapLate(A, j; U; V): the readers U of A's output j (directly or through views) read one
    LOAD of A's host copy; the views V of A that U read through (views made before the peak) are
    made again on the LOAD (views compute nothing).  ``params`` = ``(A, j, len(U), *U, *V)``, V in
    schedule order.  A LOAD's output takes one too: the new LOAD reads the same STORE.

    ``match`` needs the schedule: U = the readers of A's storage after the first peak step inside
    its lifetime, all of them compute ops."""

    name = "swap_late"
    family = "swap"
    text = "Swap late: the readers after the peak read one copy loaded back from host memory"
    option = RuleOption("--swap-late", "TENSOR", "every reader of TENSOR after the peak of the traced order reads "
                        "one copy loaded back from host memory")
    needs_schedule = True

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        # params: (A, j, |U|, *U, *V)
        return ("node", "n", "n") + ("node",) * (len(params) - 3)

    def from_text(self, g: Graph, text: str, *, where: Where | None = None, ftree=None) -> Application:
        apps = self.match(g, [tensor_named(g, text)], where) if where is not None else []
        if not apps:
            raise ValueError(f"{self.option.flag} {text!r}: no reader of it comes after a peak step it is alive "
                             f"at (nothing to free), or it cannot be swapped")
        return apps[0]

    def match(self, g: Graph, hot: Iterable[TRef], where: Where | None = None) -> list[Application]:
        if where is None or not where.peaks:
            return []
        pos = where.pos
        outputs = {g.storage_root(o) for o in g.output_refs()}
        apps: list[Application] = []
        for ref in sorted(set(hot)):
            if ref.node not in pos or ref in outputs or not late_swappable(g, ref):
                continue
            readers, views = storage_readers(g, ref)
            last = max((pos[r] for r in readers if r in pos), default=-1)
            p = where.peak_between(pos[ref.node], last)
            if p is None:
                continue
            late = sorted((r for r in readers if pos.get(r, -1) > p), key=pos.__getitem__)
            if not all(_user_ok(g, b) for b in late):
                continue
            remade: set[int] = set()
            for b in late:  # the early views a late reader reads through
                for x in g.preds(b):
                    while x in views and x not in remade and pos.get(x, -1) < p:
                        remade.add(x)
                        x = views[x]
            apps.append(Application(self.name, (ref.node, ref.index, len(late), *late,
                                                *sorted(remade, key=pos.__getitem__))))
        return apps

    def edit(self, g: Graph, app: Application) -> None:
        a, j, k = app.params[:3]
        users, remade = app.params[3:3 + k], app.params[3 + k:]
        ref = TRef(a, j)
        if a not in g.nodes or not late_swappable(g, ref):
            raise RuleNotApplicable(f"{app}: not a tensor that can be swapped")
        readers, views = storage_readers(g, ref)
        if k < 1 or not set(users) <= readers or not set(remade) <= set(views) or set(users) & set(remade):
            raise RuleNotApplicable(f"{app}: the readers and views do not read {g.nodes[a].name!r}")
        if not all(_user_ok(g, b) for b in users):
            raise RuleNotApplicable(f"{app}: a reader is not a compute op")
        load = add_load(g, ref, _host_copy(g, ref), g.nodes[users[0]].module)
        made = {a: load.id}
        for v in remade:  # in schedule order: a view's base is made before it
            base = views[v]
            if base not in made:
                raise RuleNotApplicable(f"{app}: view {g.nodes[v].name!r} comes before its base")
            dup = recomputed_copy(g, v)
            if base == a:
                g.replace_input(dup.id, ref, TRef(load.id, 0))
            else:
                for i in range(len(g.nodes[base].outputs)):
                    g.replace_input(dup.id, TRef(base, i), TRef(made[base], i))
            made[v] = dup.id
        for b in users:
            for p in g.preds(b):
                if p == a:
                    g.replace_input(b, ref, TRef(load.id, 0))
                elif p in made:
                    for i in range(len(g.nodes[p].outputs)):
                        g.replace_input(b, TRef(p, i), TRef(made[p], i))
        outputs = {r.node for r in g.output_refs()}
        for v in reversed(remade):  # an early view nothing reads any more is dead code
            if not g.users(v) and v not in outputs:
                g.erase_node(v)


class SwapOutput(Rule):
    """SwapOutput(A, j): a graph output that no op reads -- a weight's gradient, made early in the
    backward -- is copied to host memory once made (STORE) and back for the end of the step (LOAD,
    now the graph output), so the device does not hold it across the peaks between.  The step's
    result is the same tensor, on the device, when the step ends.  Where the LOAD goes is the
    scheduler's part: just in time for the end of the step, after its last peak step.

    ``match`` needs the schedule: outputs among the hot-spots made before the last peak step."""

    name = "swap_output"
    family = "swap"
    text = "Swap an output: a result no op reads goes to host memory once made and comes back for the end of the step"
    option = RuleOption("--swap-output", "TENSOR", "a graph output no op reads goes to host memory once made and "
                        "comes back for the end of the step")
    needs_schedule = True

    def roles(self, params: tuple[int, ...]) -> tuple[str, ...]:
        return ("node", "n")

    def from_text(self, g: Graph, text: str, *, where: Where | None = None, ftree=None) -> Application:
        ref = tensor_named(g, text)
        self._check(g, ref)
        return Application(self.name, (ref.node, ref.index))

    @staticmethod
    def _check(g: Graph, ref: TRef) -> list[str]:
        """The output keys ``ref`` is, where ``SwapOutput`` applies to it (RuleNotApplicable otherwise)."""
        if ref.node not in g.nodes or not swappable(g, ref):
            raise RuleNotApplicable(f"swap_output{ref.node, ref.index}: not a tensor that can be swapped")
        keys = [k for k, r in g.outputs.items() if r == ref]
        if not keys:
            raise RuleNotApplicable(f"{g.nodes[ref.node].name!r} is not a graph output")
        if g.readers(ref):
            raise RuleNotApplicable(f"{g.nodes[ref.node].name!r} is read by an op (Swap or SwapLate apply)")
        return keys

    def match(self, g: Graph, hot: Iterable[TRef], where: Where | None = None) -> list[Application]:
        if where is None or not where.peaks:
            return []
        apps = []
        for ref in sorted(set(hot)):
            if ref.node not in where.pos or where.pos[ref.node] >= where.peaks[-1]:
                continue
            try:
                self._check(g, ref)
            except RuleNotApplicable:
                continue
            apps.append(Application(self.name, (ref.node, ref.index)))
        return apps

    def edit(self, g: Graph, app: Application) -> None:
        a, j = app.params
        ref = TRef(a, j)
        keys = self._check(g, ref)
        load = add_load(g, ref, store_of(g, ref), g.nodes[a].module)
        for k in keys:
            g.set_output(k, TRef(load.id, 0))


class DeSwap(Rule):
    """DeSwap(L): the readers of LOAD L read the stored tensor again; L is erased, and its STORE too
    when no other LOAD reads it."""

    name = "deswap"
    family = "swap"
    text = "De-swap: keep the tensor on the device again"
    option = RuleOption("--deswap", "LOAD", "take back a LOAD (and its STORE once unused)")

    def match(self, g: Graph, hot: Iterable[TRef] = (), where: Where | None = None) -> list[Application]:
        return [Application(self.name, (n.id,)) for n in g.nodes.values() if n.kind == NodeKind.LOAD
                and g.nodes[n.inputs()[0].node].kind == NodeKind.STORE]

    def edit(self, g: Graph, app: Application) -> None:
        (lid,) = app.params
        load = g.nodes[lid]
        if load.kind != NodeKind.LOAD:
            raise RuleNotApplicable(f"{load.name!r} is not a LOAD")
        st = g.nodes[load.inputs()[0].node]
        if st.kind != NodeKind.STORE:
            raise RuleNotApplicable(f"{load.name!r} does not load a stored tensor")
        src = st.inputs()[0]
        g.replace_all_uses_with(TRef(lid, 0), src)
        g.erase_node(lid)
        if not g.users(st.id):
            g.erase_node(st.id)


class Reissue(Rule):
    """Reissue(L1, L2, ...): LOADs issued earlier in the schedule, the graph unchanged.

    Swap places a LOAD just in time for its reader, but no earlier than the last peak step before
    the reader (the tensor must be off the device there).  Later steps lower those peaks, and the
    LOAD, still placed after them, holds up compute for its whole copy.  Where the copies go is the
    scheduler's part, so this rule edits nothing: the delta evaluator re-issues the listed LOADs as
    early as their transfer needs and as memory allows (``placement.hoist_loads``), and a plan keeps
    the schedule it made.  ``match`` offers nothing: which LOADs are late is a question of the
    schedule's times, asked by the search after each step (``DeltaEvaluator.loads``)."""

    name = "reissue"
    family = "swap"
    text = "Re-issue: LOADs that hold up compute go earlier, as far as memory allows"

    def match(self, g: Graph, hot: Iterable[TRef] = (), where: Where | None = None) -> list[Application]:
        return []

    def edit(self, g: Graph, app: Application) -> None:
        if not app.params:
            raise RuleNotApplicable(f"{app}: no LOAD to re-issue")
        for v in app.params:
            if v not in g.nodes or g.nodes[v].kind != NodeKind.LOAD:
                raise RuleNotApplicable(f"{app}: node {v} is not a LOAD")

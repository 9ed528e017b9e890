"""A MAGIS plan as torch's own selective-checkpoint policy:
``policy = checkpoint_policy(module, loss_fn, inputs, memory_limit=0.7)``, then
``loss = torch.utils.checkpoint.checkpoint(loss_fn, module, *batch, use_reentrant=False,
context_fn=policy.context_fn)`` (or ``policy.checkpoint(loss_fn, module, *batch)``), inside a
``torch.compile``'d or FSDP-wrapped model as well as eagerly.

The training step is captured and searched as ``plan_step`` does it (``core.train``; the
M-Optimizer, MAGIS Algorithm 3).  From the plan, the one kind of decision a selective-checkpoint
policy can state is kept: *which forward op's output is recomputed for the backward* -- the
originals of the plan's recomputed copies (``Remat``, ``RematChain``; ``recompute_of`` in the
plan's graph) that belong to the forward.  Every other forward op call is decided so that the
region keeps what eager autograd keeps:

* recomputed by the plan -> ``MUST_RECOMPUTE``;
* a view (its output aliases an input) -> ``PREFER_RECOMPUTE`` (free, and a saved view would keep
  its base's storage alive);
* read by the backward, or by an op the plan recomputes -> ``MUST_SAVE``;
* read by neither (it dies in the forward) -> ``PREFER_RECOMPUTE``: a saved one would stay alive
  until the backward (torch caches every saved op's output), a recomputed one is run again when the
  region is recomputed and freed at once.

The policy is matched to the calls by their order: the op calls torch's checkpoint shows a policy
are recorded once on fake tensors (a real ``checkpoint`` of ``loss_fn(module, *inputs)`` with a
recording policy, so views, in-place ops and ``aten.detach`` -- which torch never shows a policy --
are exactly as at run time) and aligned to the captured graph's forward by op name and output
shape (``_unsafe_view``/``view``, ``relu_``/``relu``, ``lift_fresh``/``lift_fresh_copy`` are the
same op to the alignment).  At run time each call's op name and output shape is checked against
the recorded call at its position; a different op raises :class:`PolicyMismatch` instead of
applying a decision meant for another op.

What a policy cannot express (counted in ``dropped_by`` and left out of ``policy_peak``):

* fission, micro-batching, graph substitutions and F-Tree edits: they change the ops;
* swaps: torch 2.13's ``CheckpointPolicy`` has ``MUST_CPU_OFFLOAD`` / ``PREFER_CPU_OFFLOAD``, but
  nothing honours them -- eager selective checkpointing treats any policy but ``*_SAVE`` as
  recompute, and ``torch.compile``'s partitioner offloads only nodes marked by its own pass
  (``should_offload``), not by the policy -- so a swap is dropped rather than silently turned into
  a recomputation;
* a recomputation of a backward op, or of a forward op with no matching call at run time (an op
  that functionalisation added, a ``clone`` of a no-op dropout);
* the schedule: torch runs the forward in program order and, at the first use of a saved tensor in
  the backward, recomputes every recomputed op of the region at once, while a MAGIS plan reorders
  ops and places each recomputed copy right before its reader.  ``policy_peak`` simulates exactly
  that (the forward in traced order, each region's recomputed copies right before its first
  backward op, each saved output held by the region's cache until then), so it is the prediction
  for the policy, and ``plan_peak`` the one for the plan run by ``plan_step``.

With the whole step as one region that schedule saves nothing: every recomputation runs when the
backward starts, where eager's peak is.  ``regions="blocks"`` makes one region per repeated block
(the children of the model's largest ``nn.ModuleList``/``nn.Sequential`` of same-class modules, or
modules named in a list): the calls are recorded once with each call's block, aligned as above, and
each block whose calls the plan recomputes gets its own policy (its calls, in order, and their
decisions); ``policy.apply(module)`` runs those blocks' forwards under their own checkpoints and
``policy.remove(module)`` restores them.  Torch then recomputes block by block during the backward,
so the peak drops towards the plan's; the plan's recomputations outside every block are dropped
(counted in ``dropped_by``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from .cost.model import AnalyticCost
from .ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef
from .simulate import simulate
from .transform.remat import recomputed_copy, storage_readers

# op names that are one op to the alignment of recorded calls with the captured graph
_SAME_OP = {"aten._unsafe_view.default": "aten.view.default",
            "aten.lift_fresh_copy.default": "aten.lift_fresh.default",
            "aten._native_batch_norm_legit_functional.default": "aten.native_batch_norm.default"}


# ops that update their running-statistics arguments in place (training=True) although their schema
# does not mark them written
_UPDATES_STATS = {"aten.native_batch_norm.default", "aten.cudnn_batch_norm.default",
                  "aten.miopen_batch_norm.default"}


class PolicyMismatch(RuntimeError):
    """The checkpointed function ran an op call other than the one the policy was made for."""


def _norm(op: str) -> str:
    """The functional name of an aten overload: ``aten.relu_.default`` -> ``aten.relu.default``."""
    op = _SAME_OP.get(op, op)
    ns, _, rest = op.partition(".")
    name, dot, overload = rest.partition(".")
    if name.endswith("_") and not name.endswith("__") and not name.startswith("_"):
        name = name[:-1]
    return _SAME_OP.get(f"{ns}.{name}{dot}{overload}", f"{ns}.{name}{dot}{overload}")


def _shape(out: Any) -> tuple[int, ...] | None:
    """The shape of the first tensor of an op's output."""
    for t in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(t, torch.Tensor):
            return tuple(int(s) for s in t.shape)
    return None


def _schema_view(op: Any) -> bool:
    rets = getattr(getattr(op, "_schema", None), "returns", ())
    return any(r.alias_info is not None and not r.alias_info.is_write for r in rets)


@dataclass(frozen=True)
class Call:
    """One op call a selective-checkpoint policy sees: its aten overload and first output's shape."""

    op: str
    shape: tuple[int, ...] | None
    view: bool = False  # the op's schema says its output aliases an input without writing it
    writes_state: bool = False  # it writes a tensor the region did not make (a buffer: batch-norm statistics)
    mutated: bool = False  # a later call of the region writes its output in place
    group: int | None = None  # a state-writing call whose output a later call writes: its index
    region: str | None = None  # the block (module name) whose forward ran it; None: outside every block

    def __str__(self) -> str:
        return f"{self.op}{list(self.shape) if self.shape is not None else ''}"


def record_calls(module: nn.Module, loss_fn: Callable[..., torch.Tensor], inputs: Sequence[Any],
                 regions: Sequence[str] = ()) -> list[Call]:
    """The op calls torch's selective checkpointing shows its policy for ``loss_fn(module,
    *inputs)``, in order: a real ``checkpoint`` of it with a recording policy, run on fake tensors
    (the module's parameters and buffers are swapped for fake copies for the call; nothing is
    computed, nothing of the module changes).

    ``regions``: names of submodules (blocks) whose ``forward`` will be checkpointed on its own
    (:meth:`CheckpointPlanPolicy.apply`); each call made inside one carries its name
    (``Call.region``), and ``writes_state`` and ``group`` are judged per region (a write to a
    tensor another region or no region made is a write to state)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.utils.stateless import _reparametrize_module

    _check_regions(regions)
    current: list[str | None] = [None]
    region_of: list[str | None] = []  # per call
    calls: list[Call] = []
    made: dict[int, int] = {}  # storage -> the call that made it
    held: list[Any] = []  # the recorded tensors, alive until the end (storage keys stay unique)
    reads: list[set[int]] = []
    wrote: list[set[int]] = []

    def key(t: torch.Tensor) -> int:
        held.append(t)
        return t.untyped_storage()._cdata

    def record(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        i = len(calls)
        schema = op._schema
        written, read = [], set()
        for k, a in enumerate(schema.arguments):
            v = args[k] if k < len(args) else kwargs.get(a.name)
            ts = [x for x in (v if isinstance(v, (list, tuple)) else (v,)) if isinstance(x, torch.Tensor)]
            read.update(key(t) for t in ts)
            if a.alias_info is not None and a.alias_info.is_write:
                written.extend(key(t) for t in ts)
        if str(op) in _UPDATES_STATS and len(args) > 5 and args[5] and isinstance(args[3], torch.Tensor):
            written.extend(key(t) for t in args[3:5] if isinstance(t, torch.Tensor))
        here = current[0]
        call = Call(str(op), _shape(ctx.op_output), _schema_view(op),
                    writes_state=any(w not in made or region_of[made[w]] != here for w in written), region=here)
        for w in written:
            if w in made and not calls[made[w]].mutated:
                calls[made[w]] = dataclasses.replace(calls[made[w]], mutated=True)
        outs = ctx.op_output if isinstance(ctx.op_output, (tuple, list)) else (ctx.op_output,)
        for t in outs:
            if isinstance(t, torch.Tensor):
                made.setdefault(key(t), i)
        calls.append(call)
        region_of.append(here)
        reads.append(read | set(written))
        wrote.append(set(written))
        return CheckpointPolicy.PREFER_RECOMPUTE

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        state = {k: mode.from_tensor(v) for k, v in (*module.named_parameters(remove_duplicate=False),
                                                      *module.named_buffers(remove_duplicate=False))}
        fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]
        blocks = [module.get_submodule(r) for r in regions]
        for name, block in zip(regions, blocks, strict=True):
            _set_forward(block, _marked(block.forward, name, current), _MARK)
        try:
            with _reparametrize_module(module, state, tie_weights=True), torch.enable_grad():
                torch.utils.checkpoint.checkpoint(loss_fn, module, *fake, use_reentrant=False,
                                                  context_fn=functools.partial(create_selective_checkpoint_contexts,
                                                                               record))
        finally:
            for block in blocks:
                _restore_forward(block, _MARK)
    # a state-writing call whose output is written later (batch norm, then an in-place ReLU): it
    # cannot run again and its cache is changed, so it and every call touching that storage up to
    # the last write are kept (and the cache is allowed to change: each reader is kept too)
    # (within its region: another region's calls are another policy's)
    for p, c in enumerate(calls):
        if c.writes_state and c.mutated:
            mine = {k for k, v in made.items() if v == p}
            last = max((i for i in range(p + 1, len(calls)) if wrote[i] & mine and region_of[i] == c.region),
                       default=p)
            for i in range(p, last + 1):
                if region_of[i] == c.region and (i == p or reads[i] & mine):
                    calls[i] = dataclasses.replace(calls[i], group=p)
    return calls


# ---- blocks: the regions of a per-block policy -------------------------------------------------

_MARK = "record_calls"  # tag of the forwards record_calls wraps for the recording
_APPLIED = "checkpoint_region"  # tag of the forwards CheckpointPlanPolicy.apply wraps
_ABSENT = object()


def _check_regions(regions: Sequence[str]) -> None:
    if len(set(regions)) != len(regions):
        raise ValueError(f"checkpoint regions repeat a module: {list(regions)}")
    for a in regions:
        for b in regions:
            if a != b and (a == "" or b.startswith(a + ".")):
                raise ValueError(f"checkpoint regions nest: {a!r} contains {b!r}; give disjoint modules")


def _marked(fwd: Callable[..., Any], name: str, current: list[str | None]) -> Callable[..., Any]:
    def marked(*args: Any, **kwargs: Any) -> Any:
        outer, current[0] = current[0], name
        try:
            return fwd(*args, **kwargs)
        finally:
            current[0] = outer

    return marked


def _set_forward(block: nn.Module, fn: Callable[..., Any], tag: Any) -> None:
    """Make ``fn`` the forward ``block.__call__`` runs (an instance attribute), remembering what the
    instance had before so that :func:`_restore_forward` undoes exactly this."""
    fn.__dict__["_forward_tag"] = (tag, block.__dict__.get("forward", _ABSENT))
    block.forward = fn


def _restore_forward(block: nn.Module, tag: Any) -> None:
    fn = block.__dict__.get("forward")
    got = getattr(fn, "_forward_tag", None)
    if got is None or got[0] is not tag:
        raise ValueError(f"{type(block).__name__}.forward is not the one this policy set; nothing to remove")
    if got[1] is _ABSENT:
        del block.forward
    else:
        block.forward = got[1]


def find_blocks(module: nn.Module) -> list[str]:
    """The names of the repeated blocks of ``module``: the children of its largest ``nn.ModuleList``
    or ``nn.Sequential`` whose (at least two) children are all of one class -- transformer layers,
    ResNet stages; of equal sizes, the first in ``named_modules`` order (the outermost)."""
    best: tuple[int, str] | None = None
    for name, m in module.named_modules():
        if isinstance(m, (nn.ModuleList, nn.Sequential)) and len(m) >= 2 and len({type(c) for c in m}) == 1:
            if best is None or len(m) > best[0]:
                best = (len(m), name)
    if best is None:
        raise ValueError(f"{type(module).__name__} has no nn.ModuleList or nn.Sequential of same-class blocks; "
                         f"name the modules to checkpoint (regions=[...])")
    return [f"{best[1]}.{k}" if best[1] else str(k) for k, _ in module.get_submodule(best[1]).named_children()]


def forward_nodes(g: Graph) -> list[int]:
    """The ops of a training graph's forward (the ancestors of its loss), in traced order."""
    if "loss" not in g.outputs:
        raise ValueError(f"{g.name} is not a training graph (it has no loss output)")
    fwd: set[int] = set()
    stack = [g.outputs["loss"].node]
    while stack:
        v = stack.pop()
        if v not in fwd:
            fwd.add(v)
            stack.extend(g.preds(v))
    return [n.id for n in g.ops() if n.id in fwd]


ALIGN_WINDOW = 16  # the most consecutive calls (or nodes) one side may have that the other lacks


def align(calls: Sequence[Call], g: Graph, forward: Sequence[int]) -> dict[int, int]:
    """Call index -> forward node of ``g`` running the same op (by functional name and first output
    shape).  Both sequences are walked together; where they differ, the fewest calls or nodes (at
    most ``ALIGN_WINDOW``) are skipped on one side to meet again -- differences are local (a
    ``clone`` functionalisation added, an ``arange`` traced as a constant), and the repeated layers
    of a model would mislead a global longest-block matching."""
    a = [(_norm(c.op), c.shape) for c in calls]
    b = [(_norm(g.nodes[v].op), tuple(g.nodes[v].outputs[0].shape) if g.nodes[v].outputs else None)
         for v in forward]
    pairs: dict[int, int] = {}
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            pairs[i] = forward[j]
            i, j = i + 1, j + 1
            continue
        for k in range(1, ALIGN_WINDOW + 1):
            if j + k < len(b) and a[i] == b[j + k]:
                j += k
                break
            if i + k < len(a) and a[i + k] == b[j]:
                i += k
                break
        else:
            i, j = i + 1, j + 1  # a call and a node that match nothing nearby
    return pairs


def _is_view(g: Graph, v: int) -> bool:
    return any(t.alias is not None for t in g.nodes[v].outputs)


def plan_recomputed(h: Graph, imported: Graph) -> set[int]:
    """The nodes of ``imported`` whose outputs the plan's graph ``h`` recomputes (the originals of
    its recomputed copies, copies of copies followed to their original)."""
    out: set[int] = set()
    for n in h.nodes.values():
        v = n.recompute_of
        while v is not None and v not in imported.nodes:
            v = h.nodes[v].recompute_of if v in h.nodes else None
        if v is not None:
            out.add(v)
    return out


def _makes_nothing(n: Any) -> bool:
    """An op with no output data (``_assert_tensor_metadata``: one empty tensor)."""
    return all(any(int(d) == 0 for d in t.shape) for t in n.outputs)


@dataclass
class _Backward:
    """The ops of a training graph outside its forward, as torch runs them under a checkpoint."""

    ops: list[int]  # the backward proper, in traced order
    side: set[int]  # ops that make nothing and read only forward tensors: run with the forward
    saved: dict[int, int]  # a view of a forward tensor only the backward reads (``detach`` of a saved
    # output) -> that forward tensor; it is made right before its first reader (torch shows no policy a
    # detach: it is the saved tensor, unpacked where the backward reads it)
    first_reader: dict[int, int]  # a ``saved`` view -> the backward op that first reads it (through views)
    region: dict[int, str | None]  # backward op (and saved view) -> the region whose saved tensors it unpacks


def _backward(g: Graph, forward: Sequence[int], region_of: dict[int, str | None]) -> _Backward:
    """The backward of ``g`` and the region each backward op unpacks (:class:`_Backward`): that of
    the latest-made forward tensor it reads (through saved views).  A backward op of block r+1
    reads what block r+1 made and, maybe, block r's output (block r+1's input), so the latest one
    is block r+1's; the backward of an op outside every block reads a tensor made after the last
    block (its own), so it belongs to no region.  (An op of block r+1 that reads nothing but block
    r's output is counted to block r: a small error in where block r is recomputed.)"""
    fwd = set(forward)
    pos = {v: k for k, v in enumerate(forward)}
    saved: dict[int, int] = {}
    side: set[int] = set()
    rest: list[int] = []
    for n in g.ops():
        if n.id in fwd:
            continue
        preds = g.preds(n.id)
        if _makes_nothing(n) and not g.users(n.id) and all(p in fwd for p in preds):
            side.add(n.id)
        elif _is_view(g, n.id) and len(preds) == 1 and (preds[0] in fwd or preds[0] in saved):
            saved[n.id] = saved.get(preds[0], preds[0])
        else:
            rest.append(n.id)
    order = {v: k for k, v in enumerate(rest)}
    first: dict[int, int] = {}
    for x in reversed(list(saved)):  # a view's readers come after it: theirs are known
        cands = [first.get(u) if u in saved else u for u in g.users(x) if u in saved or u in order]
        cands = [u for u in cands if u is not None]
        if cands:
            first[x] = min(cands, key=order.__getitem__)
    region: dict[int, str | None] = {}
    for b in rest:
        reads = [saved.get(p, p) for p in g.preds(b) if p in pos or p in saved]
        region[b] = region_of.get(max(reads, key=pos.__getitem__)) if reads else None
    for x in saved:
        region[x] = region[first[x]] if x in first else None
    return _Backward(rest, side, saved, first, region)


def policy_graph(g: Graph, recompute: set[int], forward: Sequence[int],
                 region_of: dict[int, str | None] | None = None, cached: Iterable[int] = ()) -> tuple[Graph, list[int]]:
    """The graph and schedule selective checkpointing runs when it recomputes ``recompute`` (forward
    ops): each such op, and each view of one, gets a copy that the backward reads instead (a copy
    reads copies where its original read a recomputed op); the forward runs in traced order and the
    copies of a region run, in forward order, right before the first backward op that unpacks a
    tensor saved in that region (torch recomputes a region when the backward first unpacks one of
    its saved tensors).

    ``region_of``: forward op -> its checkpoint region (None or absent: in none, never recomputed).
    Without it the whole step is one region.  With it, a copy reads only copies of its own region (a
    region is recomputed from its inputs), and a backward op reads a copy only where it belongs to
    the copy's region (:func:`_backward`): block r+1's backward reads block r's output as it was
    saved (block r+1's input), not a recomputation.

    ``cached``: forward ops the policy saves (``*_SAVE``).  Torch's selective checkpointing keeps
    their outputs in the region's cache until the recomputation replays them, whether the backward
    reads them or not (a batch norm saved because it updates its statistics, whose output eager frees
    after the next op): each gets a reader that makes nothing, right after its region's copies."""
    if region_of is None:
        region_of = dict.fromkeys(forward, "")
    h = g.copy()
    members = set(recompute)
    for v in forward:  # views of recomputed tensors are recomputed with them
        if v not in members and _is_view(h, v) and any(p in members for p in h.preds(v)):
            members.add(v)
    members = {v for v in members if region_of.get(v) is not None}
    copies: dict[int, int] = {}
    for v in forward:
        if v not in members:
            continue
        dup = recomputed_copy(h, v)
        for p in h.preds(v):
            if p in copies and region_of.get(p) == region_of[v]:
                for j in range(len(h.nodes[p].outputs)):
                    h.replace_input(dup.id, TRef(p, j), TRef(copies[p], j))
        copies[v] = dup.id
    bw = _backward(g, forward, region_of)
    for b in [*bw.saved, *bw.ops]:
        for p in h.preds(b):
            if p in copies and bw.region[b] == region_of[p]:
                for j in range(len(h.nodes[p].outputs)):
                    h.replace_input(b, TRef(p, j), TRef(copies[p], j))
    for v in reversed(forward):  # copies nothing reads (their readers read the original's views)
        c = copies.get(v)
        if c is not None and not h.users(c):
            h.erase_node(c)
            del copies[v]
    # where each region is recomputed: at its first backward op (or its copies' first reader, if earlier)
    step = {b: k for k, b in enumerate(bw.ops)}
    at: dict[str | None, int] = {}
    for k, b in enumerate(bw.ops):
        if bw.region[b] is not None:
            at.setdefault(bw.region[b], k)
    copy_of = {c: v for v, c in copies.items()}
    for b in [*bw.saved, *bw.ops]:
        k = step.get(b, step.get(bw.first_reader.get(b, -1), len(bw.ops)))
        for p in h.preds(b):
            if p in copy_of:
                r = region_of[copy_of[p]]
                at[r] = min(at.get(r, k), k)
    before: dict[int, list[int]] = {}
    for v in forward:
        if v in copies:
            before.setdefault(at[region_of[v]], []).append(copies[v])
    fpos = {v: k for k, v in enumerate(forward)}
    for v in sorted(set(cached), key=fpos.__getitem__):
        r = region_of.get(v)
        if r is not None and r in at and h.nodes[v].outputs:
            held = h.add_node(name=f"{h.nodes[v].name}_cached", op="aten._assert_tensor_metadata.default",
                              kind=NodeKind.OP, args=[TRef(v, j) for j in range(len(h.nodes[v].outputs))],
                              outputs=[TensorMeta((0,), h.nodes[v].outputs[0].dtype, TensorKind.GRADIENT)],
                              module=h.nodes[v].module)
            before.setdefault(at[r], []).append(held.id)
    unread = [x for x in bw.saved if x not in bw.first_reader]  # run with the forward
    for x in bw.saved:
        if x in bw.first_reader:
            before.setdefault(step[bw.first_reader[x]], []).append(x)
    first_run = {*forward, *bw.side, *unread}
    order = [n.id for n in g.ops() if n.id in first_run]
    for k, b in enumerate(bw.ops):
        order.extend(before.get(k, ()))
        order.append(b)
    order.extend(before.get(len(bw.ops), ()))
    return h, order


@dataclass
class RegionPolicy:
    """The policy of one checkpoint region: the op calls it expects, in order, and one decision per
    call; ``context_fn`` for ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False,
    context_fn=...)``."""

    calls: list[Call]  # the op calls the policy expects, in order
    decisions: list[CheckpointPolicy]  # one per call
    traced: list[tuple[tuple[str, Any], CheckpointPolicy]] = field(default_factory=list)  # compile's view
    name: str = ""  # the module whose forward is the region ("": the function given to checkpoint)
    _seen: list[int] = field(default_factory=list)  # calls seen by each region run so far
    context_fn: Callable[[], tuple[Any, Any]] = field(init=False, repr=False)  # for checkpoint(context_fn=...)

    @property
    def recomputed_calls(self) -> list[int]:
        """Indices of the calls the policy recomputes (plan's, views', and those that die in the forward)."""
        return [i for i, d in enumerate(self.decisions)
                if d in (CheckpointPolicy.MUST_RECOMPUTE, CheckpointPolicy.PREFER_RECOMPUTE)]

    @property
    def plan_calls(self) -> list[int]:
        """Indices of the calls recomputed on the plan's word (``MUST_RECOMPUTE``)."""
        return [i for i, d in enumerate(self.decisions) if d == CheckpointPolicy.MUST_RECOMPUTE]

    def policy_fn(self) -> Callable[..., CheckpointPolicy]:
        """A fresh policy function for one run of the region (its own position in the calls)."""
        pos = [0]
        self._seen.append(0)
        run = len(self._seen) - 1
        calls, decisions = self.calls, self.decisions

        at, missed = [0], [0]

        def traced(op: Any, out: Any) -> CheckpointPolicy:
            # under torch.compile the region is traced functionalised: the calls are the captured
            # graph's forward, matched by functional name and shape, skipping at most ALIGN_WINDOW
            key = (_norm(str(op)), _shape(out))
            for k in range(at[0], min(at[0] + ALIGN_WINDOW + 1, len(self.traced))):
                if self.traced[k][0] == key:
                    at[0], missed[0] = k + 1, 0
                    return self.traced[k][1]
            missed[0] += 1  # a call with no node (an arange traced as a constant): kept
            if missed[0] <= ALIGN_WINDOW:
                return CheckpointPolicy.PREFER_RECOMPUTE if _schema_view(op) else CheckpointPolicy.PREFER_SAVE
            raise PolicyMismatch(f"checkpoint policy: {ALIGN_WINDOW + 1} traced op calls in a row, up to "
                                 f"{str(op)}{list(key[1] or [])}, match no op of the captured forward near "
                                 f"position {at[0]}; make the policy for the "
                                 f"function and shapes you checkpoint")

        def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
            if torch.compiler.is_compiling():
                return traced(op, ctx.op_output)
            i = pos[0]
            got = Call(str(op), _shape(ctx.op_output))
            if i >= len(calls):
                raise PolicyMismatch(f"checkpoint policy: the region ran more op calls than the {len(calls)} it was "
                                     f"made for (call {i}: {got}); make the policy for the function you checkpoint")
            want = calls[i]
            if got.op != want.op or (got.shape is not None and want.shape is not None and got.shape != want.shape):
                raise PolicyMismatch(f"checkpoint policy: op call {i} is {got}, but the policy was made for "
                                     f"{want}; make the policy for the function and shapes you checkpoint")
            pos[0] = i + 1
            self._seen[run] = i + 1
            return decisions[i]

        return policy

    def __post_init__(self) -> None:
        def context_fn() -> tuple[Any, Any]:
            return self.contexts()

        self.context_fn = context_fn  # a plain function: torch.compile calls it while it traces

    def contexts(self) -> tuple[Any, Any]:
        """``context_fn`` of ``torch.utils.checkpoint.checkpoint``: torch's selective-checkpoint
        contexts with a fresh policy function.  Where the region updates state (batch-norm
        statistics, ``num_batches_tracked``), kept outputs may change after they are cached: those
        calls are kept, never run again, and a kept activation written in place later belongs to a
        kept group (batch norm, then ``relu_``), so nothing recomputed reads a changed value."""
        return create_selective_checkpoint_contexts(self.policy_fn(), allow_cache_entry_mutation=any(
            c.group is not None or c.writes_state for c in self.calls))

    def checkpoint(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, context_fn=...)``;
        PolicyMismatch when ``fn`` ran fewer op calls than the policy was made for."""
        out = torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, context_fn=self.context_fn,
                                                **kwargs)
        if torch.is_grad_enabled() and self._seen and self._seen[-1] != len(self.calls):
            raise PolicyMismatch(f"checkpoint policy: the region ran {self._seen[-1]} op calls, but the policy "
                                 f"was made for {len(self.calls)}; make it for the function you checkpoint")
        return out

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` run under :meth:`checkpoint`."""

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            return self.checkpoint(fn, *args, **kwargs)

        return wrapped


@dataclass(kw_only=True)
class CheckpointPlanPolicy(RegionPolicy):
    """A plan as a selective-checkpoint policy (module docstring).  As a :class:`RegionPolicy` it is
    the policy of the whole step as one region (``context_fn``, :meth:`checkpoint`); ``regions``
    holds the per-block policies (``regions="blocks"``), which :meth:`apply` installs."""

    graph: Graph  # the captured training step
    recompute_nodes: set[int]  # forward nodes the policy recomputes on the plan's word
    expressed: int  # plan decisions the policy states (forward ops it recomputes)
    dropped_by: dict[str, int]  # plan decisions it cannot state, by kind
    plan_peak: int  # the full plan's predicted peak (bytes)
    policy_peak: int  # the policy's predicted peak: only its recomputations, torch's schedule
    eager_peak: int  # the captured step's predicted peak in traced order
    limit_bytes: int | None
    plan: Any = None  # the chosen point (``search.plan.Plan``)
    matched: int = 0  # calls aligned to a node of the captured graph
    blocks: list[str] = field(default_factory=list)  # the blocks considered (module names); [] : the whole step
    regions: dict[str, RegionPolicy] = field(default_factory=dict)  # block -> its policy (those that recompute)
    node_region: dict[int, str | None] = field(default_factory=dict)  # per block: forward op -> its block

    @property
    def dropped(self) -> int:
        return sum(self.dropped_by.values())

    def apply(self, model: nn.Module) -> nn.Module:
        """Run each block of ``regions`` of ``model`` (this module or a copy of it) under its own
        checkpoint: its ``forward`` becomes ``regions[name].checkpoint(forward, ...)`` (an instance
        attribute; :meth:`remove` restores what was there).  Then ``loss_fn(model, *batch)`` trains
        with the per-block policy; the rest of the step runs as eager."""
        if not self.blocks:
            raise ValueError("this is a whole-step policy (regions='step'): run it with checkpoint(...); "
                             "make the policy with regions='blocks' to apply it per block")
        mods = {name: model.get_submodule(name) for name in self.regions}
        for name, block in mods.items():
            tag = getattr(block.__dict__.get("forward"), "_forward_tag", None)
            if tag is not None and tag[0] is _APPLIED:
                raise ValueError(f"{name}: a checkpoint policy is already applied; remove it first")
        for name, block in mods.items():
            _set_forward(block, functools.partial(self.regions[name].checkpoint, block.forward), _APPLIED)
        return model

    def remove(self, model: nn.Module) -> nn.Module:
        """Undo :meth:`apply`: each block's ``forward`` is what it was before."""
        for name in self.regions:
            _restore_forward(model.get_submodule(name), _APPLIED)
        return model

    @contextlib.contextmanager
    def applied(self, model: nn.Module) -> Iterator[nn.Module]:
        """:meth:`apply` for the ``with`` block, then :meth:`remove`."""
        self.apply(model)
        try:
            yield model
        finally:
            self.remove(model)

    def summary(self) -> str:
        eager = max(1, self.eager_peak)
        where = (f"{len(self.regions)} of {len(self.blocks)} blocks checkpointed ({', '.join(self.regions)})"
                 if self.blocks else "the whole step as one region")
        return (f"{self.graph.name}: {len(self.calls)} op calls, {len(self.plan_calls)} recomputed on the plan's word, "
                f"{where}; plan decisions expressed {self.expressed}, dropped {self.dropped} "
                f"({', '.join(f'{k} {v}' for k, v in sorted(self.dropped_by.items())) or 'none'}); "
                f"predicted peak: eager {self.eager_peak}, plan {self.plan_peak} ({self.plan_peak / eager:.3f}x), "
                f"policy {self.policy_peak} ({self.policy_peak / eager:.3f}x)")


def decide(g: Graph, calls: Sequence[Call], pairs: dict[int, int], recompute: set[int],
           forward: Sequence[int]) -> list[CheckpointPolicy]:
    """One decision per call (module docstring)."""
    fwd = set(forward)
    keep: set[int] = set()  # forward nodes whose storage the backward or a recomputed op reads
    for v in forward:
        if v in recompute or _is_view(g, v):
            continue
        for k in range(len(g.nodes[v].outputs)):
            readers, _ = storage_readers(g, TRef(v, k))
            if any(r not in fwd or r in recompute for r in readers):
                keep.add(v)
    out: list[CheckpointPolicy] = []
    for i, c in enumerate(calls):
        v = pairs.get(i)
        if c.writes_state or c.group is not None:  # never run twice (a buffer update)
            out.append(CheckpointPolicy.MUST_SAVE)
        elif c.mutated:  # a cached output would be changed by the later in-place write
            out.append(CheckpointPolicy.PREFER_RECOMPUTE)
        elif v is not None and v in recompute:
            out.append(CheckpointPolicy.MUST_RECOMPUTE)
        elif v is not None and _is_view(g, v):
            out.append(CheckpointPolicy.PREFER_RECOMPUTE)
        elif v is not None and v not in keep:
            out.append(CheckpointPolicy.PREFER_RECOMPUTE)
        elif v is None and c.view:
            out.append(CheckpointPolicy.PREFER_RECOMPUTE)
        else:  # kept, and an op with no node in the graph is kept: it costs memory, never a value
            out.append(CheckpointPolicy.MUST_SAVE)
    return out


def dropped_decisions(g: Graph, h: Graph, plan: Any, recompute_all: set[int], expressed: set[int],
                      outside: set[int] | None = None) -> dict[str, int]:
    """The plan's decisions a policy cannot state, by kind (module docstring); ``outside``: forward
    ops it recomputes that run outside every checkpointed block (a per-block policy)."""
    out: Counter[str] = Counter()
    fwd = set(forward_nodes(g))
    for v in recompute_all - expressed:
        out["recompute of a backward op" if v not in fwd else "recompute outside every block"
            if outside is not None and v in outside else "recompute without a matching call"] += 1
    out["swap"] += sum(1 for n in h.nodes.values() if n.kind == NodeKind.STORE)
    remat_rules = {"remat", "remat_chain", "deremat"}
    swap_rules = {"swap", "swap_late", "swap_output", "deswap", "reissue"}
    for a in plan.applications:
        if a.rule not in remat_rules and a.rule not in swap_rules:
            out[f"{a.rule} (changes the ops)"] += 1
    return {k: v for k, v in out.items() if v}


def _traced(g: Graph, nodes: Sequence[int], by_node: dict[int, CheckpointPolicy],
            recompute: set[int]) -> list[tuple[tuple[str, Any], CheckpointPolicy]]:
    """What ``torch.compile`` shows the policy of a region whose forward is ``nodes``: (functional op,
    shape) and its decision, per node."""
    return [((_norm(g.nodes[v].op), tuple(g.nodes[v].outputs[0].shape) if g.nodes[v].outputs else None),
             by_node.get(v, CheckpointPolicy.MUST_RECOMPUTE if v in recompute else
                         CheckpointPolicy.PREFER_RECOMPUTE if _is_view(g, v) else CheckpointPolicy.PREFER_SAVE))
            for v in nodes]


def policy_of_step(step: Any, module: nn.Module, loss_fn: Callable[..., torch.Tensor],
                   inputs: tuple[Any, ...], regions: str | Sequence[str] = "step") -> CheckpointPlanPolicy:
    """The plan of ``step`` (a ``core.train.PlanStep`` for ``loss_fn(module, *inputs)``) as a
    selective-checkpoint policy (module docstring); ``core.train.checkpoint_policy`` builds the step.

    ``regions``: ``"step"`` -- one region, the whole step (``policy.checkpoint(loss_fn, module,
    *batch)``); ``"blocks"`` -- one region per repeated block (:func:`find_blocks`), or a list of
    module names: each block whose calls the plan recomputes gets its own policy
    (``policy.regions``), installed by ``policy.apply(module)``.  Torch then recomputes block by
    block during the backward, each block's recomputations right before its backward, so the peak
    drops towards the plan's; the plan's recomputations outside every block are dropped."""
    from .schedule import get_scheduler

    if isinstance(regions, str):
        if regions not in ("step", "blocks"):
            raise ValueError(f"regions must be 'step', 'blocks' or a list of module names, not {regions!r}")
        blocks = [] if regions == "step" else find_blocks(module)
    else:
        blocks = list(regions)
        if not blocks:
            raise ValueError("regions: give at least one module name (or 'step' for the whole step)")
        for name in blocks:
            module.get_submodule(name)  # AttributeError for a name the module lacks
    c = step.first
    g = c.graph
    plan = c.plan
    h = plan.graph(g)
    forward = forward_nodes(g)
    calls = record_calls(module, loss_fn, inputs, blocks)
    pairs = align(calls, g, forward)
    fwd = set(forward)
    # forward op -> its checkpoint region (per block: the block of the call it is aligned to)
    region_of = ({v: "" for v in pairs.values()} if not blocks else
                 {v: calls[i].region for i, v in pairs.items() if calls[i].region is not None})
    recompute_all = plan_recomputed(h, g)
    mapped = {v for i, v in pairs.items() if not (calls[i].writes_state or calls[i].group is not None)}
    outside = {v for v in mapped if v not in region_of}
    recompute = {v for v in recompute_all if v in fwd and v in mapped and v in region_of and not _is_view(g, v)}
    views = {v for v in recompute_all if v in fwd and _is_view(g, v)  # recomputed anyway (always)
             and (not blocks or v in region_of)}
    decisions = decide(g, calls, pairs, recompute, forward)
    cost = AnalyticCost(step.profile)
    saved = {v for i, v in pairs.items() if decisions[i] in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)
             and (not blocks or calls[i].region is not None)}
    ph, order = policy_graph(g, recompute, forward, region_of if blocks else None, saved)
    policy_peak = int(simulate(ph, order, cost).peak)
    eager_peak = int(simulate(g, get_scheduler("traced").run(g).order, cost).peak)
    by_node = {v: decisions[i] for i, v in pairs.items()}
    pos = {v: k for k, v in enumerate(forward)}
    per_block: dict[str, RegionPolicy] = {}
    for name in blocks:
        idx = [i for i, call in enumerate(calls) if call.region == name]
        if idx and idx != list(range(idx[0], idx[0] + len(idx))):
            raise ValueError(f"block {name!r} runs more than once in the step (its calls are not one run); "
                             f"checkpoint the step as one region or name other blocks")
        if not any(decisions[i] == CheckpointPolicy.MUST_RECOMPUTE for i in idx):
            continue  # nothing recomputed on the plan's word: no region, eager saves what it saves
        spots = [pos[pairs[i]] for i in idx if i in pairs]
        per_block[name] = RegionPolicy(calls=[calls[i] for i in idx], decisions=[decisions[i] for i in idx], name=name,
                                       traced=_traced(g, forward[min(spots):max(spots) + 1], by_node, recompute))
    return CheckpointPlanPolicy(calls=calls, decisions=decisions, graph=g, recompute_nodes=recompute,
                                traced=_traced(g, forward, by_node, recompute),
                                expressed=len(recompute) + len(views),
                                dropped_by=dropped_decisions(g, h, plan, recompute_all, recompute | views,
                                                             outside if blocks else None),
                                plan_peak=int(c.simulated_peak), policy_peak=policy_peak, eager_peak=eager_peak,
                                limit_bytes=c.limit_bytes, plan=plan, matched=len(pairs), blocks=blocks,
                                regions=per_block, node_region=region_of if blocks else {})


__all__ = ["Call", "CheckpointPlanPolicy", "PolicyMismatch", "RegionPolicy", "align", "decide", "find_blocks",
           "forward_nodes", "plan_recomputed", "policy_graph", "policy_of_step", "record_calls"]

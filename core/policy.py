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
  that (the forward in traced order, every recomputed copy at the start of the backward), so it is
  the prediction for the policy, and ``plan_peak`` the one for the plan run by ``plan_step``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from .cost.model import AnalyticCost
from .ir.graph import Graph, NodeKind, TRef
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

    def __str__(self) -> str:
        return f"{self.op}{list(self.shape) if self.shape is not None else ''}"


def record_calls(module: nn.Module, loss_fn: Callable[..., torch.Tensor], inputs: Sequence[Any]) -> list[Call]:
    """The op calls torch's selective checkpointing shows its policy for ``loss_fn(module,
    *inputs)``, in order: a real ``checkpoint`` of it with a recording policy, run on fake tensors
    (the module's parameters and buffers are swapped for fake copies for the call; nothing is
    computed, nothing of the module changes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.utils.stateless import _reparametrize_module

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
        call = Call(str(op), _shape(ctx.op_output), _schema_view(op),
                    writes_state=any(w not in made for w in written))
        for w in written:
            if w in made and not calls[made[w]].mutated:
                calls[made[w]] = dataclasses.replace(calls[made[w]], mutated=True)
        outs = ctx.op_output if isinstance(ctx.op_output, (tuple, list)) else (ctx.op_output,)
        for t in outs:
            if isinstance(t, torch.Tensor):
                made.setdefault(key(t), i)
        calls.append(call)
        reads.append(read | set(written))
        wrote.append(set(written))
        return CheckpointPolicy.PREFER_RECOMPUTE

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        state = {k: mode.from_tensor(v) for k, v in (*module.named_parameters(remove_duplicate=False),
                                                      *module.named_buffers(remove_duplicate=False))}
        fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]
        with _reparametrize_module(module, state, tie_weights=True), torch.enable_grad():
            torch.utils.checkpoint.checkpoint(loss_fn, module, *fake, use_reentrant=False,
                                              context_fn=functools.partial(create_selective_checkpoint_contexts,
                                                                           record))
    # a state-writing call whose output is written later (batch norm, then an in-place ReLU): it
    # cannot run again and its cache is changed, so it and every call touching that storage up to
    # the last write are kept (and the cache is allowed to change: each reader is kept too)
    for p, c in enumerate(calls):
        if c.writes_state and c.mutated:
            mine = {k for k, v in made.items() if v == p}
            last = max(i for i in range(p + 1, len(calls)) if wrote[i] & mine)
            for i in range(p, last + 1):
                if i == p or reads[i] & mine:
                    calls[i] = dataclasses.replace(calls[i], group=p)
    return calls


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


def policy_graph(g: Graph, recompute: set[int], forward: Sequence[int]) -> tuple[Graph, list[int]]:
    """The graph and schedule selective checkpointing runs when it recomputes ``recompute`` (forward
    ops): each such op, and each view of one, gets a copy that the backward reads instead (a copy
    reads copies where its original read a recomputed op); the forward runs in traced order and
    every copy a backward op reads runs, in forward order, right before the first backward op that
    reads a forward tensor (torch recomputes the region when the backward first unpacks a saved
    tensor)."""
    h = g.copy()
    fwd = set(forward)
    members = set(recompute)
    for v in forward:  # views of recomputed tensors are recomputed with them
        if v not in members and _is_view(h, v) and any(p in members for p in h.preds(v)):
            members.add(v)
    copies: dict[int, int] = {}
    for v in forward:
        if v not in members:
            continue
        dup = recomputed_copy(h, v)
        for p in h.preds(v):
            if p in copies:
                for j in range(len(h.nodes[p].outputs)):
                    h.replace_input(dup.id, TRef(p, j), TRef(copies[p], j))
        copies[v] = dup.id
    backward = [n.id for n in g.ops() if n.id not in fwd]
    for b in backward:
        for p in h.preds(b):
            if p in copies:
                for j in range(len(h.nodes[p].outputs)):
                    h.replace_input(b, TRef(p, j), TRef(copies[p], j))
    for v in reversed(forward):  # copies nothing reads (their readers read the original's views)
        c = copies.get(v)
        if c is not None and not h.users(c):
            h.erase_node(c)
            del copies[v]
    first = next((i for i, b in enumerate(backward) if any(p in fwd or p in copies.values()
                                                           for p in h.preds(b))), len(backward))
    order = [*forward, *(copies[v] for v in forward if v in copies), *backward[first:]]
    order[len(forward):len(forward)] = backward[:first]
    return h, order


@dataclass
class CheckpointPlanPolicy:
    """A plan as a selective-checkpoint policy (module docstring): ``context_fn`` for
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False, context_fn=...)``."""

    calls: list[Call]  # the op calls the policy expects, in order
    decisions: list[CheckpointPolicy]  # one per call
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
    _seen: list[int] = field(default_factory=list)  # calls seen by each region run so far
    traced: list[tuple[tuple[str, Any], CheckpointPolicy]] = field(default_factory=list)  # compile's view
    context_fn: Callable[[], tuple[Any, Any]] = field(init=False, repr=False)  # for checkpoint(context_fn=...)

    @property
    def dropped(self) -> int:
        return sum(self.dropped_by.values())

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

    def summary(self) -> str:
        eager = max(1, self.eager_peak)
        return (f"{self.graph.name}: {len(self.calls)} op calls, {len(self.plan_calls)} recomputed on the plan's word; "
                f"plan decisions expressed {self.expressed}, dropped {self.dropped} "
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


def dropped_decisions(g: Graph, h: Graph, plan: Any, recompute_all: set[int], expressed: set[int]) -> dict[str, int]:
    """The plan's decisions a policy cannot state, by kind (module docstring)."""
    out: Counter[str] = Counter()
    fwd = set(forward_nodes(g))
    for v in recompute_all - expressed:
        out["recompute of a backward op" if v not in fwd else "recompute without a matching call"] += 1
    out["swap"] += sum(1 for n in h.nodes.values() if n.kind == NodeKind.STORE)
    remat_rules = {"remat", "remat_chain", "deremat"}
    swap_rules = {"swap", "swap_late", "swap_output", "deswap", "reissue"}
    for a in plan.applications:
        if a.rule not in remat_rules and a.rule not in swap_rules:
            out[f"{a.rule} (changes the ops)"] += 1
    return {k: v for k, v in out.items() if v}


def policy_of_step(step: Any, module: nn.Module, loss_fn: Callable[..., torch.Tensor],
                   inputs: tuple[Any, ...]) -> CheckpointPlanPolicy:
    """The plan of ``step`` (a ``core.train.PlanStep`` for ``loss_fn(module, *inputs)``) as a
    selective-checkpoint policy (module docstring); ``core.train.checkpoint_policy`` builds the step."""
    from .schedule import get_scheduler

    c = step.first
    g = c.graph
    plan = c.plan
    h = plan.graph(g)
    forward = forward_nodes(g)
    calls = record_calls(module, loss_fn, inputs)
    pairs = align(calls, g, forward)
    fwd = set(forward)
    recompute_all = plan_recomputed(h, g)
    mapped = {v for i, v in pairs.items() if not (calls[i].writes_state or calls[i].group is not None)}
    recompute = {v for v in recompute_all if v in fwd and v in mapped and not _is_view(g, v)}
    views = {v for v in recompute_all if v in fwd and _is_view(g, v)}  # recomputed anyway (always)
    decisions = decide(g, calls, pairs, recompute, forward)
    cost = AnalyticCost(step.profile)
    ph, order = policy_graph(g, recompute, forward)
    policy_peak = int(simulate(ph, order, cost).peak)
    eager_peak = int(simulate(g, get_scheduler("traced").run(g).order, cost).peak)
    by_node = {v: decisions[i] for i, v in pairs.items()}
    traced = [((_norm(g.nodes[v].op), tuple(g.nodes[v].outputs[0].shape) if g.nodes[v].outputs else None),
               by_node.get(v, CheckpointPolicy.MUST_RECOMPUTE if v in recompute else
                           CheckpointPolicy.PREFER_RECOMPUTE if _is_view(g, v) else CheckpointPolicy.PREFER_SAVE))
              for v in forward]
    return CheckpointPlanPolicy(calls=calls, decisions=decisions, graph=g, recompute_nodes=recompute, traced=traced,
                                expressed=len(recompute) + len(views),
                                dropped_by=dropped_decisions(g, h, plan, recompute_all, recompute | views),
                                plan_peak=int(c.simulated_peak), policy_peak=policy_peak, eager_peak=eager_peak,
                                limit_bytes=c.limit_bytes, plan=plan, matched=len(pairs))


__all__ = ["Call", "CheckpointPlanPolicy", "PolicyMismatch", "align", "decide", "policy_of_step",
           "forward_nodes", "plan_recomputed", "policy_graph", "record_calls"]

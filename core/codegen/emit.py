"""Graph + schedule -> the source of a standalone PyTorch script (the model: ``torch.fx``'s Python
code generation, one statement per node, plus explicit ``del`` for memory).

The script's ``_step`` body runs the ops in schedule order, one line per op, each line a direct call
of the aten overload the node records (``v = aten.mm.default(a, b)  # module.path``); names are
deleted right after their last use (:mod:`core.codegen.release`) so every storage dies at the step
where ``core.analysis.lifetimes`` frees it.  Nothing is ``exec``-ed at run time: the script is
ordinary Python importing only torch, with the runtime support of :mod:`core.codegen.runtime`
pasted in.  Each node kind has its own emitter (``EMITTERS``): aten ops, the Store/Load of a swap
(MAGIS section 5.2) and fission nodes (section 4.2: a loop over the parts, nested for nested
fission, names scoped to the loop body).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from ..cost.devices import DEFAULT_PROFILE
from ..fmt import format_bytes, terminal_safe
from ..ir import ops
from ..ir.graph import Graph, GraphError, Node, NodeKind, TorchConst, TRef
from .release import ReleasePlan, input_key, input_kind, integer_ranges, release_plan, variable_names

RUNTIME_MARKER = "# ==== RUNTIME BEGIN"


class CodegenError(GraphError):
    """The graph cannot be exported (an op without aten semantics, a bad schedule...)."""


def runtime_source() -> str:
    """The runtime support pasted into every script (``runtime.py`` below its marker)."""
    text = (Path(__file__).with_name("runtime.py")).read_text()
    i = text.index(RUNTIME_MARKER)
    return text[text.index("\n", i) + 1:].strip() + "\n"


# ---- values -------------------------------------------------------------------------------------
def fmt_value(v: Any, names: dict[TRef, str]) -> str:
    """Python source of an op argument (tensors by name, torch constants as ``torch.*``)."""
    if isinstance(v, TRef):
        return names[v]
    if isinstance(v, TorchConst):
        return "device" if v.kind == "device" else f"torch.{v.value}"
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return repr(v)
    if isinstance(v, float):
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else '-float("inf")'
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(fmt_value(x, names) for x in v) + "]"
    if isinstance(v, tuple):
        inner = ", ".join(fmt_value(x, names) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {fmt_value(x, names)}" for k, x in v.items()) + "}"
    raise CodegenError(f"cannot write an argument of type {type(v).__name__}: {v!r}")


@cache
def _schema_returns(op: str) -> tuple[int, bool] | None:
    """(number of returns, returns a list) from the op's schema; None if torch does not know it."""
    from ..ir.torch_bridge import resolve_op

    try:
        rets = resolve_op(op)._schema.returns
    except (AttributeError, RuntimeError, ValueError):
        return None
    return len(rets), len(rets) == 1 and rets[0].type.kind() == "ListType"


def callee(op: str) -> str:
    """The expression calling ``op``: ``aten.mm.default`` (``aten = torch.ops.aten``) or
    ``torch.ops.<ns>.<op>.<overload>`` for other namespaces."""
    expr = ops.emit(op)
    if ops.device_neutral(op):  # a runtime function standing for a device-specific kernel
        if _schema_returns(op) is None:
            raise CodegenError(f"torch has no operator {op!r} (was the graph captured with another version?)")
        return expr
    if expr.count(".") != 2 or not all(p.isidentifier() for p in expr.split(".")):
        raise CodegenError(f"op {op!r} is not an aten-style operator (namespace.op.overload); "
                           f"only graphs imported from PyTorch can be exported")
    if _schema_returns(op) is None:
        raise CodegenError(f"torch has no operator {op!r} (was the graph captured with another version?)")
    return expr if expr.startswith("aten.") else f"torch.ops.{expr}"


# ---- per-kind emitters ----------------------------------------------------------------------------
class ScriptWriter:
    """Writes the body of ``_step``: one line per scheduled node, then its ``del`` line."""

    def __init__(self, g: Graph, order: Sequence[int], copy_done: Mapping[int, int] | None = None,
                 depth: int = 0, prefix: str = "", waits: Sequence[tuple[int, int]] = (),
                 swap_streams: bool = False) -> None:
        self.g = g
        self.order = list(order)
        self.depth = depth  # fission loops around this graph's lines
        self.prefix = prefix  # of every name inside a fission loop (outer names never start with _)
        self.names = {r: prefix + v for r, v in variable_names(g, self.order).items()}
        self.plan: ReleasePlan = release_plan(g, self.order, copy_done)
        self.fissions = 0
        self.bound: set[TRef] = set()  # tensors bound to their own name
        self.pending_loads: set[TRef] = set()
        self.uses_swap = any(g[n].kind in (NodeKind.STORE, NodeKind.LOAD) for n in self.order)
        self.underscore = False  # an unused output was bound to ``_`` by the current line
        self.waits: dict[int, list[int]] = {}  # node -> STOREs whose copies it waits for (SwapAdvisor)
        for v, st in waits:
            self.waits.setdefault(v, []).append(st)
        self.swap_streams = swap_streams

    def _comment(self, node: Node, extra: str = "") -> str:
        parts = [p for p in (extra, node.module) if p]
        if node.recompute_of is not None and node.recompute_of in self.g.nodes:
            parts.append(f"recompute of {self.g[node.recompute_of].name}")
        return f"  # {terminal_safe(' '.join(' | '.join(parts).split()))}" if parts else ""

    def _target(self, r: TRef) -> str:
        if r in self.plan.used:
            self.bound.add(r)
            return self.names[r]
        return "_"

    def _args(self, node: Node) -> str:
        parts = [fmt_value(a, self.names) for a in node.args]
        parts += [f"{k}={fmt_value(v, self.names)}" for k, v in node.kwargs.items()]
        return ", ".join(parts)

    def emit_op(self, node: Node) -> list[str]:
        call = f"{callee(node.op)}({self._args(node)})"
        n_ret, is_list = _schema_returns(node.op)  # type: ignore[misc]
        comment = self._comment(node)
        if n_ret == 0:
            if any(r in self.plan.used for r in node.refs()):
                raise CodegenError(f"{node.name!r}: {node.op} returns nothing but its output is used")
            return [f"{call}{comment}"]
        if n_ret == 1 and not is_list:
            if len(node.outputs) != 1:
                raise CodegenError(f"{node.name!r}: {node.op} returns one tensor, graph says "
                                   f"{len(node.outputs)}")
            r = TRef(node.id, 0)
            self.bound.add(r)
            return [f"{self.names[r]} = {call}{comment}"]
        targets = [self._target(r) for r in node.refs()]
        lhs = ", ".join(targets) + ("," if len(targets) == 1 else "")
        if "_" in targets:
            self.underscore = True
        return [f"{lhs} = {call}{comment}"]

    def emit_store(self, node: Node) -> list[str]:
        """Swap out (MAGIS section 5.2): device tensor -> host, on the copy stream."""
        src = self._single_input(node)
        r = TRef(node.id, 0)
        self.bound.add(r)
        return [f"{self.names[r]} = swap.store({self.names[src]}){self._comment(node, 'store')}"]

    def emit_load(self, node: Node) -> list[str]:
        """Swap in: host tensor -> device on the copy stream; compute waits before its first use."""
        src = self._single_input(node)
        r = TRef(node.id, 0)
        self.bound.add(r)
        self.pending_loads.add(r)
        return [f"{self.names[r]} = swap.load({self.names[src]}){self._comment(node, 'load')}"]

    def emit_fission(self, node: Node) -> list[str]:
        """F-Trans (MAGIS section 4.2): a loop over the n parts.  The full-size outputs are allocated
        first; each part slices the split inputs (views), runs one copy of the sub-graph with its
        own ``del`` lines, writes its outputs into slice k of a concatenated output or adds them to a
        summed one, and deletes them, so one part's intermediates die before the next starts.
        Names inside the loop are scoped with a ``_f<k>_`` prefix (nested fission: nested loops)."""
        f = node.fission
        if f is None:
            raise CodegenError(f"fission node {node.name!r} has no sub-graph")
        sub = f.graph
        depth = self.depth + 1
        self.fissions += 1
        prefix = f"_f{self.fissions}_" if self.depth == 0 else f"{self.prefix}f{self.fissions}_"
        k = f"_k{depth}"
        ins = node.inputs()
        out_lines: list[str] = []
        outs = node.refs()
        for j, (r, (how, _d)) in enumerate(zip(outs, f.out_combine, strict=True)):
            t = node.outputs[j]
            alloc = "torch.zeros" if how == "sum" else "torch.empty"
            tgt = self._target(r)
            if tgt == "_":  # an unused output still takes its storage during the step (deleted after
                tgt = f"{prefix}unused{j}"  # it by the release plan, like any output read by nobody)
            self.bound.add(r)
            alloc_laid = self._alloc_in_layout(node, j, list(t.shape), t.dtype) if how == "cat" else None
            self.names[r] = tgt
            if alloc_laid is not None:  # the part's layout (a permuted view, attention's output)
                out_lines.append(f"{tgt} = {alloc_laid}")
            else:
                out_lines.append(f"{tgt} = {alloc}({list(t.shape)}, dtype=torch.{t.dtype}, device=device)")
        sub_order = [v for v in sub.topo_order() if sub.nodes[v].kind != NodeKind.PLACEHOLDER]
        inner = ScriptWriter(sub, sub_order, depth=depth, prefix=prefix)
        inner.fissions = self.fissions
        head = [f"for {k} in range({f.n}):  # {node.name}: {len(sub_order)} ops x {f.n} parts"]
        loop: list[str] = []
        for ph, r, d in zip(sub.placeholders(), ins, f.in_dims, strict=True):
            name = inner.names[ph.refs()[0]]
            if d is None:
                loop.append(f"{name} = {self.names[r]}")
            else:
                p = ph.out.shape[d]
                loop.append(f"{name} = aten.slice.Tensor({self.names[r]}, {d}, {k} * {p}, ({k} + 1) * {p})")
        loop.extend(inner.steps())
        self.fissions = inner.fissions
        part_names = []
        for j, ((how, d), key) in enumerate(zip(f.out_combine, sub.outputs, strict=True)):
            part = inner.names[sub.outputs[key]]
            full = self.names[outs[j]]
            if how == "sum":
                loop.append(f"{full}.add_({part})")
            else:
                p = sub.tensor(sub.outputs[key]).shape[d]
                loop.append(f"aten.slice.Tensor({full}, {d}, {k} * {p}, ({k} + 1) * {p}).copy_({part})")
            part_names.append(part)
        dead = sorted(set(part_names) | {inner.names[ph.refs()[0]] for ph in sub.placeholders()})
        loop.append("del " + ", ".join(dead))
        return out_lines + head + ["    " + line for line in loop]

    def _layout(self, node: Node, sub: Graph, r: TRef, depth: int = 0) -> tuple[str, Any] | None:
        """The memory layout of sub-graph tensor ``r`` as the original op would give it, statically:
        ``("order", dims outermost first)``, ``("like", name)`` (a fission input's layout), or None
        (contiguous).  A fission output laid out like that keeps the strides the rest of the graph
        was captured with (a ``view`` after a ``permute`` or after attention needs them)."""
        p = sub.nodes[r.node]
        if depth > 64:
            return None
        if p.kind == NodeKind.PLACEHOLDER:
            phs = [ph.id for ph in sub.placeholders()]
            name = self.names.get(node.inputs()[phs.index(p.id)])
            return ("like", name) if name is not None else None
        if p.kind != NodeKind.OP:
            return None
        pos = ops.layout_from(p.op, r.index)
        if pos is not None and pos < len(p.args) and isinstance(p.args[pos], TRef):
            base = self._layout(node, sub, p.args[pos], depth + 1)
            return base if base is None or base[0] == "order" or len(p.outputs[r.index].shape) == \
                len(sub.tensor(p.args[pos]).shape) else None
        rank = len(p.outputs[r.index].shape)
        perm = None
        if p.op == "aten.permute.default":
            perm = [d % rank for d in p.args[1]]
        elif p.op in ("aten.transpose.int", "aten.t.default") and rank >= 2:
            a, b = (0, 1) if p.op == "aten.t.default" else (p.args[1] % rank, p.args[2] % rank)
            perm = list(range(rank))
            perm[a], perm[b] = perm[b], perm[a]
        if perm is not None:
            base = self._layout(node, sub, p.args[0], depth + 1)
            if base is not None and base[0] != "order":
                return None
            xo = base[1] if base is not None else list(range(rank))
            return ("order", [perm.index(j) for j in xo])
        if p.op in ("aten.alias.default", "aten.detach.default"):
            return self._layout(node, sub, p.args[0], depth + 1)
        return None

    def _alloc_in_layout(self, node: Node, j: int, shape: list[int], dtype: str) -> str | None:
        """The allocation of fission output ``j`` in its op's layout (None: contiguous will do)."""
        sub = node.fission.graph
        lay = self._layout(node, sub, list(sub.outputs.values())[j])
        if lay is None or (lay[0] == "order" and lay[1] == sorted(lay[1])):
            return None
        if lay[0] == "order":
            return f"empty_ordered({shape}, {lay[1]}, torch.{dtype}, device)"
        return f"empty_in_layout({shape}, {lay[1]}, torch.{dtype}, device)"

    def _single_input(self, node: Node) -> TRef:
        ins = node.inputs()
        if len(ins) != 1 or len(node.outputs) != 1:
            raise CodegenError(f"{node.kind.value} node {node.name!r} must have one input and one "
                               f"output (has {len(ins)} and {len(node.outputs)})")
        return ins[0]

    EMITTERS: dict[NodeKind, Callable[[ScriptWriter, Node], list[str]]] = {
        NodeKind.OP: emit_op,
        NodeKind.STORE: emit_store,
        NodeKind.LOAD: emit_load,
        NodeKind.FISSION: emit_fission,
    }

    def body(self) -> list[str]:
        out: list[str] = []
        if self.uses_swap:
            out.append("swap = Swapper(device, streams=2)" if self.swap_streams else "swap = Swapper(device)")
        for n in self.g.placeholders():
            out.append(f"{self.names[n.refs()[0]]} = tensors[{input_key(n)!r}]")
        out.extend(self.steps())
        if self.uses_swap:
            out.append("swap.finish()")
        out.append("return {")
        for key, r in self.g.outputs.items():
            out.append(f"    {key!r}: {self.names[r]},")
        out.append("}")
        return out

    def steps(self) -> list[str]:
        """One line (or loop) per scheduled node, each followed by its ``del`` line."""
        out: list[str] = []
        for i, nid in enumerate(self.order):
            node = self.g[nid]
            emitter = self.EMITTERS.get(node.kind)
            if emitter is None:
                raise CodegenError(f"node {node.name!r} of kind {node.kind.value} cannot be scheduled")
            for st in self.waits.get(nid, ()):
                out.append(f"swap.wait_copy({self.names[TRef(st, 0)]})")
            for r in node.inputs():
                if r in self.pending_loads:
                    self.pending_loads.discard(r)
                    out.append(f"swap.wait({self.names[r]})")
            self.underscore = False
            out.extend(emitter(self, node))
            dead = ["_"] if self.underscore else []
            dead += [self.names[r] for r in self.plan.after[i] if r in self.bound]
            if dead:
                out.append("del " + ", ".join(dead))
        return out


# ---- the file -----------------------------------------------------------------------------------
def is_constant(node: Node) -> bool:
    """A constant tensor the model code created (``const:<name>``): its value is in the graph and
    the script embeds it (it is not one of the caller's tensors)."""
    return node.kind == NodeKind.PLACEHOLDER and node.target.startswith("const:")


def input_spec(g: Graph) -> dict[str, dict[str, Any]]:
    """name -> shape, dtype, kind (param/buffer/input) and valid integer range (or None), for every
    graph input the caller passes."""
    ranges = integer_ranges(g)
    spec: dict[str, dict[str, Any]] = {}
    for n in g.placeholders():
        if is_constant(n):
            continue
        t = n.out
        rng = ranges.get(n.id)
        spec[input_key(n)] = {"shape": list(t.shape), "dtype": t.dtype, "kind": input_kind(n),
                              "range": list(rng) if rng else None}
    return spec


def constants_source(g: Graph) -> str:
    """``CONSTANTS = {name: torch.tensor(value, dtype=...)}`` for the graph's constant tensors."""
    rows = []
    for n in g.placeholders():
        if not is_constant(n):
            continue
        if "value" not in n.kwargs:
            raise CodegenError(f"constant {n.name!r} has no value in the graph")
        value = fmt_value(n.kwargs["value"], {})
        rows.append(f"    {input_key(n)!r}: torch.tensor({value}, dtype=torch.{n.out.dtype}),")
    return "CONSTANTS = {\n" + "\n".join(rows) + "\n}" if rows else "CONSTANTS: dict[str, torch.Tensor] = {}"


def _doc(text: str) -> str:
    """``text`` safe inside the script's docstring (one line, no quotes or escapes that end it)."""
    return terminal_safe(" ".join(text.split()).replace("\\", "/").replace('"', "'"))


def _random_note(meta: Mapping[str, Any]) -> str:
    """The header's paragraph on random ops drawn per micro-batch (empty where there are none)."""
    if "random" not in meta:
        return ""
    import textwrap

    outs, drawn = meta["random_outputs"], meta["random_ops"]
    text = (f"Random ops draw per micro-batch ({_doc(', '.join(drawn[:4]))}{', ...' if len(drawn) > 4 else ''}): "
            f"each part draws its own numbers, as gradient accumulation does, so {len(outs)} "
            f"output{'s' if len(outs) != 1 else ''} ({_doc(', '.join(outs[:3]))}{', ...' if len(outs) > 3 else ''}) "
            f"are not eager PyTorch's values for the same seed: compare them by distribution, not value by value.")
    return "\n\n" + textwrap.fill(text, 100)


def _literal(obj: Any, indent: str = "    ") -> str:
    """A dict literal with one entry per line (deterministic, Python syntax)."""
    if not obj:
        return "{}"
    rows = [f"{indent}{k!r}: {v!r}," for k, v in obj.items()]
    return "{\n" + "\n".join(rows) + "\n}"


RANDOM_PER_PART = ops.RANDOM_PER_PART


def per_part_draws(g: Graph) -> dict[str, list[str]]:
    """The graph outputs computed from random numbers that a fission node draws per part (the
    random ops of its sub-graph, which only micro-batching splits: ``transform.microbatch``), each
    with those random ops.  Gradient accumulation draws each micro-batch's numbers at its own size,
    so these outputs are not eager PyTorch's single draw: the exported script says so, and
    ``codegen.verify`` does not compare them value by value."""
    drawing: dict[int, set[str]] = {}
    for n in g.nodes.values():
        if n.kind == NodeKind.FISSION and n.fission is not None:
            found = _draws_in(n.fission.graph)
            if found:
                drawing[n.id] = found
    if not drawing:
        return {}
    dep: dict[int, set[str]] = {}
    for v in g.topo_order():
        got = set(drawing.get(v, ()))
        for p in g.preds(v):
            got |= dep.get(p, set())
        if got:
            dep[v] = got
    return {k: sorted(dep[r.node]) for k, r in g.outputs.items() if r.node in dep}


def _draws_in(sub: Graph) -> set[str]:
    found = {n.name for n in sub.nodes.values() if n.kind == NodeKind.OP and ops.node_draws_random(n)}
    for n in sub.nodes.values():
        if n.kind == NodeKind.FISSION and n.fission is not None:
            found |= _draws_in(n.fission.graph)
    return found


def generate_source(g: Graph, order: Sequence[int], schedule_name: str = "custom", cost: Any = None,
                    sim: Any = None, waits: Sequence[tuple[int, int]] = (), swap_streams: bool = False) -> str:
    """The exported script for ``g`` run in ``order`` (a list of op node ids); ``sim``: its
    simulation with ``cost`` when the caller already has it.  ``cost`` (default: the analytic model
    of the default device) decides the release points of swapped tensors' device copies and the
    header's peak, latency and device.  ``swap_streams`` and ``waits`` (``search.plan.sim_options``
    of a SwapAdvisor plan): swap-outs and swap-ins on two side streams, and the compute waiting for
    the listed swap-outs before the listed nodes.

    Raises GraphError if ``order`` is not a valid schedule, CodegenError if a node cannot be written.
    """
    from ..simulate import simulate

    order = list(order)
    if sim is None:
        sim = simulate(g, order, cost=cost, swap_streams=swap_streams, waits=waits)
    writer = ScriptWriter(g, order, sim.copy_done, waits=waits, swap_streams=swap_streams)
    body = writer.body()
    spec = input_spec(g)
    device_name = getattr(getattr(cost, "device", None), "name", None) or DEFAULT_PROFILE
    meta = {
        "graph": g.name,
        "schedule": schedule_name,
        "mode": g.meta.get("mode", "unknown"),
        "ops": len(order),
        "simulated_peak_bytes": int(sim.peak),
        "simulated_resident_bytes": int(sim.memory.resident),
        "simulated_latency_seconds": float(sim.latency),
        "simulated_device": device_name,
    }
    drawn = per_part_draws(g)
    if drawn:  # not eager's values: each part draws its own random numbers
        meta["random"] = RANDOM_PER_PART
        meta["random_outputs"] = sorted(drawn)
        meta["random_ops"] = sorted({o for v in drawn.values() for o in v})
    kinds: dict[str, int] = {}
    for nid in order:
        k = {"op": "aten"}.get(g[nid].kind.value, g[nid].kind.value)
        kinds[k] = kinds.get(k, 0) + 1
    kind_text = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    names_text = ", ".join(list(spec)[:4]) + (", ..." if len(spec) > 4 else "")
    peak, resident = meta["simulated_peak_bytes"], meta["simulated_resident_bytes"]
    header = f'''#!/usr/bin/env python3
"""{_doc(g.name)}: {_doc(schedule_name)} schedule, exported by MAGIS Studio (core.codegen).

{len(order)} ops ({kind_text}) run in schedule order, one line per op; each tensor name is deleted
right after its last use, so every storage is freed at the step where the simulator frees it.
Simulated on {device_name}: peak {format_bytes(peak)} ({peak} bytes, {resident} of them inputs and
weights), latency {meta["simulated_latency_seconds"] * 1e3:.3f} ms.

Run:     python this_file.py [--device cuda|cpu] [--inputs tensors.pt] [--repeat N]
         (prints JSON: measured peak bytes and seconds next to the simulator's prediction)
Import:  run(tensors, device) -> dict of outputs; tensors: {{{_doc(names_text)}}}
Needs only torch.{_random_note(meta)}
"""

from __future__ import annotations
'''
    parts = [
        header,
        runtime_source(),
        "\n# ---- the plan " + "-" * 84,
        f"META = {_literal(meta)}",
        "",
        f"INPUTS = {_literal(spec)}",
        "",
        constants_source(g),
        "",
        "OUTPUTS = [" + "".join(f"\n    {k!r}," for k in g.outputs) + ("\n]" if g.outputs else "]"),
        "",
        "",
        "def run(tensors: dict[str, torch.Tensor], device: str | torch.device = TORCH_DEVICE"
        ") -> dict[str, torch.Tensor]:",
        '    """Run the plan on ``tensors`` (every name of INPUTS; moved to ``device`` if elsewhere)',
        '    and return the graph outputs (OUTPUTS).  Tensors the caller passes are never freed here."""',
        "    dev = torch.device(device)",
        "    check_inputs(tensors, INPUTS)",
        "    placed = place_inputs({**CONSTANTS, **{name: tensors[name] for name in INPUTS}}, dev)",
        "    with torch.no_grad():",
        "        return _step(placed, dev)",
        "",
        "",
        "def measure(tensors: dict[str, torch.Tensor], device: str | torch.device = TORCH_DEVICE"
        ") -> tuple[dict[str, torch.Tensor], dict]:",
        '    """Run once and measure the peak memory like the simulator counts it: the inputs, weights',
        '    and constants (resident) plus every live intermediate storage."""',
        "    return measure_memory(run, tensors, device, [*(tensors[n] for n in INPUTS), *CONSTANTS.values()])",
        "",
        "",
        "def _step(tensors: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:",
        *("    " + line for line in body),
        "",
        "",
        'if __name__ == "__main__":',
        "    sys.exit(main(run, measure, META, INPUTS))",
        "",
    ]
    return "\n".join(parts)


def export_script(g: Graph, order: Sequence[int], path: str | os.PathLike, schedule_name: str = "custom",
                  cost: Any = None, sim: Any = None, waits: Sequence[tuple[int, int]] = (),
                  swap_streams: bool = False) -> Path:
    """Write :func:`generate_source` to ``path`` atomically (never a half-written file); returns it."""
    src = generate_source(g, order, schedule_name=schedule_name, cost=cost, sim=sim, waits=waits,
                          swap_streams=swap_streams)
    from ..ir.io import atomic_write

    return atomic_write(path, src.encode())

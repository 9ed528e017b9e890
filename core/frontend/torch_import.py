"""PyTorch -> Graph.

The forward pass, or the whole training step (forward, loss, backward producing every weight
gradient, optionally an SGD update), is captured with AOTAutograd's ``aot_export_module`` on fake
tensors: shapes and dtypes are exact, nothing is computed and no parameter memory is allocated, so
multi-billion-parameter models import on a laptop.  The captured graph is functional (buffer
mutations such as batch-norm running statistics become extra outputs), and every node is an aten
call, so any graph derived from it can be exported and run.

Module paths: AOTAutograd's joint trace does not keep ``nn_module_stack``, so each op's module path
is derived from parameter ownership -- an op that reads a parameter belongs to the module owning
it; a backward op that reads saved forward activations belongs to the deepest module common to
their producers; any other op to the deepest module common to the ops that produce its inputs.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..ir import ops
from ..ir.graph import Graph, GraphError, Node, NodeKind, TensorKind, TensorMeta, TorchConst, TRef
from .fake_kernels import capture_kernels, clear_dynamic_op, last_dynamic_op
from .idioms import FIXED_DRAW, CaptureIdioms, Origin, RandomRead, Site, is_model_file, random_read, show_path


class ImportErrorMAGIS(GraphError):
    """The model could not be captured (unsupported construct, bad inputs...).  ``detail``: what
    torch logged meanwhile (kept out of the one-line message; ``magis --verbose`` prints it)."""

    detail: str = ""


@contextlib.contextmanager
def held_torch_logs(into: list[str]) -> Iterator[None]:
    """Records of torch's loggers go to ``into`` (formatted lines, tracebacks included) instead of
    the terminal: a fake kernel that rejects its inputs logs its stack before raising, which would
    bury the one-line message under dozens of lines."""
    import logging

    class _Held(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            into.append(logging.Formatter("%(levelname)s %(name)s: %(message)s").format(record))

    names = ["torch"] + [n for n in list(logging.root.manager.loggerDict) if n.startswith("torch.")]
    saved = []
    for n in names:
        lg = logging.getLogger(n)
        saved.append((lg, lg.handlers[:], lg.propagate))
        for h in lg.handlers[:]:
            lg.removeHandler(h)
        lg.propagate = n != "torch"
    top = logging.getLogger("torch")
    held = _Held()
    top.addHandler(held)
    try:
        yield
    finally:
        top.removeHandler(held)
        for lg, handlers, propagate in saved:
            for h in handlers:
                lg.addHandler(h)
            lg.propagate = propagate


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _const(v: Any) -> Any:
    if isinstance(v, torch.dtype):
        return TorchConst("dtype", _dtype_name(v))
    if isinstance(v, torch.device):
        return TorchConst("device", v.type)
    if isinstance(v, torch.layout):
        return TorchConst("layout", str(v).removeprefix("torch."))
    if isinstance(v, torch.memory_format):
        return TorchConst("memory_format", str(v).removeprefix("torch."))
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return type(v)(_const(x) for x in v)
    raise ImportErrorMAGIS(f"unsupported constant argument of type {type(v).__name__}: {v!r}")


def _meta_of(val: Any, kind: TensorKind) -> TensorMeta:
    if val is None:  # an output the op did not compute (e.g. a masked-off gradient)
        return TensorMeta((0,), "float32", kind)
    if not isinstance(val, torch.Tensor):
        raise ImportErrorMAGIS(f"non-tensor op output {type(val).__name__}")
    try:
        shape = tuple(int(s) for s in val.shape)
    except (TypeError, ValueError):
        raise ImportErrorMAGIS("dynamic shapes are not supported; give example inputs of fixed size") from None
    return TensorMeta(shape, _dtype_name(val.dtype), kind)


MAX_CONSTANT_ELEMENTS = 65536


def _constant_value(t: torch.Tensor, name: str) -> Any:
    """The value of a constant tensor as nested lists (the graph file embeds it)."""
    from torch._subclasses.fake_tensor import is_fake

    if is_fake(t) or t.device.type == "meta":
        raise ImportErrorMAGIS(f"constant tensor {name} was created under fake tensors; its value is unknown")
    if t.numel() > MAX_CONSTANT_ELEMENTS:
        raise ImportErrorMAGIS(f"constant tensor {name} has {t.numel()} elements; register it as a buffer")
    return t.detach().cpu().tolist()


class _TrainStep(nn.Module):
    def __init__(self, model: nn.Module, loss_fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self._loss_fn = loss_fn
        self.unused: frozenset[str] = frozenset()

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, nn.Parameter]]:
        """The model's parameters except the names the loss never reads (``unused``): AOTAutograd
        gives every name it lists a gradient and refuses a name that gets none, while eager
        autograd leaves such a parameter's ``.grad`` None.  A name left out keeps its parameter
        as a constant of the trace."""
        for n, p in super().named_parameters(prefix, recurse, remove_duplicate):
            if n not in self.unused:
                yield n, p

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor]:
        loss = self._loss_fn(self.model, *inputs)
        if self.traced_forward is not None:
            self.traced_forward()
        return (loss,)

    traced_forward: Callable[[], None] | None = None  # called when the loss is computed (_SizeWatch)


# The most nodes a capture makes.  A graph file holds 32 MiB of JSON (``ir.schema.Limits``), about 230
# bytes a node (measured: a Mamba-130m training step, b8 x 128 tokens, 106,624 nodes, 24.7 MB), so
# some 145k nodes; and tracing slows as the graph grows (1.7 ms a node at 18k nodes, 5 ms at 107k: that
# Mamba takes 9 minutes).  A graph past the bound is refused while it is traced, not after.
MAX_NODES = 100_000
# Nodes of the training step per node of its forward (loss included), measured at the end of the
# traced forward: 1.6 (ResNet) to 2.35 (Mamba) over nine models; the estimate uses the high end.
JOINT_PER_FORWARD = 2.35
PROGRESS_NODES = 10_000  # a progress message every this many traced nodes


class GraphTooLarge(ImportErrorMAGIS):
    """The capture would make more than ``max_nodes`` nodes (an unrolled loop: a recurrent scan over
    every token, many layers)."""


class _SizeWatch:
    """Watches the graph AOTAutograd's tracer is building (the nodes of its proxy mode's fx graph),
    read every ``CaptureIdioms.WATCH_EVERY`` torch calls of the model's Python and when the traced
    forward returns: says its size every :data:`PROGRESS_NODES` nodes, and raises
    :class:`GraphTooLarge` as soon as the step is sure to pass ``max_nodes`` -- during the forward
    when even the smallest ratio of step to forward nodes (1.5) passes it, at the forward's end from
    the estimate (:data:`JOINT_PER_FORWARD`).  The backward runs in autograd's engine, which calls
    no Python of the model: the forward decides (for Mamba-130m at b8 x 128 tokens, after a quarter
    of the time the whole capture takes)."""

    def __init__(self, max_nodes: int | None, training: bool, say: Progress) -> None:
        self.max_nodes, self.training, self.say = max_nodes, training, say
        self.forward_nodes: int | None = None
        self.reported = 0

    @staticmethod
    def _nodes() -> int | None:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode

        mode = get_proxy_mode()
        tracer = getattr(mode, "tracer", None)
        graph = getattr(tracer, "graph", None)
        return len(graph.nodes) if graph is not None else None

    def forward_done(self) -> None:
        n = self._nodes()
        if n is not None and self.training:
            self.forward_nodes = n
            est = math.ceil(n * JOINT_PER_FORWARD)
            self.say(f"traced the forward and loss: {n:,} nodes; the training step will have about {est:,}")
            self._check(est, f"about {est:,} nodes ({n:,} in the forward and loss)")

    def __call__(self) -> None:
        n = self._nodes()
        if n is None:
            return
        if n >= self.reported + PROGRESS_NODES:
            self.reported = n - n % PROGRESS_NODES
            phase = "the backward" if self.forward_nodes is not None or not self.training else "the forward"
            self.say(f"tracing {phase}: {n:,} nodes so far")
        if self.training and self.forward_nodes is None:
            low = math.ceil(n * 1.5)
            self._check(low, f"more than {low:,} nodes ({n:,} in the forward alone, which is not done)")
        else:
            self._check(n, f"more than {n:,} nodes")

    def _check(self, nodes: int, what: str) -> None:
        if self.max_nodes is not None and nodes > self.max_nodes:
            step = "training step" if self.training else "forward pass"
            raise GraphTooLarge(
                f"could not capture the model: the {step} unrolls into {what}, past the bound of "
                f"{self.max_nodes:,} (--max-nodes); hint: a Python loop over tokens (a recurrent scan) or "
                f"layers makes ops per step: capture fewer tokens or layers (the graph grows with each), "
                f"or raise --max-nodes")


class _Forward(nn.Module):
    def __init__(self, model: nn.Module, forward_fn: Callable[..., Any] | None) -> None:
        super().__init__()
        self.model = model
        self._forward_fn = forward_fn

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self._forward_fn(self.model, *inputs) if self._forward_fn else self.model(*inputs)
        if isinstance(out, torch.Tensor):
            return (out,)
        if hasattr(out, "to_tuple"):
            out = out.to_tuple()
        return tuple(t for t in out if isinstance(t, torch.Tensor))


def _strip(name: str) -> str:
    return name.removeprefix("model.")


Progress = Callable[[str], None]


def capture(
    model: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    loss_fn: Callable[..., torch.Tensor] | None = None,
    forward_fn: Callable[..., Any] | None = None,
    training: bool = True,
    name: str = "model",
    sgd_lr: float | None = None,
    progress: Progress | None = None,
    adam_lr: float | None = None,
    fix_random_reads: bool = False,
    max_nodes: int | None = MAX_NODES,
) -> Graph:
    """Capture ``model`` on example ``inputs`` as a Graph.

    training=True: forward + ``loss_fn(model, *inputs)`` + backward (gradients of every parameter
    that requires grad); ``sgd_lr`` appends a plain SGD update ``p - lr * grad``; ``adam_lr`` appends
    ``torch.optim.Adam``'s first step (its moments are inputs of the graph: :func:`append_adam`).
    training=False: the forward pass (``forward_fn(model, *inputs)`` or ``model(*inputs)``).
    Inputs may be real, fake or meta tensors; pass fake tensors for big models.
    ``progress(message)`` is called at each stage (tracing, converting, checking).

    The model is traced as eager PyTorch would run it.  If that needs a tensor's value (fake
    tensors have none: e.g. a library checking whether an attention mask has padding), it is
    traced again in torch.export's tracing state, where libraries take the paths written for
    export (:func:`export_tracing_state`); ``meta["traced_as"]`` records which state it took.
    A model that still needs a value raises :class:`ImportErrorMAGIS` naming what and where; when
    the value is a random draw the model branches on (layer drop), the message names the draw and
    the probability (config field) it is compared with.  ``fix_random_reads=True`` captures such a
    model with each draw that is read fixed at ``idioms.FIXED_DRAW`` (no layer dropped), recorded
    in ``meta["fixed_random_reads"]`` (:mod:`core.frontend.idioms`).

    ``max_nodes``: a capture that would make more nodes raises :class:`GraphTooLarge` while it
    traces (None: no bound); ``progress`` hears the count every :data:`PROGRESS_NODES` nodes.
    """
    if training and loss_fn is None:
        raise ImportErrorMAGIS("a training graph needs a loss function")
    if sgd_lr is not None and adam_lr is not None:
        raise ImportErrorMAGIS("one optimizer update at a time: SGD or Adam")
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    wrapper: nn.Module = _TrainStep(model, loss_fn) if training else _Forward(model, forward_fn)
    what = "forward, loss and backward" if training else "the forward pass"
    say(f"tracing {what} with AOTAutograd on fake tensors")
    logs: list[str] = []
    try:
        with held_torch_logs(logs), capture_kernels():
            gm, sig, traced_as, fixed = _trace_until_done(wrapper, inputs, training, say, fix_random_reads,
                                                          _SizeWatch(max_nodes, training, say))
    except ImportErrorMAGIS as e:
        e.detail = "\n".join(logs)
        raise
    say(f"converting {len(gm.graph.nodes)} fx nodes")
    g = _convert(gm, sig, training, name, inputs, _tied_parameters(model))
    _mixed_batch_norm_stats(g)
    if training and sgd_lr is not None:
        _append_sgd(g, sgd_lr)
    if training and adam_lr is not None:
        append_adam(g, adam_lr)
    g.meta.update(
        {
            "mode": "train" if training else "forward",
            "capture_seconds": round(time.perf_counter() - t0, 3),
            "fx_nodes": len(gm.graph.nodes),
            "sgd_lr": sgd_lr,
            **({"adam": {"lr": adam_lr, "betas": list(ADAM_BETAS), "eps": ADAM_EPS, "step": 1}}
               if training and adam_lr is not None else {}),
        }
    )
    if traced_as != "eager":
        g.meta["traced_as"] = traced_as
    if fixed:
        g.meta["fixed_random_reads"] = fixed
    say(f"checking the graph ({len(g)} nodes)")
    g.validate()
    return g


BATCH_NORMS = frozenset({"aten._native_batch_norm_legit_functional.default", "aten._native_batch_norm_legit.default",
                         "aten._native_batch_norm_legit.no_stats", "aten._native_batch_norm_legit_no_training.default",
                         "aten.native_batch_norm.default"})


def _mixed_batch_norm_stats(g: Graph) -> None:
    """Batch norm of a bfloat16 / float16 input with float32 weights, as autocast makes it (a
    convolution run in bfloat16 feeds a batch norm whose parameters stay float32): the real kernel
    (ATen's ``mixed_type`` batch norm; measured on the CPU) keeps the saved mean and inverse std --
    outputs 1 and 2 of every variant -- in float32, while torch's fake kernel gives them the input's
    dtype.  Their records get the real kernel's dtype, so a capture on fake tensors equals one on
    real tensors (the same graph hash: a plan made from ``magis import`` runs in ``plan_step``)."""
    def dtype(a: Any) -> str | None:
        return g[a.node].outputs[a.index].dtype if isinstance(a, TRef) else None

    for n in g.ops():
        if (n.op in BATCH_NORMS and len(n.outputs) >= 3 and len(n.args) > 1
                and dtype(n.args[0]) in ("bfloat16", "float16") and dtype(n.args[1]) == "float32"):
            n.outputs[1].dtype = n.outputs[2].dtype = "float32"


def _trace_until_done(wrapper: nn.Module, inputs: tuple[torch.Tensor, ...], training: bool,
                      say: Progress, fix_random_reads: bool = False,
                      watch: _SizeWatch | None = None) -> tuple[Any, Any, str, dict[str, Any]]:
    """Trace eagerly, then in torch.export's tracing state if a value is needed, then without
    unused parameters, then (``fix_random_reads``) with each random draw the model reads fixed (see
    :func:`capture`); (graph module, signature, the state it took, what was fixed: the graph's
    ``meta["fixed_random_reads"]``, empty when nothing was)."""
    traced_as = "eager"
    fixing: dict[Site, RandomRead] = {}
    record_nodes = False  # where the autograd nodes were made: for an error raised in the backward
    while True:
        def state(how: str = traced_as) -> contextlib.AbstractContextManager:  # fresh per use: single-use CMs
            return export_tracing_state() if how == "export" else contextlib.nullcontext()

        idioms = CaptureIdioms(frozenset(fixing), record_nodes=record_nodes, watch=watch)
        if isinstance(wrapper, _TrainStep):
            wrapper.traced_forward = watch.forward_done if watch is not None else None
        if watch is not None:
            watch.forward_nodes, watch.reported = None, 0
        clear_dynamic_op()
        try:
            with state(), idioms, warnings.catch_warnings():
                # autograd's anomaly mode (on while AOTAutograd traces) warns before a backward op's
                # error with an empty forward traceback: the error's one line says more
                warnings.filterwarnings("ignore", message=r"Error detected in \w+Backward")
                gm, sig = _trace(wrapper, inputs, training)
            break
        except GraphTooLarge:
            raise
        except Exception as e:  # torch raises many exception types while tracing
            rr = random_read(e, idioms.draws) if isinstance(e, DATA_DEPENDENT) else None
            record_nodes = record_nodes or (isinstance(e, DATA_DEPENDENT) and not _frames(e))
            if rr is not None and fix_random_reads and rr.draw not in fixing:
                say(f"it branches on a random draw ({rr.draw}); fixing that draw at {FIXED_DRAW} "
                    f"(no layer dropped) and tracing again")
                fixing[rr.draw] = rr
            elif isinstance(e, DATA_DEPENDENT) and traced_as == "eager":  # a random read too: a library
                # may skip layer drop while compiling
                noted = last_dynamic_op()
                at = (_where(e, short=True) if _frames(e) or noted is None or noted["seq_nr"] is None
                      else f"{noted['op']} in the backward pass")
                say(f"it needs a tensor value ({at}); tracing again in torch.export's tracing state")
                traced_as = "export"
            elif (isinstance(wrapper, _TrainStep) and not wrapper.unused
                  and "did not receive a gradient" in str(e)):
                wrapper.traced_forward = None  # a forward-only trace: no step estimate from it
                with state(), CaptureIdioms(frozenset(fixing)):
                    wrapper.unused = _unused_parameters(wrapper, inputs)
                if not wrapper.unused:
                    raise ImportErrorMAGIS(describe_capture_error(e)) from e
                say(f"the loss does not read {', '.join(sorted(_strip(n) for n in wrapper.unused))} "
                    f"(no gradient); tracing again without them")
            else:
                raise ImportErrorMAGIS(describe_capture_error(e, rr, _backward_origin(idioms))) from e
        finally:
            idioms.close()
            if isinstance(wrapper, _TrainStep):
                wrapper.traced_forward = None
    return gm, sig, traced_as, _fixed_record(fixing)


def _backward_origin(idioms: CaptureIdioms) -> Origin | None:
    """Where the forward call was made whose backward asked for a value-dependent shape (the
    last such op of the trace, ``fake_kernels.last_dynamic_op``), when the trace recorded it."""
    noted = last_dynamic_op()
    if noted is None or noted["seq_nr"] is None or not idioms.nodes:
        return None
    return idioms.nodes.get(noted["seq_nr"])


def _fixed_record(fixing: dict[Site, RandomRead]) -> dict[str, Any]:
    """``meta["fixed_random_reads"]``: the value every fixed draw took, what that means, and per
    draw site its code, where it is read and the probability it is compared with."""
    if not fixing:
        return {}
    draws = []
    for site, rr in sorted(fixing.items(), key=lambda kv: (kv[0].file, kv[0].line)):
        d: dict[str, Any] = {"site": str(site), "code": rr.draw_code, "read_at": str(rr.read)}
        if rr.field is not None:
            d.update({"field": rr.field.name, "field_value": rr.field.value, "owner": rr.field.owner})
        draws.append(d)
    return {"value": FIXED_DRAW,
            "effect": f"each draw returns {FIXED_DRAW}, the top of torch.rand's range: every `draw < p` is "
                      f"False -- no layer dropped, as in eval mode",
            "draws": draws}


def _trace(wrapper: nn.Module, inputs: tuple[torch.Tensor, ...], training: bool) -> tuple[Any, Any]:
    from torch._functorch.aot_autograd import aot_export_module

    if training:
        return aot_export_module(wrapper, tuple(inputs), trace_joint=True, output_loss_index=0)
    with torch.no_grad():
        return aot_export_module(wrapper, tuple(inputs), trace_joint=False)


def _unused_parameters(wrapper: _TrainStep, inputs: tuple[torch.Tensor, ...]) -> frozenset[str]:
    """The parameter names (each name of a tied parameter counts) that the loss never reads: the
    inputs of a forward-only trace that have no users."""
    gm, sig = _trace(wrapper, inputs, training=False)
    params = dict(sig.inputs_to_parameters)
    return frozenset(params[n.name] for n in gm.graph.nodes
                     if n.op == "placeholder" and n.name in params and not n.users)


@contextlib.contextmanager
def export_tracing_state() -> Iterator[None]:
    """``torch.compiler.is_compiling()`` and ``is_exporting()`` report True, as they do while
    ``torch.export`` traces a model.  Libraries check them to avoid reading tensor values while
    tracing: transformers then builds the attention mask with tensor ops instead of testing
    whether it has padding (``masking_utils._ignore_causal_mask_sdpa``) and skips its
    packed-sequence detection.  The computed values are the same; the graph is the one valid for
    any input values (e.g. it materialises the mask that eager mode skips when there is no padding)."""
    from torch._export.utils import _compiling_state_context

    with _compiling_state_context():
        yield


def _data_dependent_errors() -> tuple[type[BaseException], ...]:
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    return (DataDependentOutputException, DynamicOutputShapeException, GuardOnDataDependentSymNode)


DATA_DEPENDENT = _data_dependent_errors()

def _frames(e: BaseException) -> list[traceback.FrameSummary]:
    """The frames ``e`` went through, outermost first, without torch's, this package's and the
    standard library's own frames (what is left is the model's code and the libraries it uses:
    ``idioms.is_model_file``)."""
    return [fs for fs in traceback.extract_tb(e.__traceback__) if is_model_file(fs.filename)]


def _is_library(fs: traceback.FrameSummary) -> bool:
    return f"{os.sep}site-packages{os.sep}" in fs.filename or f"{os.sep}dist-packages{os.sep}" in fs.filename


def _show_path(fs: traceback.FrameSummary) -> str:
    return show_path(fs.filename)


def _where(e: BaseException, short: bool = False) -> str:
    """``file:line in function: `source``` of the innermost model or library frame of ``e``; when
    that frame is in an installed library, also the innermost frame of the user's own code that
    called it."""
    frames = _frames(e)
    if not frames:
        return "inside torch"
    inner = frames[-1]
    text = f"{_show_path(inner)}:{inner.lineno} in {inner.name}"
    if short:
        return text
    if inner.line:
        text += f": `{inner.line.strip()}`"
    if _is_library(inner):
        own = [fs for fs in frames if not _is_library(fs)]
        if own:
            text += f" (called from {_show_path(own[-1])}:{own[-1].lineno})"
    return text


def describe_capture_error(e: BaseException, random: RandomRead | None = None,
                           backward_of: Origin | None = None) -> str:
    """One line for a failed capture: what went wrong, where (the innermost frame of the model's
    code or its library, and the user's own line that led there) and a hint.  ``random``: the
    value read is a random draw (``idioms.random_read``): the line names the draw and the
    probability (config field) to set to 0, or ``--fix-random-reads``.  ``backward_of``: where
    the forward call was made when ``e`` was raised by its backward (a traceback without a line
    of the model), and the probability that turns that code off (SpecAugment's
    ``config.mask_time_prob``)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if random is not None:
        what = f"the model branches on a random draw (layer drop, line {random.draw.line})"
        hint = (f"set {random.describe()} to 0, or import with --fix-random-reads (each such draw fixed at "
                f"{FIXED_DRAW}: no layer dropped)")
    elif isinstance(e, (DataDependentOutputException, GuardOnDataDependentSymNode)):
        what = "the model reads a tensor's value in Python (a branch, .item(), .tolist(), bool())"
        hint = ("capture runs on fake tensors that have shapes but no values; compute it with tensor "
                "ops (torch.where, masking) or pass it as a Python number")
    elif isinstance(e, DynamicOutputShapeException):
        what = f"{first or 'an op'} returns a shape that depends on tensor values"
        hint = ("nonzero, unique, masked_select and boolean-mask indexing have no fixed output shape; "
                "use torch.where or a fixed-size mask")
        if "_ctc_loss" in first:  # the one form of CTC loss whose shapes the capture cannot bound
            hint = ("CTC loss with concatenated 1-D targets and tensor lengths: pass padded 2-D targets "
                    "[batch, longest target] (as transformers' collators pad them), or the lengths as Python ints")
    elif isinstance(e, UnsupportedOperatorException):
        what = f"{first or 'an op'} has no fake-tensor (meta) implementation"
        hint = "use an equivalent standard PyTorch op, or register a meta kernel for the custom op"
    else:
        what = f"{type(e).__name__}: {first}" if first else type(e).__name__
        hint = "the model must run under torch.export-style tracing with fixed example input shapes"
    where = f"at {_where(e)}"
    if backward_of is not None and not _frames(e):
        where = f"in the backward of {backward_of.where}"
        if backward_of.field is not None:  # the setting that turns that code off says more than the generic hint
            hint = f"set {backward_of.field.describe()} to 0 to capture without that code"
    return f"could not capture the model: {what}, {where}; hint: {hint}"


def _tied_parameters(model: nn.Module) -> dict[str, str]:
    """Tied weights: every extra name of a shared parameter -> its ``named_parameters()`` name."""
    canonical = {id(p): n for n, p in model.named_parameters()}
    return {n: canonical[id(p)] for n, p in model.named_parameters(remove_duplicate=False)
            if canonical.get(id(p), n) != n}


def _convert(gm: torch.fx.GraphModule, sig: Any, training: bool, name: str,
             inputs: tuple[torch.Tensor, ...], ties: dict[str, str] | None = None) -> Graph:
    """FX joint graph -> Graph.  A tied weight is one input under its ``named_parameters()`` name
    (AOTAutograd lists each alias name as its own input; the loss may read it under another
    name only) and its gradient is the sum of the per-alias partial gradients, as eager autograd
    accumulates them."""
    ties = ties or {}
    g = Graph(name)
    env: dict[str, Any] = {}  # fx node name -> TRef or tuple of TRefs
    params = dict(sig.inputs_to_parameters)
    buffers = dict(sig.inputs_to_buffers)
    user_inputs = list(sig.user_inputs)

    def conv(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            v = env[a.name]
            if isinstance(v, tuple):
                raise ImportErrorMAGIS(f"multi-output node {a.name} used without getitem")
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(conv(x) for x in a)
        return _const(a)

    out_node = None
    param_nodes: dict[str, TRef] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    # canonical parameters first, so that alias names can point at them
    placeholders.sort(key=lambda n: n.name in params and _strip(params[n.name]) in ties)
    for n in placeholders:
        if n.name in params and ties.get(_strip(params[n.name])) in param_nodes:
            env[n.name] = param_nodes[ties[_strip(params[n.name])]]
            continue
        if n.name in params:  # a tied weight is named as named_parameters() names it
            pname = _strip(params[n.name])
            target, kind = "param:" + ties.get(pname, pname), TensorKind.WEIGHT
        elif n.name in buffers:
            target, kind = "buffer:" + _strip(buffers[n.name]), TensorKind.WEIGHT
        elif n.name in user_inputs:
            target, kind = f"input:{user_inputs.index(n.name)}", TensorKind.INPUT
        else:
            raise ImportErrorMAGIS(f"unexpected graph input {n.name}")
        node = g.add_node(name=target.split(":", 1)[1] if kind != TensorKind.INPUT else
                          f"input_{user_inputs.index(n.name)}", op="placeholder",
                          kind=NodeKind.PLACEHOLDER, outputs=[_meta_of(n.meta["val"], kind)],
                          target=target)
        env[n.name] = TRef(node.id, 0)
        if kind == TensorKind.WEIGHT:
            param_nodes[target.split(":", 1)[1]] = env[n.name]
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "call_function":
            if n.target is __import__("operator").getitem:
                env[n.name] = env[n.args[0].name][n.args[1]]
                continue
            if not isinstance(n.target, torch._ops.OpOverload):
                raise ImportErrorMAGIS(f"unsupported call {n.target!r} in captured graph")
            op = str(n.target)
            val = n.meta.get("val")
            multi = isinstance(val, (tuple, list))
            vals = list(val) if multi else [val]
            args = [conv(a) for a in n.args]
            kwargs = {k: conv(v) for k, v in n.kwargs.items()}
            outs = [_meta_of(v, TensorKind.ACTIVATION) for v in vals]
            ops.set_output_aliases(op, args, outs)
            refs = _refs(args, kwargs)
            for j, nbytes in enumerate(ops.output_storage_bytes(
                    op, args, kwargs, [g.tensor(r) for r in refs], outs,
                    [g.tensor(g.storage_root(r)).nbytes for r in refs])):
                if nbytes is not None and outs[j].alias is None:
                    outs[j].storage_bytes = nbytes
            node = g.add_node(name=n.name, op=op, args=args, kwargs=kwargs, outputs=outs)
            env[n.name] = tuple(node.refs()) if multi else TRef(node.id, 0)
        elif n.op == "get_attr":  # a constant tensor created by the model code (e.g. a mask fill value)
            value = getattr(gm, n.target)
            node = g.add_node(name=n.name, op="placeholder", kind=NodeKind.PLACEHOLDER,
                              outputs=[_meta_of(value, TensorKind.WEIGHT)], target=f"const:{n.name}",
                              kwargs={"value": _constant_value(value, n.name)})
            env[n.name] = TRef(node.id, 0)
        elif n.op == "output":
            out_node = n
        else:
            raise ImportErrorMAGIS(f"unsupported fx node kind {n.op} ({n.name})")
    assert out_node is not None
    outs = list(out_node.args[0])
    names = [o.name if isinstance(o, torch.fx.Node) else None for o in outs]
    mutated = dict(sig.buffers_to_mutate)
    grads = dict(sig.backward_signature.gradients_to_parameters) if training else {}
    n_mut = len(mutated)
    partial_grads: dict[str, list[TRef]] = {}
    for i, (o, nm) in enumerate(zip(outs, names, strict=True)):
        if o is None:
            continue
        ref = conv(o)
        if i < n_mut and nm in mutated:
            key = "buffer:" + _strip(mutated[nm])
        elif training and nm in grads and i >= n_mut + 1:
            pname = _strip(grads[nm])
            key = "grad:" + ties.get(pname, pname)
            partial_grads.setdefault(key, []).append(ref)
            continue
        elif training:
            key = "loss"
        else:
            key = f"output_{i - n_mut}"
        if key in g.outputs:
            key = f"{key}#{i}"
        g.outputs[key] = ref
    for key, refs in partial_grads.items():
        acc = refs[0]
        for k, r in enumerate(refs[1:]):
            t = g.tensor(acc)
            node = g.add_node(name=f"accumulate_grad_{key.split(':', 1)[1].replace('.', '_')}_{k}",
                              op="aten.add.Tensor", args=[acc, r],
                              outputs=[TensorMeta(t.shape, t.dtype, TensorKind.GRADIENT)])
            acc = TRef(node.id, 0)
        g.outputs[key] = acc
    _assign_kinds(g, training)
    _assign_modules(g)
    return g


def _refs(args: Any, kwargs: dict[str, Any]) -> list[TRef]:
    from ..ir.graph import _collect_refs

    found: list[TRef] = []
    _collect_refs(args, found)
    _collect_refs(list(kwargs.values()), found)
    return found


def _assign_kinds(g: Graph, training: bool) -> None:
    """Forward tensors are activations, backward ones gradients (training: forward = ancestors of the
    loss); graph outputs of a forward graph are 'output'."""
    fwd: set[int] = set()
    if training and "loss" in g.outputs:
        stack = [g.outputs["loss"].node]
        while stack:
            v = stack.pop()
            if v in fwd:
                continue
            fwd.add(v)
            stack.extend(g.preds(v))
    for n in g.ops():
        for t in n.outputs:
            t.kind = TensorKind.ACTIVATION if (not training or n.id in fwd) else TensorKind.GRADIENT
    for key, r in g.outputs.items():
        t = g.tensor(r)
        if key == "loss" or key.startswith("output_"):
            t.kind = TensorKind.OUTPUT
        elif key.startswith("buffer:"):
            t.kind = TensorKind.WEIGHT


def _common_prefix(paths: list[str]) -> str:
    if not paths:
        return ""
    parts = [p.split(".") for p in paths]
    out = []
    for comps in zip(*parts, strict=False):
        if all(c == comps[0] for c in comps):
            out.append(comps[0])
        else:
            break
    return ".".join(out)


def _assign_modules(g: Graph) -> None:
    for n in g.nodes.values():
        if n.kind == NodeKind.PLACEHOLDER:
            if n.target.startswith(("param:", "buffer:")):
                n.module = n.target.split(":", 1)[1].rpartition(".")[0]
            continue
        owners, saved, producers = [], [], []
        for r in n.inputs():
            root = g.nodes[g.storage_root(r).node]
            if root.kind == NodeKind.PLACEHOLDER and root.target.startswith(("param:", "buffer:")):
                owners.append(root.module)
            else:
                src = g.nodes[r.node]
                if src.kind != NodeKind.PLACEHOLDER and src.module:
                    producers.append(src.module)
                    if g.tensor(r).kind == TensorKind.ACTIVATION:
                        saved.append(src.module)
        backward = any(t.kind == TensorKind.GRADIENT for t in n.outputs)
        if owners:
            n.module = _common_prefix(owners)
        elif backward and saved:  # a backward op belongs where the activations it reads were made
            n.module = _common_prefix(saved)
        else:
            n.module = _common_prefix(producers)


def _append_sgd(g: Graph, lr: float) -> None:
    for key in sorted(k for k in g.outputs if k.startswith("grad:")):
        pname = key.split(":", 1)[1]
        p = next(n for n in g.placeholders() if n.target == "param:" + pname)
        gref = g.outputs[key]
        pm = p.out
        node = g.add_node(name=f"sgd_{pname.replace('.', '_')}", op="aten.add.Tensor",
                          args=[TRef(p.id, 0), gref], kwargs={"alpha": -lr},
                          outputs=[TensorMeta(pm.shape, pm.dtype, TensorKind.WEIGHT)],
                          module=p.module)
        g.outputs["param:" + pname] = TRef(node.id, 0)


ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults
ADAM_EPS = 1e-8


def append_adam(g: Graph, lr: float, betas: tuple[float, float] = ADAM_BETAS, eps: float = ADAM_EPS,
                step: int = 1) -> None:
    """``torch.optim.Adam``'s update at ``step`` (single-tensor form, op for op) after the backward:
    per parameter its two moments are new inputs (``adam_m:<name>``, ``adam_v:<name>``: optimizer
    state, resident like the weights) and new outputs next to the parameter's::

        m = lerp(m, g, 1 - b1);  v = v * b2 + (1 - b2) g g
        p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    """
    b1, b2 = betas
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    for key in sorted(k for k in g.outputs if k.startswith("grad:")):
        pname = key.split(":", 1)[1]
        p = next(n for n in g.placeholders() if n.target == "param:" + pname)
        pm, gref, tag = p.out, g.outputs[key], pname.replace(".", "_")
        state = {}
        for which in ("m", "v"):
            ph = g.add_node(name=f"adam_{which}_{tag}", op="placeholder", kind=NodeKind.PLACEHOLDER,
                            target=f"adam_{which}:{pname}",
                            outputs=[TensorMeta(pm.shape, pm.dtype, TensorKind.OPTIMIZER_STATE)], module=p.module)
            state[which] = TRef(ph.id, 0)

        def op(name: str, target: str, args: list, kind: TensorKind = TensorKind.ACTIVATION, *, tag: str = tag,
               like: Node = p, **kw) -> TRef:
            n = g.add_node(name=f"adam_{name}_{tag}", op=target, args=args, kwargs=kw,
                           outputs=[TensorMeta(like.out.shape, like.out.dtype, kind)], module=like.module)
            return TRef(n.id, 0)

        m = op("m", "aten.lerp.Scalar", [state["m"], gref, 1 - b1], TensorKind.OPTIMIZER_STATE)
        v = op("v", "aten.addcmul.default", [op("v_decay", "aten.mul.Scalar", [state["v"], b2]), gref, gref],
               TensorKind.OPTIMIZER_STATE, value=1 - b2)
        denom = op("denom", "aten.add.Scalar",
                   [op("rms", "aten.div.Scalar", [op("sqrt", "aten.sqrt.default", [v]), math.sqrt(bc2)]), eps])
        new = op("step", "aten.addcdiv.default", [TRef(p.id, 0), m, denom], TensorKind.WEIGHT, value=-lr / bc1)
        g.outputs["param:" + pname] = new
        g.outputs["adam_m:" + pname] = m
        g.outputs["adam_v:" + pname] = v


__all__ = ["append_adam", "capture", "GraphTooLarge", "ImportErrorMAGIS", "MAX_NODES", "Node"]

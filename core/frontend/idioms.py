"""Training-step idioms that tracing on fake tensors cannot take as written, seen where the model's
Python calls torch (a ``TorchFunctionMode`` active while a capture traces, :class:`CaptureIdioms`).

CTC loss with the lengths as Python ints and ``reduction="mean"``.  torch's composite kernel divides
each loss by ``at::tensor(target_lengths)``, a tensor it fills with C++ data that a fake tensor does
not hold ("its data is not allocated yet").  The call is taken as ``reduction="none"`` followed by
that same division and mean, written with torch ops (the lengths a constant of the graph): the ops
and values of eager PyTorch's composite, and ``aten._ctc_loss`` keeps its exact output shapes.

Random draws read in Python.  Layer drop (``transformers``' wav2vec2, HuBERT, Whisper, BART...:
``if self.training and torch.rand([]) < self.config.layerdrop: skip the layer``) and stochastic
depth draw a random scalar and branch on it: the traced graph would hold one outcome of the draw,
and a fake tensor has no value to branch on.  Every draw of ``torch.rand`` / ``torch.rand_like``
with at most one element is recorded with the frame that made it; when the trace then fails reading
a value in that same frame, :func:`random_read` names the draw, the read and the probability it is
compared with (a config field where there is one).  With ``fix_sites``, the draws made at those
lines return :data:`FIXED_DRAW` without drawing: 1.0, the top of ``rand``'s range, so every
``draw < p`` is False -- no layer is dropped, as in eval mode.  The graph then computes the step in
which no layer is dropped; its metadata records the fixed sites (``capture``), and the eager side of
``verify`` fixes the same draws (:func:`fixed_draws`) so both compute that step.

The mode also lets the capture watch the graph's size while the model runs (``watch``, called
every :attr:`CaptureIdioms.WATCH_EVERY` torch calls), and, on a trace after one whose error came
from a backward op (a traceback without a line of the model), records where each autograd node
was made (``record_nodes``) so that error can name the forward line.  Its cost is about 1 us per
torch call (measured), against about 1.5 ms per traced node.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import re
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

FIXED_DRAW = 1.0  # the value a fixed draw takes: above every probability a draw is compared with
RANDOM_DRAWS = (torch.rand, torch.rand_like)  # uniform [0, 1) draws, the ones compared with probabilities
_CTC = (F.ctc_loss, torch.ctc_loss)
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_CORE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIR = os.path.dirname(contextlib.__file__) + os.sep


def is_model_file(filename: str) -> bool:
    """Whether ``filename`` is the model's code or a library it uses (not torch, not this package,
    not the standard library)."""
    f = os.path.abspath(filename)
    return not (f.startswith((_TORCH_DIR, _CORE_DIR)) or (f.startswith(_STDLIB_DIR) and "-packages" not in f)
                or filename.startswith("<"))


def show_path(filename: str) -> str:
    """A file as messages and graph metadata name it: its path inside ``site-packages`` for an
    installed library, else relative to the working directory (absolute when outside it)."""
    for marker in ("site-packages", "dist-packages"):
        if f"{os.sep}{marker}{os.sep}" in filename:
            return filename.split(f"{os.sep}{marker}{os.sep}", 1)[1]
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def _caller() -> types.FrameType | None:
    """The innermost frame of the model's code (or its library) on the stack."""
    f = sys._getframe(2)
    while f is not None and not is_model_file(f.f_code.co_filename):
        f = f.f_back
    return f


def where_called(f: types.FrameType | None) -> str:
    """``file:line in function: `source``` of frame ``f`` (the innermost frame of the model's code
    or its library, :func:`_caller`), and, when that is in an installed library, the user's own line
    that called it; a long source line is cut."""
    if f is None:
        return "inside torch"
    text = f"{show_path(f.f_code.co_filename)}:{f.f_lineno} in {f.f_code.co_name}"
    line = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    if line:
        text += f": `{line if len(line) <= 50 else line[:47] + '...'}`"
    if "-packages" in f.f_code.co_filename:
        own = f.f_back
        while own is not None and (not is_model_file(own.f_code.co_filename) or "-packages" in own.f_code.co_filename):
            own = own.f_back
        if own is not None:
            text += f" (called from {show_path(own.f_code.co_filename)}:{own.f_lineno})"
    return text


@dataclass(frozen=True)
class Site:
    """A line of code that draws: ``file`` as :func:`show_path` writes it, ``line``."""

    file: str
    line: int

    def matches(self, filename: str, line: int) -> bool:
        return line == self.line and (filename == self.file or os.path.abspath(filename).endswith(os.sep + self.file)
                                      or os.path.abspath(filename) == os.path.abspath(self.file))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Draw:
    site: Site
    frame: types.FrameType


def _draw_shape(func: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple[int, ...], torch.dtype, Any]:
    """(shape, dtype, device) of what ``torch.rand`` / ``torch.rand_like`` would return."""
    if func is torch.rand_like:
        t = args[0]
        return tuple(t.shape), kwargs.get("dtype") or t.dtype, kwargs.get("device") or t.device
    size: Any = kwargs.get("size", args)
    if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)):
        size = size[0]
    return tuple(int(s) for s in size), kwargs.get("dtype") or torch.get_default_dtype(), kwargs.get("device")


def _ctc_mean(func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """``ctc_loss`` with Python-int lengths and the mean reduction, as ``reduction="none"`` then
    torch's composite's own ``(loss / target_lengths.clamp_min(1)).mean()``; None when the call is
    another form (tensor lengths, another reduction), which traces as written."""
    names = ["log_probs", "targets", "input_lengths", "target_lengths", "blank", "reduction", "zero_infinity"]
    bound = dict(zip(names, args, strict=False)) | kwargs
    lengths = bound.get("target_lengths")
    reduction = bound.get("reduction", "mean" if func is F.ctc_loss else 1)
    if isinstance(lengths, torch.Tensor) or not isinstance(bound.get("input_lengths"), (list, tuple)) \
            or reduction not in ("mean", 1) or not isinstance(lengths, (list, tuple)):
        return None
    bound["reduction"] = "none" if func is F.ctc_loss else 0
    loss = func(**bound)
    divisor = torch.tensor([int(v) for v in lengths], dtype=loss.dtype, device=loss.device).clamp_min(1)
    return (loss / divisor).mean()


class CaptureIdioms(TorchFunctionMode):
    """The mode described in the module docstring.  ``fix_sites``: the lines whose scalar draws
    return :data:`FIXED_DRAW`; ``ctc``: rewrite CTC's int-length mean (a capture; not an eager run).
    ``draws``: the scalar draws made (frames held until :meth:`close`); ``fixed``: draws fixed per site."""

    WATCH_EVERY = 256  # torch calls between two calls of ``watch``

    def __init__(self, fix_sites: frozenset[Site] | set[Site] = frozenset(), ctc: bool = True,
                 record_nodes: bool = False, watch: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.watch = watch  # called every WATCH_EVERY torch calls (the capture's size watch)
        self.calls = 0
        self.fix_sites = frozenset(fix_sites)
        self.ctc = ctc
        self.draws: list[Draw] = []
        self.fixed: dict[Site, int] = {}
        # record_nodes: the autograd nodes the model's calls make (sequence number -> where), to name
        # the forward line of a backward op that fails (``fake_kernels.last_dynamic_op``)
        self.nodes: dict[int, Origin] | None = {} if record_nodes else None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls += 1
        if self.watch is not None and self.calls % self.WATCH_EVERY == 0:
            self.watch()
        if func in RANDOM_DRAWS:
            shape, dtype, device = _draw_shape(func, args, kwargs)
            frame = _caller() if len(shape) < 8 and all(s == 1 for s in shape) else None
            if frame is not None:
                site = Site(show_path(frame.f_code.co_filename), frame.f_lineno)
                fixed = next((s for s in self.fix_sites if s.matches(frame.f_code.co_filename, frame.f_lineno)), None)
                if fixed is not None:
                    self.fixed[fixed] = self.fixed.get(fixed, 0) + 1
                    # a tensor made from a Python number: under fake tensors a constant of the trace
                    return torch.tensor(FIXED_DRAW, dtype=dtype, device=device).reshape(shape)
                self.draws.append(Draw(site, frame))
        elif self.ctc and func in _CTC:
            out = _ctc_mean(func, args, kwargs)
            if out is not None:
                return out
        out = func(*args, **kwargs)
        if self.nodes is not None:
            self._note_nodes(out, args)
        return out

    def _note_nodes(self, out: Any, args: tuple) -> None:
        """Where the autograd nodes of ``out`` (and of an argument changed in place) were made."""
        made = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
        if args and isinstance(args[0], torch.Tensor):
            made.append(args[0])  # ``x[mask] = v`` and in-place methods give their first argument a new node
        fresh = [t.grad_fn for t in made if t.grad_fn is not None]
        fresh = [n for n in fresh if n._sequence_nr() not in self.nodes]
        if fresh:
            f = _caller()
            origin = Origin(where_called(f), None if f is None else
                            probability_field(f, f.f_code.co_firstlineno, f.f_lineno, any_config_name=False))
            for n in fresh:
                self.nodes[n._sequence_nr()] = origin

    def close(self) -> None:
        """Drop the recorded frames (they hold the traced model's locals)."""
        self.draws.clear()


@contextlib.contextmanager
def fixed_draws(sites: frozenset[Site] | set[Site]) -> Iterator[CaptureIdioms | None]:
    """An eager run in which the draws at ``sites`` take :data:`FIXED_DRAW` (no random number
    drawn), as in a graph captured with those draws fixed; no sites: the run as written."""
    if not sites:
        yield None
        return
    mode = CaptureIdioms(sites, ctc=False)
    try:
        with mode:
            yield mode
    finally:
        mode.close()


def sites_of(meta: Any) -> frozenset[Site]:
    """The fixed draw sites a graph's ``meta["fixed_random_reads"]`` records."""
    out = set()
    for d in (meta or {}).get("fixed_random_reads", {}).get("draws", []) if isinstance(meta, dict) else []:
        file, _, line = str(d.get("site", "")).rpartition(":")
        if file and line.isdigit():
            out.add(Site(file, int(line)))
    return frozenset(out)


# ---- naming a random read, and the setting that turns a code path off ------------------------------
_PROB_NAME = re.compile(r"drop|prob|rate|^p$")


@dataclass
class Field:
    """A probability a model's code reads: ``config.layerdrop`` or ``self.drop_prob``, its value and
    the class of the object holding it."""

    name: str
    value: float
    owner: str

    def describe(self) -> str:
        """``the config's `layerdrop` (Wav2Vec2Config.layerdrop = 0.1)`` or the like."""
        kind, _, attr = self.name.partition(".")
        return f"{'the config' if kind == 'config' else 'the module'}'s `{attr}` ({self.owner}.{attr} = {self.value})"


def probability_field(frame: types.FrameType, first: int, last: int, any_config_name: bool = True) -> Field | None:
    """The first probability (a number in (0, 1]) that lines ``first``..``last`` of ``frame``'s
    file read as ``config.NAME`` (of ``self.config``) or ``self.NAME`` -- a ``self`` attribute, and
    with ``any_config_name=False`` a config field too, only under a name like drop / prob / rate."""
    filename = frame.f_code.co_filename
    text = "".join(linecache.getline(filename, k) for k in range(first, max(first, last) + 1))
    owner = frame.f_locals.get("self")
    config = getattr(owner, "config", None)
    for kind, holder in (("config", config), ("self", owner)):
        if holder is None:
            continue
        for name in re.findall(rf"\b{kind}\.(\w+)", text):
            value = getattr(holder, name, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1 \
                    and ((kind == "config" and any_config_name) or _PROB_NAME.search(name)):
                return Field(f"{kind}.{name}", value, type(holder).__name__)
    return None


@dataclass
class RandomRead:
    """A value read in Python in the frame that drew a random scalar: the draw's site and source,
    the read's site, and the probability the draw is compared with (``field``) where the lines
    between them name one."""

    draw: Site
    read: Site
    draw_code: str
    field: Field | None = None

    def describe(self) -> str:
        return self.field.describe() if self.field is not None else "the probability the draw is compared with"


@dataclass
class Origin:
    """Where a forward call was made (``where_called``'s text) and a probability the enclosing
    function reads before it (``config.mask_time_prob``): the setting that turns the call off."""

    where: str
    field: Field | None = None


def _traceback_frames(e: BaseException) -> list[types.FrameType]:
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def random_read(e: BaseException, draws: list[Draw]) -> RandomRead | None:
    """The :class:`RandomRead` behind a failed read ``e`` (a data-dependent error): the innermost
    frame of the model's code in its traceback drew a random scalar (``draws``) before failing;
    None when it did not."""
    own = [f for f in _traceback_frames(e) if is_model_file(f.f_code.co_filename)]
    if not own or not draws:
        return None
    frame = own[-1]
    mine = [d for d in draws if d.frame is frame]
    if not mine:
        return None
    draw = mine[-1]
    code = linecache.getline(frame.f_code.co_filename, draw.site.line).strip()
    return RandomRead(draw.site, Site(show_path(frame.f_code.co_filename), frame.f_lineno), code,
                      probability_field(frame, draw.site.line, frame.f_lineno))


__all__ = ["FIXED_DRAW", "CaptureIdioms", "Field", "Origin", "RandomRead", "Site", "fixed_draws", "probability_field",
           "random_read", "sites_of", "where_called"]

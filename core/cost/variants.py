"""Which kernel an op runs: torch picks among backends by shape, and on a CPU their costs differ.

``aten.convolution`` (and its backward) runs on the CPU either oneDNN (``Mkldnn``) or torch's own
kernels (``Slow2d``, ``SlowDilated2d``, ...): torch's rule (``_select_conv_backend``) takes its own
kernel for a single-sample input that is small enough (and for a 1x1 convolution when it runs one
thread), and oneDNN otherwise.  On small convolutions oneDNN costs tens of microseconds more, so a
batch of 2 split in two (micro-batching) can run faster than its halves' timings at batch 2 would
say.  Timings record the variant torch chose
(``core.cost.measured``); a calibrated profile fits a pair per op and variant where the timings
cover it (``aten.convolution.default[Slow2d]``, ``core.cost.calibrate``), and the analytic model
asks for the variant only under such a profile.  The answer is torch's own function, called on
empty tensors of the op's shapes (no data is touched).
"""

from __future__ import annotations

from typing import Any

from ..ir.graph import Graph, Node, TRef

CONV_OPS = {"aten.convolution.default": (0, 1, 3), "aten.convolution_backward.default": (1, 2, 4)}
# op -> (argument index of the input, of the weight, of the stride; padding, dilation, transposed,
#        output_padding, groups follow the stride)
_CACHE: dict[tuple, str | None] = {}
# values of at::native::ConvBackend that torch's Python enum leaves unnamed (between Mkldnn = 8 and
# MkldnnEmpty = 10 in the C++ enum)
_UNNAMED = {9: "MkldnnTranspose"}


def kernel_variant(g: Graph, node: Node) -> str | None:
    """The CPU kernel torch runs for ``node`` (``Slow2d``, ``Mkldnn``, ...), or None for an op with
    one kernel (or arguments this cannot read)."""
    where = CONV_OPS.get(node.op or "")
    if where is None:
        return None
    i, w, s = where
    args = node.args
    if len(args) < s + 6 or not isinstance(args[i], TRef) or not isinstance(args[w], TRef):
        return None
    x, wt = g.tensor(args[i]), g.tensor(args[w])
    consts = args[s:s + 6]
    key = (node.op, x.shape, wt.shape, x.dtype, repr(consts), _threads())
    if key not in _CACHE:
        _CACHE[key] = _select(x.shape, wt.shape, x.dtype, consts)
    return _CACHE[key]


def _select(x_shape: tuple[int, ...], w_shape: tuple[int, ...], dtype: str, consts: Any) -> str | None:
    import torch

    from ..ir.torch_bridge import torch_dtype

    stride, padding, dilation, transposed, output_padding, groups = consts
    try:
        dt = torch_dtype(dtype)
        x, w = torch.empty(x_shape, dtype=dt), torch.empty(w_shape, dtype=dt)
        backend = torch._C._select_conv_backend(x, w, None, list(stride), list(padding), list(dilation),
                                                bool(transposed), list(output_padding), int(groups))
    except (RuntimeError, TypeError, ValueError, AttributeError):
        return None
    name = str(backend).rpartition(".")[2]
    if name.isidentifier():
        return name
    return _UNNAMED.get(int(backend), f"backend{int(backend)}")  # a value the Python enum does not name


def _threads() -> int:
    import torch

    return torch.get_num_threads()  # torch's rule looks at it (a 1x1 convolution with one thread)

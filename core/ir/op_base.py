"""The vocabulary of the ops registry (``core.ir.ops``): dim links, the context an entry's functions
read, and the helpers entries share (FLOP counts, broadcasting and reshape links)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .graph import Node, TensorMeta, TRef

A = "aten."  # the namespace prefix of every registry key


@dataclass(frozen=True)
class DimLink:
    """Input ``input`` (index into ``node.inputs()``) dim ``in_dim`` <-> output ``output`` dim
    ``out_dim``; ``out_dim < 0`` is reduce axis ``-out_dim`` of that output (summed over)."""

    input: int
    in_dim: int
    output: int
    out_dim: int


@dataclass
class OpCtx:
    node: Node
    ins: list[TensorMeta]  # tensor inputs, in node.inputs() order
    outs: list[TensorMeta]

    def arg(self, i: int, default: Any = None) -> Any:
        a = self.node.args
        return a[i] if i < len(a) else self.node.kwargs.get(_ARGNAMES.get(i, ""), default)

    def kw(self, name: str, pos: int, default: Any = None) -> Any:
        if name in self.node.kwargs:
            return self.node.kwargs[name]
        a = self.node.args
        return a[pos] if pos < len(a) else default

    def in_index(self, arg_pos: int) -> int | None:
        """Index in ``ins`` of the tensor passed as positional argument ``arg_pos``."""
        seen = 0
        for i, a in enumerate(self.node.args):
            if isinstance(a, TRef):
                if i == arg_pos:
                    return seen
                seen += 1
            elif isinstance(a, (list, tuple)):
                seen += sum(1 for x in a if isinstance(x, TRef))
        return None


_ARGNAMES: dict[int, str] = {}

FlopFn = Callable[[OpCtx], float]
LinkFn = Callable[[OpCtx], list[DimLink]]


def norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


# ---- flop helpers ----------------------------------------------------------------------------------
def _out_numel(c: OpCtx) -> float:
    return float(sum(t.numel for t in c.outs))


def _in_numel(c: OpCtx) -> float:
    return float(c.ins[0].numel) if c.ins else 0.0


def _zero(c: OpCtx) -> float:
    return 0.0


def _times(k: float, base: FlopFn) -> FlopFn:
    return lambda c: k * base(c)


# ---- link helpers ----------------------------------------------------------------------------------
def broadcast_links(c: OpCtx, output: int = 0, inputs: list[int] | None = None) -> list[DimLink]:
    """Elementwise with numpy broadcasting: a dim links when its size equals the output's (and > 1)."""
    o = c.outs[output].shape
    links = []
    for i in range(len(c.ins)) if inputs is None else inputs:
        s = c.ins[i].shape
        for d in range(len(s)):
            od = d + len(o) - len(s)
            if od >= 0 and s[d] == o[od] and s[d] > 1:
                links.append(DimLink(i, d, output, od))
    return links


def _pointwise(c: OpCtx) -> list[DimLink]:
    out = []
    for j in range(len(c.outs)):
        out += broadcast_links(c, j)
    return out


def reshape_links(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[int, int]]:
    """Pairs (src dim, dst dim) of a reshape: within each group of dims whose products line up, the
    outermost non-1 dims correspond (splitting an outer dim into n parts splits the merged one)."""
    pairs = []
    i = j = 0
    while i < len(src) and j < len(dst):
        while i < len(src) and src[i] == 1:
            i += 1
        while j < len(dst) and dst[j] == 1:
            j += 1
        if i >= len(src) or j >= len(dst):
            break
        i0, j0 = i, j
        ps, pd = src[i], dst[j]
        i += 1
        j += 1
        while ps != pd:
            if ps < pd:
                if i >= len(src):
                    return pairs
                ps *= src[i]
                i += 1
            else:
                if j >= len(dst):
                    return pairs
                pd *= dst[j]
                j += 1
        pairs.append((i0, j0))
    return pairs

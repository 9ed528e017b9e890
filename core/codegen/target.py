"""Capture for the device that runs the plan: rewrite a CPU capture's attention into what CUDA runs.

A graph captured on the CPU records ``aten._scaled_dot_product_flash_attention_for_cpu`` (and its
backward) for every ``F.scaled_dot_product_attention`` call; on a GPU torch's dispatcher runs another
kernel, with other saved tensors.  :func:`retarget` replaces each CPU call by the call a CUDA run
makes, with that kernel's real outputs (shapes and dtypes as torch's meta kernels give them), so the
memory model counts what CUDA allocates.  The kernel is chosen per call by
``codegen.runtime.sdpa_cuda_kernel`` -- the one place the dispatcher's rules are modelled (sm80+ GPU,
priority flash > memory-efficient > math as in torch's ``sdp_utils.cpp`` ``select_sdp_backend``):

* flash (``_scaled_dot_product_flash_attention``): float16/bfloat16, no attention mask, query / key
  / value head dims equal, at most 256 and a multiple of 8, ``is_causal`` only with equal query and
  key lengths, grouped-query heads allowed.  Saves the output and a float32 log-sum-exp [B, H, Lq];
  its RNG state is a (2,) and a () uint64 tensor.  The backward
  (``_scaled_dot_product_flash_attention_backward``) reads them with the sequence lengths.
* memory-efficient (``_scaled_dot_product_efficient_attention``): float32, or any call with a mask,
  query and key head dims equal and head dims a multiple of 4 (float32) or 8 (half types), the same
  number of query and key heads.  Its log-sum-exp is float32 [B, H, Lq padded to a multiple of 32]
  (empty when no backward reads it), plus int64 philox seed and offset.  A mask is passed as torch's
  composite passes it: padded in its last dim to a multiple of 8 when that dim is not one (a copy;
  the captured mask's strides are not in the graph, so it is taken as contiguous), expanded to
  [B, H, Lq, Lk] (a view); a boolean mask first becomes an additive one.  The backward
  (``_scaled_dot_product_efficient_attention_backward``) takes ``grad_input_mask`` [True, True,
  True, False] (no gradient of the mask).
* math (``_scaled_dot_product_attention_math``) where neither applies -- e.g. a float32
  grouped-query call (flash takes only half types, memory-efficient attention no grouped heads) or a
  head dim that is not a multiple of 4.  Its probabilities [B, H, Lq, Lk] are an output, saved for
  the backward, which becomes explicit matmul / mul / sum nodes, each S x S tensor counted; the
  output is copied into the query's [B, Lq, H, D] layout (the copy a CUDA run of the math path makes
  when the model transposes it back).  Dropout on this path is refused.

cuDNN attention (first in torch's order on Hopper / Blackwell builds with a recent cuDNN) is not
modelled.  ``retarget(g, "cpu")`` leaves the graph as captured.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from ..ir import ops
from ..ir.graph import Graph, GraphError, Node, TensorKind, TensorMeta, TorchConst, TRef
from ..ir.torch_bridge import resolve_op, torch_dtype
from .runtime import sdpa_cuda_kernel

A = "aten."
CPU_FWD = A + "_scaled_dot_product_flash_attention_for_cpu.default"
CPU_BWD = A + "_scaled_dot_product_flash_attention_for_cpu_backward.default"
FLASH_FWD = A + "_scaled_dot_product_flash_attention.default"
FLASH_BWD = A + "_scaled_dot_product_flash_attention_backward.default"
EFF_FWD = A + "_scaled_dot_product_efficient_attention.default"
EFF_BWD = A + "_scaled_dot_product_efficient_attention_backward.default"
MATH_FWD = A + "_scaled_dot_product_attention_math.default"
KERNEL_OPS = {"flash": FLASH_FWD, "efficient": EFF_FWD, "math": MATH_FWD}
TARGETS = ("cpu", "cuda")


class TargetError(GraphError):
    """A graph that cannot be rewritten for the target device (one line saying why)."""


@dataclass
class AttentionCall:
    """One attention call: the node it was captured as, the kernel chosen and why."""

    node: str
    kernel: str  # "flash" | "efficient" | "math" | "cpu" (left as captured)
    reason: str
    backward: bool = False  # a backward node was rewritten with it


@dataclass
class RetargetReport:
    """What :func:`retarget` did: the target device and one entry per attention call."""

    device: str
    calls: list[AttentionCall] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(c.kernel for c in self.calls).items()))

    def summary(self) -> str:
        """One line: ``cuda: 4 attention calls -> flash 2, efficient 2 (an attention mask: 2)``."""
        if not self.calls:
            return f"{self.device}: no attention calls"
        kinds = ", ".join(f"{k} {n}" for k, n in self.counts().items())
        why = Counter(f"{c.kernel}: {c.reason}" for c in self.calls)
        reasons = "; ".join(f"{r} x{n}" for r, n in sorted(why.items()))
        return f"{self.device}: {len(self.calls)} attention calls -> {kinds} ({reasons})"


def target_device(device: str | torch.device) -> str:
    """``device`` as a retarget target ("cpu" or "cuda"), else a one-line ValueError."""
    kind = str(device).split(":", 1)[0].strip().lower()
    if kind not in TARGETS:
        raise ValueError(f"unknown target device {str(device)!r}: expected one of {', '.join(TARGETS)}")
    return kind


def attention_kernels(g: Graph) -> dict[str, int]:
    """How many nodes of each attention kernel ``g`` holds (forward calls), by kernel name."""
    names = {CPU_FWD: "cpu", FLASH_FWD: "flash", EFF_FWD: "efficient", MATH_FWD: "math",
             A + "_scaled_dot_product_cudnn_attention.default": "cudnn"}
    out: Counter[str] = Counter()
    for op, name in names.items():
        n = len(g.nodes_of(op))
        if n:
            out[name] += n
    return dict(sorted(out.items()))


def retarget(g: Graph, device: str | torch.device) -> RetargetReport:
    """Rewrite ``g`` in place (through the graph's checked primitives) into the graph a run on
    ``device`` executes; returns the per-call report.  ``"cpu"``: nothing changes."""
    dev = target_device(device)
    report = RetargetReport(dev)
    fwds = g.nodes_of(CPU_FWD)
    if dev == "cpu":
        report.calls = [AttentionCall(g[f].name, "cpu", "as captured", bool(_backwards(g, g[f])))
                        for f in fwds]
        return report
    for f in fwds:
        report.calls.append(_Rewrite(g, g[f]).run())
    problems = g.lint_problems(limit=3)
    if problems:
        raise TargetError(f"retargeting to {dev} broke the graph: {'; '.join(problems)}")
    g.meta["target"] = dev
    return report


# ---- helpers ------------------------------------------------------------------------------------------
def _arg(node: Node, pos: int, name: str, default: Any) -> Any:
    if pos < len(node.args):
        return node.args[pos]
    return node.kwargs.get(name, default)


def _backwards(g: Graph, fwd: Node) -> list[Node]:
    lse = TRef(fwd.id, 1)
    return [g[u] for u in g.readers(lse) if g[u].op == CPU_BWD]


def _to_meta(obj: Any, g: Graph) -> Any:
    if isinstance(obj, TRef):
        t = g.tensor(obj)
        return torch.empty(t.shape, dtype=torch_dtype(t.dtype), device="meta")
    if isinstance(obj, TorchConst):
        return torch.device("meta") if obj.kind == "device" else getattr(torch, obj.value)
    if isinstance(obj, list):
        return [_to_meta(x, g) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_to_meta(x, g) for x in obj)
    if isinstance(obj, dict):
        return {k: _to_meta(v, g) for k, v in obj.items()}
    return obj


def _metas(val: Any, kind: TensorKind) -> list[TensorMeta]:
    """Output metadata of a meta-kernel result: tensors as they are; an absent tensor or an integer
    output (flash's sequence lengths) as an empty placeholder, as the importer writes them."""
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    out = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            out.append(TensorMeta(tuple(v.shape), str(v.dtype).removeprefix("torch."), kind))
        elif isinstance(v, int) and not isinstance(v, bool):
            out.append(TensorMeta((0,), "int64", kind))
        else:
            out.append(TensorMeta((0,), "float32", kind))
    return out


class _Rewrite:
    """The rewrite of one CPU attention call (forward node and the backward nodes reading it)."""

    def __init__(self, g: Graph, fwd: Node) -> None:
        self.g, self.f = g, fwd
        self.q, self.k, self.v = fwd.args[0], fwd.args[1], fwd.args[2]
        self.dropout = float(_arg(fwd, 3, "dropout_p", 0.0) or 0.0)
        self.causal = bool(_arg(fwd, 4, "is_causal", False))
        self.mask = fwd.kwargs.get("attn_mask")
        self.scale = fwd.kwargs.get("scale")
        self.bwds = _backwards(g, fwd)
        qt, kt, vt = (g.tensor(r) for r in (self.q, self.k, self.v))
        self.qt, self.kt, self.vt = qt, kt, vt
        self.kernel, self.reason = sdpa_cuda_kernel(qt.dtype, qt.shape, kt.shape, vt.shape, self.mask is not None,
                                                    self.causal)
        self.n = 0

    # -- node creation --------------------------------------------------------------------------------
    def add(self, op: str, args: list[Any], kwargs: dict[str, Any] | None = None,
            kinds: list[TensorKind] | None = None) -> Node:
        """A new node running ``op``; its outputs are what torch's meta kernel returns for the inputs."""
        kwargs = dict(kwargs or {})
        try:
            val = resolve_op(op)(*_to_meta(args, self.g), **_to_meta(kwargs, self.g))
        except (RuntimeError, TypeError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TargetError(f"{self.f.name}: {op} refuses its inputs: {first}") from None
        outs = _metas(val, TensorKind.ACTIVATION)
        for j, kind in enumerate(kinds or []):
            if kind is not None and j < len(outs):
                outs[j].kind = kind
        ops.set_output_aliases(op, args, outs)
        self.n += 1
        return self.g.add_node(name=f"{self.f.name}_{self.kernel}_{self.n}", op=op, args=args, kwargs=kwargs,
                               outputs=outs, module=self.f.module)

    def _scale_kw(self) -> dict[str, Any]:
        return {} if self.scale is None else {"scale": self.scale}

    def _replace(self, old: Node, new: Node, pairs: list[tuple[int, int]]) -> None:
        for i, j in pairs:
            self.g.replace_all_uses_with(TRef(old.id, i), TRef(new.id, j))

    def _erase(self) -> None:
        for b in self.bwds:
            self.g.erase_node(b.id)
        left = self.g.users(self.f.id)
        if left or any(r.node == self.f.id for r in self.g.outputs.values()):
            names = ", ".join(repr(self.g[u].name) for u in left[:3]) or "a graph output"
            raise TargetError(f"{self.f.name}: its log-sum-exp is read by {names}, not only by its backward; "
                              f"the {self.kernel} kernel's differs")
        self.g.erase_node(self.f.id)

    def run(self) -> AttentionCall:
        getattr(self, f"_{self.kernel}")()
        return AttentionCall(self.f.name, self.kernel, self.reason, bool(self.bwds))

    # -- flash ----------------------------------------------------------------------------------------
    def _flash(self) -> None:
        nf = self.add(FLASH_FWD, [self.q, self.k, self.v, self.dropout, self.causal], self._scale_kw())
        self._replace(self.f, nf, [(0, 0)])
        lq, lk = self.qt.shape[2], self.kt.shape[2]
        for b in self.bwds:
            go, q, k, v, out = b.args[:5]
            nb = self.add(FLASH_BWD, [go, q, k, v, out, TRef(nf.id, 1), None, None, lq, lk, self.dropout,
                                      self.causal, TRef(nf.id, 6), TRef(nf.id, 7)], self._scale_kw(),
                          kinds=[t.kind for t in b.outputs])
            self._replace(b, nb, [(0, 0), (1, 1), (2, 2)])
        self._erase()

    # -- memory-efficient -----------------------------------------------------------------------------
    def _bias(self) -> TRef | None:
        """torch's ``preprocess_mask`` as graph nodes (see the module docstring)."""
        m = self.mask
        if m is None:
            return None
        if self.g.tensor(m).dtype == "bool":
            m = TRef(self.add(A + "where.Scalar", [m, 0.0, float("-inf")]).id, 0)
            if self.qt.dtype != "float32":
                m = TRef(self.add(A + "_to_copy.default", [m], {"dtype": TorchConst("dtype", self.qt.dtype)}).id, 0)
        n = self.g.tensor(m).shape[-1]
        if n % 8:
            padded = self.add(A + "constant_pad_nd.default", [m, [0, 8 - n % 8], 0.0])
            m = TRef(self.add(A + "slice.Tensor", [TRef(padded.id, 0), -1, 0, n]).id, 0)
        b, h, lq = self.qt.shape[:3]
        return TRef(self.add(A + "expand.default", [m, [b, h, lq, self.kt.shape[2]]]).id, 0)

    def _efficient(self) -> None:
        bias = self._bias()
        ne = self.add(EFF_FWD, [self.q, self.k, self.v, bias, bool(self.bwds), self.dropout, self.causal],
                      self._scale_kw())
        self._replace(self.f, ne, [(0, 0)])
        for b in self.bwds:
            go, q, k, v, out = b.args[:5]
            nb = self.add(EFF_BWD, [go, q, k, v, bias, out, TRef(ne.id, 1), TRef(ne.id, 2), TRef(ne.id, 3),
                                    self.dropout, [True, True, True, False], self.causal], self._scale_kw(),
                          kinds=[t.kind for t in b.outputs])
            self._replace(b, nb, [(0, 0), (1, 1), (2, 2)])
        self._erase()

    # -- math -----------------------------------------------------------------------------------------
    def _math(self) -> None:
        if self.dropout > 0:
            raise TargetError(f"{self.f.name}: attention dropout (p={self.dropout}) on the math path "
                              f"({self.reason}) is not supported")
        hq, hk = self.qt.shape[1], self.kt.shape[1]
        kw = {**self._scale_kw(), **({"enable_gqa": True} if hq != hk else {})}
        nm = self.add(MATH_FWD, [self.q, self.k, self.v, self.mask, 0.0, self.causal, None], kw)
        o = self._blhd(TRef(nm.id, 0))
        self.g.replace_all_uses_with(TRef(self.f.id, 0), o)
        for b in self.bwds:
            grads = self._math_backward(b, TRef(nm.id, 1))
            for i, r in enumerate(grads):
                self.g.replace_all_uses_with(TRef(b.id, i), r)
        self._erase()

    def _blhd(self, r: TRef) -> TRef:
        """A copy of [B, H, L, D] tensor ``r`` laid out as [B, L, H, D] (the layout of the CPU kernel's
        output and gradients, which the rest of the captured graph's views rely on)."""
        t = self._ref(A + "transpose.int", [r, 1, 2])
        c = self._ref(A + "clone.default", [t], {"memory_format": TorchConst("memory_format", "contiguous_format")})
        return self._ref(A + "transpose.int", [c, 1, 2])

    def _ref(self, op: str, args: list[Any], kwargs: dict[str, Any] | None = None) -> TRef:
        return TRef(self.add(op, args, kwargs).id, 0)

    def _cast(self, r: TRef, dtype: str) -> TRef:
        if self.g.tensor(r).dtype == dtype:
            return r
        return self._ref(A + "_to_copy.default", [r], {"dtype": TorchConst("dtype", dtype)})

    def _math_backward(self, b: Node, p: TRef) -> list[TRef]:
        """dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)), dQ = s dS K, dK = s dS^T Q -- in the dtype
        of the probabilities P; grouped-query key / value heads repeated, their gradients summed."""
        go, q, k, v, out = b.args[:5]
        ct = self.g.tensor(p).dtype
        go, q, k, v, out = (self._cast(r, ct) for r in (go, q, k, v, out))
        bsz, hq, _lq, d = self.qt.shape
        hk, lk = self.kt.shape[1], self.kt.shape[2]
        group = hq // hk
        if group > 1:
            k = self._ref(A + "repeat_interleave.self_int", [k, group, 1])
            v = self._ref(A + "repeat_interleave.self_int", [v, group, 1])
        s = self.scale if self.scale is not None else d ** -0.5
        dv = self._ref(A + "matmul.default", [self._ref(A + "transpose.int", [p, -2, -1]), go])
        dp = self._ref(A + "matmul.default", [go, self._ref(A + "transpose.int", [v, -2, -1])])
        row = self._ref(A + "sum.dim_IntList", [self._ref(A + "mul.Tensor", [go, out]), [-1], True])
        ds = self._ref(A + "mul.Tensor", [p, self._ref(A + "sub.Tensor", [dp, row])])
        dq = self._ref(A + "mul.Tensor", [self._ref(A + "matmul.default", [ds, k]), s])
        dst = self._ref(A + "transpose.int", [ds, -2, -1])
        dk = self._ref(A + "mul.Tensor", [self._ref(A + "matmul.default", [dst, q]), s])
        if group > 1:
            dk = self._ref(A + "sum.dim_IntList", [
                self._ref(A + "view.default", [dk, [bsz, hk, group, lk, d]]), [2]])
            dv = self._ref(A + "sum.dim_IntList", [
                self._ref(A + "view.default", [dv, [bsz, hk, group, lk, self.vt.shape[3]]]), [2]])
        grads = [self._blhd(self._cast(r, t.dtype)) for r, t in ((dq, self.qt), (dk, self.kt), (dv, self.vt))]
        for r, t in zip(grads, b.outputs, strict=True):
            self.g.tensor(r).kind = t.kind
        return grads


__all__ = ["AttentionCall", "RetargetReport", "TargetError", "attention_kernels", "retarget", "target_device"]

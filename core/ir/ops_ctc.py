"""Ops registry entries for CTC loss (``core.ir.ops`` registers ``ENTRIES``; the fake kernels that
let capture trace it are ``core.frontend.fake_kernels``).

``aten._ctc_loss(log_probs [T, N, C], targets [N, S] (padded) or [sum of lengths] (concatenated),
input_lengths, target_lengths, blank, zero_infinity) -> (neg_log_likelihood [N], log_alpha [N, T,
W = 2 max(target_lengths) + 1])``; ``aten._ctc_loss_backward(grad [N], log_probs, targets, lengths...,
neg_log_likelihood, log_alpha, blank, zero_infinity) -> grad of log_probs [T, N, C]``.  Both come in
a ``.default`` overload (lengths as Python int lists) and a ``.Tensor`` one (lengths as tensors [N]).
The exported script calls these aten ops as captured (generic emission).

FLOPs (torch's flop counter has no CTC formula; these are ours): the forward recursion computes, for
each element of ``log_alpha``, a log-sum-exp of at most three predecessors plus the emission --
about 10 operations; the backward runs the same recursion backwards for beta (10 per element of
``log_alpha``, read as its input) and a second pass accumulating into the gradient (10 more), then
turns every gradient element into ``exp(lp) - exp(lcab + nll - lp)`` (4).

Dim links: only the batch splits -- time is a recursion, the extended target positions depend on
each other, and the classes are gathered by the targets.  In the ``.Tensor`` overloads with padded
2-D targets every batch-indexed input (log_probs dim 1, targets, both lengths, and in the backward
grad, neg_log_likelihood and log_alpha) links with the outputs' batch dims; the reduction (mean or
sum over the batch) is outside the op.  A part's kernel sizes its own ``log_alpha`` by its longest
target, at most the graph's width.  No links -- fission stops at the loss -- for the ``.default``
overloads (a part would need its slice of the length lists; argument rescaling is not told which
part it makes) and for concatenated 1-D targets (a part's targets are not a slice at a fixed
offset).
"""

from __future__ import annotations

from .op_base import A, DimLink, OpCtx

ENTRIES: list[tuple[list[str], str, object, object]] = []

CTC_LOSS = (A + "_ctc_loss.default", A + "_ctc_loss.Tensor")
CTC_LOSS_BACKWARD = (A + "_ctc_loss_backward.default", A + "_ctc_loss_backward.Tensor")


def _log_alpha_numel(c: OpCtx, pos: int | None) -> float:
    """Elements of ``log_alpha``: output 1 of the forward (``pos`` None), else the input at ``pos``."""
    if pos is None:
        return float(c.outs[1].numel) if len(c.outs) > 1 else 0.0
    i = c.in_index(pos)
    return float(c.ins[i].numel) if i is not None else 0.0


def _ctc_flops(c: OpCtx) -> float:
    return 10.0 * _log_alpha_numel(c, None)


def _ctc_bwd_flops(c: OpCtx) -> float:
    return 20.0 * _log_alpha_numel(c, 6) + 4.0 * float(c.outs[0].numel)


def _batch_links(c: OpCtx, batch_args: list[tuple[int, int]], out_batch_dims: list[int]) -> list[DimLink]:
    """Each (argument position, its batch dim) linked to every output's batch dim; ValueError
    (no links: the op blocks fission) unless the targets are padded 2-D and the lengths tensors."""
    targets = c.in_index(1 if c.node.op in CTC_LOSS else 2)
    if targets is None or len(c.ins[targets].shape) != 2:
        raise ValueError("concatenated targets: a part's targets are not a slice of them")
    n = c.outs[0].shape[out_batch_dims[0]] if c.outs[0].shape else 0
    links = []
    for pos, dim in batch_args:
        i = c.in_index(pos)
        if i is None:
            raise ValueError(f"argument {pos} is not a tensor: lengths as Python ints")
        if n > 1 and len(c.ins[i].shape) > dim and c.ins[i].shape[dim] == n:
            links += [DimLink(i, dim, j, d) for j, d in enumerate(out_batch_dims)]
    return links


def _ctc_links(c: OpCtx) -> list[DimLink]:
    # log_probs [T, N, C], targets [N, S], input_lengths [N], target_lengths [N] -> nll [N], log_alpha [N, T, W]
    return _batch_links(c, [(0, 1), (1, 0), (2, 0), (3, 0)], [0, 0])


def _ctc_bwd_links(c: OpCtx) -> list[DimLink]:
    # grad [N], log_probs [T, N, C], targets [N, S], input_lengths, target_lengths, nll [N],
    # log_alpha [N, T, W] -> grad of log_probs [T, N, C]
    return _batch_links(c, [(0, 0), (1, 1), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0)], [1])


ENTRIES.append(([A + "_ctc_loss.Tensor"], "loss", _ctc_flops, _ctc_links))
ENTRIES.append(([A + "_ctc_loss_backward.Tensor"], "loss", _ctc_bwd_flops, _ctc_bwd_links))
ENTRIES.append(([A + "_ctc_loss.default"], "loss", _ctc_flops, None))
ENTRIES.append(([A + "_ctc_loss_backward.default"], "loss", _ctc_bwd_flops, None))

"""The losses users train with, each on a small model: model files of the corpus
(``sample_graphs.corpus``), imported as ``magis import sample_graphs/losses.py:NAME``.

Each pattern is a factory returning a :class:`~sample_graphs.sample.Sample` whose ``loss_fn``
computes its targets the way training code does -- inside the step, from the batch -- because that
is what the optimizer's rules must cope with: labels shifted for next-token prediction and padded
with ``ignore_index`` (``transformers``' causal-LM loss), label smoothing, sum and mean reductions,
masked-LM labels, a contrastive loss over two towers (its logits mix the batch), per-pixel
segmentation with an ignored class, and a detection-style sum of box regression and classification
normalised by the number of positives, and CTC on padded labels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sample_graphs.sample import Sample

VOCAB, DIM, BATCH, SEQ = 128, 32, 8, 64
PAD = 0  # the padding token id of the LM patterns
IGNORE = -100  # cross_entropy's default ignore_index


class TinyLM(nn.Module):
    """Token embedding, a causal mixing step (a cumulative mean over positions), a GELU MLP and an
    untied LM head: small, but every op a decoder block has on the path from ids to logits."""

    def __init__(self, vocab: int = VOCAB, dim: int = DIM) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        steps = torch.arange(1, ids.shape[1] + 1, dtype=h.dtype, device=h.device)
        h = h + h.cumsum(1) / steps[None, :, None]
        h = h + self.mlp(self.norm(h))
        return self.head(h)


def _lm(name: str, loss_fn, description: str, extra: tuple[torch.Tensor, ...] = ()) -> Sample:
    torch.manual_seed(0)
    ids = torch.randint(1, VOCAB, (BATCH, SEQ))
    ids[:, -3:] = PAD  # right padding: the patterns that mask it must count fewer targets
    return Sample(name, TinyLM().train(), (ids, *extra), loss_fn, lambda m, ids, *_: m(ids), torch.float32,
                  description, False)


def _shifted(module: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = module(ids)
    return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


def shifted_labels() -> Sample:
    """Next-token loss with the shift written out: ``cross_entropy(logits[:, :-1], ids[:, 1:])``."""
    return _lm("shifted_labels", _shifted, "next-token loss, labels shifted inside the step")


def _hf_causal(module: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = module(ids).float()
    labels = F.pad(ids, (0, 1), value=IGNORE)[:, 1:].contiguous()  # as transformers' ForCausalLMLoss
    return F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), ignore_index=IGNORE)


def hf_causal() -> Sample:
    """``transformers``' causal-LM loss: labels padded with -100 at the end, then shifted."""
    return _lm("hf_causal", _hf_causal, "labels padded with -100 and shifted (transformers' causal-LM loss)")


def _pad_masked(module: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = module(ids)
    labels = ids[:, 1:].masked_fill(ids[:, 1:] == PAD, IGNORE)
    return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels.reshape(-1))


def pad_masked() -> Sample:
    """Padding tokens taken out of the loss: labels set to -100 where the input is padding."""
    return _lm("pad_masked", _pad_masked, "padding positions set to -100 inside the step (fewer targets)")


def _smoothed(module: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = module(ids)
    labels = ids[:, 1:].masked_fill(ids[:, 1:] == PAD, IGNORE)
    return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels.reshape(-1), label_smoothing=0.1)


def label_smoothing() -> Sample:
    """Label smoothing 0.1 with padding ignored (the smoothing term is a mean over the counted targets)."""
    return _lm("label_smoothing", _smoothed, "label smoothing 0.1, padding ignored")


def _summed(module: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = module(ids)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1), reduction="sum")
    return loss / ids.shape[0]  # per sequence, as sequence-level objectives are normalised


def sum_reduction() -> Sample:
    """A summed token loss divided by the batch size (per-sequence normalisation)."""
    return _lm("sum_reduction", _summed, "reduction='sum', divided by the batch size")


def _masked_lm(module: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    corrupted = ids.masked_fill(mask, 1)  # the [MASK] token
    labels = torch.where(mask, ids, torch.full_like(ids, IGNORE))
    return F.cross_entropy(module(corrupted).reshape(-1, VOCAB), labels.reshape(-1))


def masked_lm() -> Sample:
    """BERT-style masked-LM: masked positions replaced in the input, the others' labels -100."""
    torch.manual_seed(1)
    mask = torch.rand(BATCH, SEQ) < 0.25
    mask[:, 0] = True  # every sequence has a target
    return _lm("masked_lm", _masked_lm, "masked-LM labels: -100 where nothing was masked", (mask,))


def _pseudo_labels(module: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = module(ids)
    labels = logits.detach().argmax(-1)  # self-training: the model's own predictions are the targets
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def pseudo_labels() -> Sample:
    """Self-training on the model's own predictions: the target is computed from the logits, so a
    split of the loss would run the forward again to count it (refused)."""
    return _lm("pseudo_labels", _pseudo_labels, "targets = argmax of the logits (self-training)")


class TwoTowers(nn.Module):
    """A CLIP-style pair: an image tower on flattened pixels and a text tower on token ids."""

    def __init__(self) -> None:
        super().__init__()
        self.image = nn.Sequential(nn.Linear(3 * 8 * 8, 2 * DIM), nn.GELU(), nn.Linear(2 * DIM, DIM))
        self.text = nn.Embedding(VOCAB, DIM)
        self.proj = nn.Linear(DIM, DIM, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, pixels: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        a = F.normalize(self.image(pixels.flatten(1)), dim=-1)
        b = F.normalize(self.proj(self.text(ids).mean(1)), dim=-1)
        return self.logit_scale.exp() * a @ b.t()


def _contrastive(module: nn.Module, pixels: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    logits = module(pixels, ids)
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


def contrastive() -> Sample:
    """A symmetric contrastive loss over two towers: every pair of the batch is compared, so the
    batch is not split (gradient accumulation would change the loss)."""
    torch.manual_seed(0)
    return Sample("contrastive", TwoTowers().train(), (torch.randn(32, 3, 8, 8), torch.randint(0, VOCAB, (32, SEQ))),
                  _contrastive, lambda m, p, i: m(p, i), torch.float32,
                  "contrastive loss over two towers (CLIP-style, labels = arange(batch))", False)


class TinySegmenter(nn.Module):
    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.GELU(), nn.Conv2d(16, 16, 3, padding=1),
                                  nn.GELU(), nn.Conv2d(16, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _segmentation(module: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(module(x), target, ignore_index=255)


def segmentation() -> Sample:
    """Per-pixel cross-entropy with an ignored class (255, the border label of VOC-style masks)."""
    torch.manual_seed(0)
    target = torch.randint(0, 5, (8, 32, 32))
    target[:, :2] = 255
    return Sample("segmentation", TinySegmenter().train(), (torch.randn(8, 3, 32, 32), target), _segmentation,
                  lambda m, x, *_: m(x), torch.float32, "per-pixel cross-entropy, label 255 ignored", False)


class TinyDetector(nn.Module):
    """A dense detection head: per anchor, class logits and four box offsets."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.GELU(), nn.Conv2d(16, 16, 3, stride=2, padding=1),
                                      nn.GELU())
        self.cls = nn.Conv2d(16, classes, 1)
        self.box = nn.Conv2d(16, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.backbone(x)
        return self.cls(h).flatten(2).transpose(1, 2), self.box(h).flatten(2).transpose(1, 2)


def _detection(module: nn.Module, x: torch.Tensor, labels: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    cls, box = module(x)
    positive = labels >= 0  # anchors matched to an object; -1: background
    onehot = F.one_hot(labels.clamp(min=0), cls.shape[-1]).to(cls.dtype) * positive[..., None]
    num_pos = positive.sum().clamp(min=1)
    cls_loss = F.binary_cross_entropy_with_logits(cls, onehot, reduction="sum")
    box_loss = (F.smooth_l1_loss(box, boxes, reduction="none").sum(-1) * positive).sum()
    return (cls_loss + box_loss) / num_pos


def detection() -> Sample:
    """Focal-free RetinaNet-style loss: sigmoid classification over every anchor plus smooth-L1 on
    the positive anchors' boxes, both summed and divided by the number of positives (computed from
    the targets inside the step)."""
    torch.manual_seed(0)
    labels = torch.randint(-1, 4, (8, 256))
    return Sample("detection", TinyDetector().train(), (torch.randn(8, 3, 32, 32), labels, torch.randn(8, 256, 4)),
                  _detection, lambda m, x, *_: m(x), torch.float32,
                  "sigmoid classification + smooth-L1 on positives, / number of positives", False)


class TinyAcoustic(nn.Module):
    """Frames -> a GELU MLP -> per-frame character logits (an acoustic model's head)."""

    def __init__(self, dim: int = 16, chars: int = 12) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, 2 * DIM), nn.GELU(), nn.Linear(2 * DIM, chars))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _ctc(module: nn.Module, frames: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    log_probs = module(frames).log_softmax(-1).transpose(0, 1)  # [T, B, C]
    frame_lengths = torch.full((frames.shape[0],), frames.shape[1], dtype=torch.long)
    label_lengths = (labels >= 0).sum(-1)  # labels padded with -100, as the collators pad them
    return F.ctc_loss(log_probs, labels.clamp_min(0), frame_lengths, label_lengths, reduction="sum") / frames.shape[0]


def ctc() -> Sample:
    """CTC loss on padded 2-D labels (-100 past each label's length), lengths computed in the step."""
    torch.manual_seed(0)
    labels = torch.randint(1, 12, (BATCH, 10))
    for b, n in enumerate([10, 7, 9, 4, 10, 6, 8, 5]):
        labels[b, n:] = IGNORE
    return Sample("ctc", TinyAcoustic().train(), (torch.randn(BATCH, 48, 16), labels), _ctc,
                  lambda m, x, *_: m(x), torch.float32, "CTC loss, padded labels, lengths from the labels", False)


PATTERNS = {f.__name__: f for f in (shifted_labels, hf_causal, pad_masked, label_smoothing, sum_reduction, masked_lm,
                                     pseudo_labels, contrastive, segmentation, detection, ctc)}

__all__ = ["PATTERNS", *PATTERNS]

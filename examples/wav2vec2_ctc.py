"""Speech recognition: a ``transformers`` wav2vec2-base with a CTC head, trained on padded labels.

    magis import examples/wav2vec2_ctc.py:build -o w2v.json.gz                      # names `layerdrop`
    magis import examples/wav2vec2_ctc.py:build --fix-random-reads -o w2v.json.gz   # no layer dropped
    magis optimize w2v.json.gz --memory-limit 0.6 -o w2v.plan.json
    magis verify examples/wav2vec2_ctc.py:build --fix-random-reads --plan w2v.plan.json

The config is wav2vec2-base's (12 layers, hidden 768) with its defaults: layer drop 0.1 -- each layer
skipped when a random draw read in Python falls under it, which a capture cannot follow; the import
says so in one line, or fixes the draws with ``--fix-random-reads`` -- and dropout 0.1.  SpecAugment
is off (``mask_time_prob=0``: its masks are drawn with numpy and indexed by value).  The loss is
written from the logits for labels padded with -100, as a data collator pads them: ``transformers``'
own ``labels=`` path reads ``labels.max()`` and selects by a mask, shapes that depend on values.
Nothing is downloaded: the weights are random.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402


class SpeechCTC:
    """wav2vec2 + CTC on ``batch`` clips of ``seconds`` of 16 kHz audio, labels of up to 24 characters."""

    def __init__(self, config: transformers.Wav2Vec2Config, batch: int = 2, seconds: float = 1.0) -> None:
        self.module = transformers.Wav2Vec2ForCTC(config).train()
        labels = torch.randint(1, config.vocab_size, (batch, 24))
        labels[1:, 16:] = -100  # shorter transcripts, padded
        self.inputs = (torch.randn(batch, int(16000 * seconds)), labels)
        self.name = f"wav2vec2_ctc_b{batch}"

    @staticmethod
    def loss_fn(model: torch.nn.Module, audio: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        log_probs = model(audio).logits.log_softmax(-1).transpose(0, 1)  # [frames, batch, chars]
        frames = torch.full((labels.shape[0],), log_probs.shape[0], dtype=torch.long)
        return F.ctc_loss(log_probs, labels.clamp_min(0), frames, (labels >= 0).sum(-1), reduction="sum",
                          zero_infinity=True) / labels.shape[0]


def build() -> SpeechCTC:
    """wav2vec2-base (95M parameters) with its default layer drop and dropouts."""
    return SpeechCTC(transformers.Wav2Vec2Config(vocab_size=32, mask_time_prob=0.0))

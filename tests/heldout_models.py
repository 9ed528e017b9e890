"""Tiny ``transformers`` models beyond the zoo (``sample_graphs.zoo``), for the micro-batching tests:
BLOOM (ALiBi), Whisper (an encoder on audio features, a decoder on tokens), Mamba (selective scan),
BART (with dropout), wav2vec2 (with dropout, convolutional features), SegFormer (with dropout and a
batch-normed decode head).  Random weights, nothing downloaded; each is a workload (module, example
inputs, loss) that ``capture_workload`` and ``codegen.verify`` take."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

from sample_graphs.transformers_models import _construct  # noqa: E402

B, S, VOCAB = 2, 16, 100


class Workload:
    def __init__(self, name: str, module: nn.Module, inputs: tuple[torch.Tensor, ...], loss_fn) -> None:
        self.name, self.module, self.inputs, self.loss_fn = name, module, inputs, loss_fn
        self.forward_fn = None


def _tokens() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, VOCAB, (B, S)), torch.randint(0, VOCAB, (B, S))


def lm_loss(m: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return m(input_ids=ids, labels=labels).loss


def bloom() -> Workload:
    c = transformers.BloomConfig(hidden_size=32, n_layer=2, n_head=4, vocab_size=VOCAB, hidden_dropout=0.0,
                                 attention_dropout=0.0)
    return Workload("bloom", _construct(transformers.BloomForCausalLM, c, torch.float32), _tokens(), lm_loss)


def bart(dropout: float = 0.1) -> Workload:
    c = transformers.BartConfig(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB,
                                max_position_embeddings=64, dropout=dropout, attention_dropout=dropout,
                                activation_dropout=dropout)
    return Workload("bart", _construct(transformers.BartForConditionalGeneration, c, torch.float32), _tokens(),
                    lm_loss)


def whisper() -> Workload:
    c = transformers.WhisperConfig(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                   decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                   vocab_size=VOCAB, num_mel_bins=8, max_source_positions=16,
                                   max_target_positions=32, dropout=0.0, attention_dropout=0.0,
                                   activation_dropout=0.0, pad_token_id=0, decoder_start_token_id=1,
                                   bos_token_id=1, eos_token_id=2)

    def loss(m: nn.Module, feats: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return m(input_features=feats, labels=labels).loss

    module = _construct(transformers.WhisperForConditionalGeneration, c, torch.float32)
    return Workload("whisper", module, (torch.randn(B, 8, 32), torch.randint(3, VOCAB, (B, 8))), loss)


def segformer(dropout: float = 0.1) -> Workload:
    c = transformers.SegformerConfig(num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                     hidden_sizes=[8, 16], patch_sizes=[3, 3], strides=[2, 2],
                                     num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=16,
                                     num_labels=4, hidden_dropout_prob=dropout,
                                     attention_probs_dropout_prob=dropout, classifier_dropout_prob=dropout,
                                     drop_path_rate=0.0)

    def loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return m(pixel_values=x, labels=y).loss

    module = _construct(transformers.SegformerForSemanticSegmentation, c, torch.float32)
    return Workload("segformer", module, (torch.randn(B, 3, 16, 16), torch.randint(0, 4, (B, 16, 16))), loss)


def wav2vec2(dropout: float = 0.1) -> Workload:
    c = transformers.Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                    conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3),
                                    num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2,
                                    hidden_dropout=dropout, attention_dropout=dropout, activation_dropout=dropout,
                                    feat_proj_dropout=dropout, final_dropout=dropout, layerdrop=0.0,
                                    mask_time_prob=0.0, num_labels=3, vocab_size=20)

    def loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return m(input_values=x, labels=y).loss

    module = _construct(transformers.Wav2Vec2ForSequenceClassification, c, torch.float32)
    return Workload("wav2vec2", module, (torch.randn(B, 400), torch.randint(0, 3, (B,))), loss)


def mamba() -> Workload:
    c = transformers.MambaConfig(hidden_size=32, num_hidden_layers=2, vocab_size=VOCAB, state_size=4, expand=2,
                                 conv_kernel=4, time_step_rank=4, use_mambapy=False)
    return Workload("mamba", _construct(transformers.MambaForCausalLM, c, torch.float32), _tokens(), lm_loss)


BUILDERS = {"bloom": bloom, "bart": bart, "whisper": whisper, "segformer": segformer, "wav2vec2": wav2vec2,
            "mamba": mamba}

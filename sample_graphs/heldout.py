"""Families of ``transformers`` that neither the samples nor the zoo hold, tiny and trained as their
library trains them (its own loss from ``labels``): the corpus's check that the user's path works on
models nobody tuned for (``sample_graphs.corpus``, source "heldout").

Each factory builds from a config object (nothing is downloaded), with dropout as configured by
default where the family has it, and returns a :class:`~sample_graphs.sample.Sample`.
"""

from __future__ import annotations

import torch
import transformers
from torch import nn

from sample_graphs.sample import Sample

BATCH, SEQ, VOCAB = 4, 32, 128


def _labels_loss(module: nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    ids, labels = inputs[0], inputs[-1]
    return module(ids, labels=labels).loss


def _ids_forward(module: nn.Module, ids: torch.Tensor, *_labels: torch.Tensor):
    return module(ids).logits


def _causal(name: str, config: transformers.PretrainedConfig, description: str) -> Sample:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).train()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return Sample(name, model, (ids, ids.clone()), _labels_loss, _ids_forward, torch.float32, description, False)


def gpt2_untied() -> Sample:
    """GPT-2 with its LM head's weight apart from the token embedding's."""
    return _causal("gpt2_untied", transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                                          n_positions=SEQ, tie_word_embeddings=False),
                   "GPT-2, untied LM head, dropout 0.1")


def bloom() -> Sample:
    """BLOOM: ALiBi position biases (a ``repeat`` of the slopes over the batch)."""
    return _causal("bloom", transformers.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4),
                   "BLOOM (ALiBi)")


def mpt() -> Sample:
    return _causal("mpt", transformers.MptConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4,
                                                 max_seq_len=SEQ, expansion_ratio=2), "MPT (ALiBi, no bias)")


def llama_tied() -> Sample:
    return _causal("llama_tied", transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                                          num_hidden_layers=2, num_attention_heads=4,
                                                          num_key_value_heads=1, max_position_embeddings=SEQ,
                                                          tie_word_embeddings=True),
                   "Llama, tied embeddings, multi-query attention")


def mamba() -> Sample:
    """Mamba (its pure-PyTorch selective scan, unrolled per token by the capture: keep it short)."""
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=4, num_hidden_layers=2,
                                      expand=2, conv_kernel=4, use_mambapy=False)
    model = transformers.MambaForCausalLM(config).train()
    ids = torch.randint(0, VOCAB, (BATCH, 8))
    return Sample("mamba", model, (ids, ids.clone()), _labels_loss, _ids_forward, torch.float32,
                  "Mamba, 8 tokens (selective scan)", False)


def bart() -> Sample:
    """BART: an encoder-decoder whose decoder inputs are the labels shifted right inside the model."""
    torch.manual_seed(0)
    config = transformers.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, max_position_embeddings=SEQ)
    model = transformers.BartForConditionalGeneration(config).train()
    ids = torch.randint(3, VOCAB, (BATCH, SEQ))
    labels = torch.randint(3, VOCAB, (BATCH, SEQ // 2))
    labels[:, -2:] = -100
    return Sample("bart", model, (ids, labels), _labels_loss, lambda m, ids, labels: m(ids, labels=labels).logits,
                  torch.float32, "BART, dropout 0.1, labels padded with -100", False)


def whisper() -> Sample:
    """Whisper: a convolutional audio encoder on log-mel frames and a text decoder."""
    torch.manual_seed(0)
    config = transformers.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=1,
                                        decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
                                        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
                                        max_target_positions=SEQ, decoder_start_token_id=1, pad_token_id=0,
                                        bos_token_id=1, eos_token_id=2)
    model = transformers.WhisperForConditionalGeneration(config).train()
    mel = torch.randn(BATCH, 16, 32)
    labels = torch.randint(3, VOCAB, (BATCH, 8))
    return Sample("whisper", model, (mel, labels), lambda m, x, y: m(input_features=x, labels=y).loss,
                  lambda m, x, y: m(input_features=x, labels=y).logits, torch.float32,
                  "Whisper, 16 mel bins x 32 frames", False)


def segformer() -> Sample:
    """SegFormer: a hierarchical vision transformer with per-pixel labels (stochastic depth: random)."""
    torch.manual_seed(0)
    config = transformers.SegformerConfig(num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                          hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                                          num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32,
                                          num_labels=4)
    model = transformers.SegformerForSemanticSegmentation(config).train()
    x = torch.randn(BATCH, 3, 32, 32)
    labels = torch.randint(0, 4, (BATCH, 32, 32))
    return Sample("segformer", model, (x, labels), lambda m, x, y: m(pixel_values=x, labels=y).loss,
                  lambda m, x, *_: m(pixel_values=x).logits, torch.float32,
                  "SegFormer, 2 stages, drop path 0.1", False)


def _ctc_from_logits(module: nn.Module, audio: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' CTC loss written for padded labels (its own ``labels=`` path reads ``labels.max()``
    and selects by a mask: shapes that depend on values, which a capture cannot follow)."""
    log_probs = module(audio).logits.log_softmax(-1).transpose(0, 1)
    lengths = torch.full((labels.shape[0],), log_probs.shape[0], dtype=torch.long)
    return nn.functional.ctc_loss(log_probs, labels.clamp_min(0), lengths, (labels >= 0).sum(-1),
                                  reduction="sum", zero_infinity=True) / labels.shape[0]


def wav2vec2_ctc() -> Sample:
    """wav2vec2 with a CTC head, layer drop (0.1) and dropouts as configured by default: it imports
    with ``--fix-random-reads`` (no layer dropped), or names ``layerdrop`` in one line without it."""
    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(vocab_size=12, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                         conv_kernel=(10, 3), num_conv_pos_embeddings=8,
                                         num_conv_pos_embedding_groups=2, mask_time_prob=0.0)
    labels = torch.randint(1, 12, (BATCH, 6))
    labels[1, 4:] = labels[3, 2:] = -100
    return Sample("wav2vec2_ctc", transformers.Wav2Vec2ForCTC(config).train(), (torch.randn(BATCH, 800), labels),
                  _ctc_from_logits, lambda m, x, *_: m(x).logits, torch.float32,
                  "wav2vec2 + CTC, layer drop 0.1 (fixed: no layer dropped)", False)


FACTORIES = {f.__name__: f for f in (gpt2_untied, llama_tied, bloom, mpt, mamba, bart, whisper, segformer,
                                     wav2vec2_ctc)}
FIXED_DRAWS = {"wav2vec2_ctc"}  # imported with --fix-random-reads (layer drop)

__all__ = ["FACTORIES", "FIXED_DRAWS", *FACTORIES]

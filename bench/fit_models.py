"""Realistic training steps for ``magis fit`` (``bench/fit.py``): published configs, random init
on fake tensors (nothing is downloaded or allocated), all dropouts 0 and the KV cache off.

    magis fit bench/fit_models.py:whisper_small_b16 --device rtx3090 --time-budget 30
    magis fit bench/fit_models.py:openllama_3b_b4 --adam 1e-4 --device rtx3090 --time-budget 30

Each factory returns a :class:`sample_graphs.sample.Sample` (``module``, ``inputs``, ``loss_fn``),
as ``magis import`` expects of a model file; the third model of ``bench/fit.py`` is a graph file,
``bench/results/sd_unet.train.json.gz`` (Stable Diffusion's UNet training step).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

from sample_graphs.sample import Sample  # noqa: E402
from sample_graphs.transformers_models import _construct, _tokens, causal_lm_forward, causal_lm_loss  # noqa: E402

SD_UNET_GRAPH = "bench/results/sd_unet.train.json.gz"  # relative to the repository root


def _llama(name: str, desc: str, batch: int, seq: int, **config: object) -> Sample:
    cfg = transformers.LlamaConfig(vocab_size=32000, max_position_embeddings=2048, use_cache=False, **config)
    module = _construct(transformers.LlamaForCausalLM, cfg, torch.bfloat16)
    ids, labels = _tokens(batch, seq, cfg.vocab_size)
    return Sample(name, module, (ids, labels), causal_lm_loss, causal_lm_forward, torch.bfloat16, desc, True)


def tinyllama_b4() -> Sample:
    """TinyLlama-1.1B's config (22 layers, hidden 2048, SwiGLU 5632, 32 query heads sharing 4
    key/value heads, vocab 32000), bf16, batch 4 x 1024 tokens, causal-LM loss."""
    return _llama("tinyllama_1b_b4x1024", "TinyLlama-1.1B config, bf16, batch 4 x 1024, causal-LM loss", 4, 1024,
                  hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                  num_key_value_heads=4)


def openllama_3b_b4() -> Sample:
    """OpenLLaMA-3B's config (26 layers, hidden 3200, SwiGLU 8640, 32 heads, vocab 32000), bf16,
    batch 4 x 1024 tokens, causal-LM loss.  With ``--adam`` its weights, gradients, Adam's two
    moments and the update's new weights and moments alone are 44.7 GiB: nothing fits a 24 GiB card."""
    return _llama("openllama_3b_b4x1024", "OpenLLaMA-3B config, bf16, batch 4 x 1024, causal-LM loss", 4, 1024,
                  hidden_size=3200, intermediate_size=8640, num_hidden_layers=26, num_attention_heads=32,
                  num_key_value_heads=32)


def _whisper_loss(module: nn.Module, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The library's own loss: cross-entropy of the decoder's logits against ``labels`` (the decoder
    reads ``labels`` shifted right)."""
    return module(input_features=features, labels=labels).loss


def _whisper_forward(module: nn.Module, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return module(input_features=features, labels=labels).logits


def _whisper_small(batch: int) -> Sample:
    config = transformers.WhisperConfig(
        vocab_size=51865, num_mel_bins=80, d_model=768, encoder_layers=12, decoder_layers=12,
        encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
        max_source_positions=1500, max_target_positions=448, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, use_cache=False)
    module = _construct(transformers.WhisperForConditionalGeneration, config, torch.float32)
    features = torch.randn(batch, config.num_mel_bins, 2 * config.max_source_positions)
    labels = torch.randint(0, config.vocab_size, (batch, config.max_target_positions))
    return Sample(f"whisper_small_b{batch}", module, (features, labels), _whisper_loss, _whisper_forward,
                  torch.float32, f"Whisper-small, fp32, batch {batch}: 80 mel bins x 3000 frames, 448 label tokens",
                  True)


def whisper_small_b8() -> Sample:
    """Whisper-small's config (12 encoder + 12 decoder layers, d_model 768, 12 heads, FFN 3072, vocab
    51865), fp32, batch 8: 80 mel bins x 3000 frames (30 s of audio) and 448 label tokens each,
    the library's cross-entropy loss."""
    return _whisper_small(8)


def whisper_small_b16() -> Sample:
    """:func:`whisper_small_b8` at batch 16: its eager step does not fit a 24 GiB card, its plans do."""
    return _whisper_small(16)

"""Transformer workloads built from Hugging Face ``transformers`` configs (random init, no hub access).

BERT-base (masked LM), ViT-base (image classification), GPT-Neo-1.3B and a BTLM-3B-like Llama
model (causal LM). All dropouts are 0, attention is the "eager" (plain matmul + softmax) kernel and
the KV cache is off. The two big language models use bfloat16 parameters, as in the MAGIS paper.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import transformers
from torch import nn

from core.frontend.workload import no_random_init_on_fake_tensors

from .sample import Sample


def _logits(out: object) -> torch.Tensor:
    return out.logits  # type: ignore[attr-defined]


def mlm_forward(module: nn.Module, input_ids: torch.Tensor, *labels: torch.Tensor) -> torch.Tensor:
    """MLM logits ``[batch, seq, vocab]``; label inputs are ignored."""
    return _logits(module(input_ids=input_ids))


def mlm_loss(module: nn.Module, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Masked-LM-style cross-entropy of every position's logits against ``labels`` (float32)."""
    logits = _logits(module(input_ids=input_ids))
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


def _causal_lm_logits(module: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    # An explicit all-ones attention mask (no padding), as a tokenizer would give. Without one,
    # transformers' eager attention inspects position_ids for packed sequences with a
    # data-dependent ``.all()``; the frontend then traces the model in torch.export's tracing
    # state instead (a different graph), so the samples keep the mask their graphs were made with.
    mask = torch.ones_like(input_ids)
    return _logits(module(input_ids=input_ids, attention_mask=mask, use_cache=False))


def causal_lm_forward(module: nn.Module, input_ids: torch.Tensor, *labels: torch.Tensor) -> torch.Tensor:
    """Next-token logits ``[batch, seq, vocab]``; label inputs are ignored."""
    return _causal_lm_logits(module, input_ids)


def causal_lm_loss(module: nn.Module, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Shifted causal-LM cross-entropy: logits at position t predict ``labels[:, t+1]`` (float32)."""
    logits = _causal_lm_logits(module, input_ids)
    shift = logits[:, :-1, :].float()
    return F.cross_entropy(shift.reshape(-1, shift.shape[-1]), labels[:, 1:].reshape(-1))


def image_forward(module: nn.Module, pixel_values: torch.Tensor, *labels: torch.Tensor) -> torch.Tensor:
    """Class logits ``[batch, num_labels]``; label inputs are ignored."""
    return _logits(module(pixel_values=pixel_values))


def image_loss(module: nn.Module, pixel_values: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the class logits against ``labels``."""
    return F.cross_entropy(_logits(module(pixel_values=pixel_values)), labels)


def _construct(cls: type[nn.Module], config: object, dtype: torch.dtype) -> nn.Module:
    """``cls(config)`` with floating-point parameters created directly in ``dtype``, in train mode.

    Like ``from_pretrained(..., dtype=...)`` this sets torch's default dtype while the model is built
    (no ``.to(dtype)`` afterwards, which would need a second copy and fails on fake tensors);
    buffers created with an explicit dtype, e.g. the RoPE frequencies, keep it.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with no_random_init_on_fake_tensors():
            module = cls(config)
    finally:
        torch.set_default_dtype(previous)
    return module.train()


def _drop_bias_alias(module: nn.Module) -> None:
    """Unregister ``cls.predictions.bias``, a second name of ``cls.predictions.decoder.bias``.

    transformers ties the two (checkpoint compatibility); forward only uses the decoder's. A
    parameter registered under two names makes ``aot_export_module`` fail on the joint graph
    ("Found a parameter that did not receive a gradient"); the model is otherwise unchanged.
    """
    head = module.cls.predictions  # type: ignore[union-attr]
    if head.bias is head.decoder.bias:
        del head.bias


def _tokens(batch: int, seq: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and random labels, both in ``[0, vocab)``."""
    ids = torch.randint(0, vocab, (batch, seq))
    labels = torch.randint(0, vocab, (batch, seq))
    return ids, labels


def build_bert(name: str, tiny: bool) -> Sample:
    """BertForMaskedLM: BertConfig() defaults, batch 32, seq 512; tiny: 2x32 hidden, vocab 100, batch 2, seq 16."""
    kw: dict[str, object] = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                             "attn_implementation": "eager"}
    if tiny:
        kw.update(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  vocab_size=100, max_position_embeddings=64)
        batch, seq = 2, 16
        desc = "BERT tiny (BertForMaskedLM): 2 layers, hidden 32, 2 heads, vocab 100, batch 2, seq 16, MLM loss"
    else:
        batch, seq = 32, 512
        desc = ("BERT-base (BertForMaskedLM): 12 layers, hidden 768, 12 heads, vocab 30522, batch 32, "
                "seq 512, MLM loss on every position")
    config = transformers.BertConfig(**kw)
    module = _construct(transformers.BertForMaskedLM, config, torch.float32)
    _drop_bias_alias(module)
    ids, labels = _tokens(batch, seq, config.vocab_size)
    return Sample(name, module, (ids, labels), mlm_loss, mlm_forward, torch.float32, desc, not tiny)


def build_vit(name: str, tiny: bool) -> Sample:
    """ViTForImageClassification: ViTConfig() defaults, 1000 labels, batch 64; tiny: 2x32, 32px, patch 8."""
    kw: dict[str, object] = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                             "attn_implementation": "eager"}
    if tiny:
        kw.update(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  image_size=32, patch_size=8, num_labels=10)
        batch = 2
        desc = "ViT tiny: 2 layers, hidden 32, 2 heads, patch 8, batch 2, 3x32x32, 10 classes"
    else:
        kw.update(num_labels=1000)
        batch = 64
        desc = "ViT-base/16: 12 layers, hidden 768, 12 heads, patch 16, batch 64, 3x224x224, 1000 classes"
    config = transformers.ViTConfig(**kw)
    module = _construct(transformers.ViTForImageClassification, config, torch.float32)
    size = config.image_size
    x = torch.randn(batch, config.num_channels, size, size)
    y = torch.randint(0, config.num_labels, (batch,))
    return Sample(name, module, (x, y), image_loss, image_forward, torch.float32, desc, not tiny)


def build_gpt_neo(name: str, tiny: bool) -> Sample:
    """GPTNeoForCausalLM 1.3B (bf16), batch 32, seq 512; tiny: 2 layers (global+local), hidden 32, fp32."""
    kw: dict[str, object] = {"embed_dropout": 0.0, "attention_dropout": 0.0, "resid_dropout": 0.0,
                             "attn_implementation": "eager", "use_cache": False}
    if tiny:
        kw.update(hidden_size=32, num_layers=2, num_heads=2, attention_types=[[["global", "local"], 1]],
                  window_size=8, vocab_size=100, max_position_embeddings=64, bos_token_id=99, eos_token_id=99)
        batch, seq, dtype = 2, 16, torch.float32
        desc = ("GPT-Neo tiny: 2 layers (global + local attention, window 8), hidden 32, 2 heads, vocab 100, "
                "batch 2, seq 16, fp32, causal-LM loss")
    else:
        kw.update(hidden_size=2048, num_layers=24, num_heads=16, attention_types=[[["global", "local"], 12]],
                  window_size=256, vocab_size=50257, max_position_embeddings=2048)
        batch, seq, dtype = 32, 512, torch.bfloat16
        desc = ("GPT-Neo-1.3B: 24 layers alternating global/local attention (window 256), hidden 2048, "
                "16 heads, vocab 50257, bf16, batch 32, seq 512, causal-LM loss")
    config = transformers.GPTNeoConfig(**kw)
    module = _construct(transformers.GPTNeoForCausalLM, config, dtype)
    ids, labels = _tokens(batch, seq, config.vocab_size)
    return Sample(name, module, (ids, labels), causal_lm_loss, causal_lm_forward, dtype, desc, not tiny)


def build_btlm(name: str, tiny: bool) -> Sample:
    """BTLM-3B-like LlamaForCausalLM (BTLM's width/depth, bf16), batch 32, seq 512; tiny: 2 layers, fp32."""
    kw: dict[str, object] = {"attention_dropout": 0.0, "attn_implementation": "eager", "use_cache": False,
                             "tie_word_embeddings": True}
    if tiny:
        kw.update(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  intermediate_size=88, vocab_size=100, max_position_embeddings=64)
        batch, seq, dtype = 2, 16, torch.float32
        desc = ("BTLM-like tiny (Llama-style config): 2 layers, hidden 32, 4 heads, SwiGLU 88, vocab 100, "
                "batch 2, seq 16, fp32, causal-LM loss")
    else:
        kw.update(hidden_size=2560, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                  intermediate_size=6826, vocab_size=50257, max_position_embeddings=2048)
        batch, seq, dtype = 32, 512, torch.bfloat16
        desc = ("BTLM-3B-like: Llama-style config (RoPE, RMSNorm, SwiGLU) with BTLM-3B-8K's width/depth "
                "(32 layers, hidden 2560, 32 heads, MLP 6826, vocab 50257, tied embeddings); BTLM itself "
                "uses ALiBi and SwiGLU in GPT-2-style LayerNorm blocks. bf16, batch 32, seq 512, causal-LM loss")
    config = transformers.LlamaConfig(**kw)
    module = _construct(transformers.LlamaForCausalLM, config, dtype)
    ids, labels = _tokens(batch, seq, config.vocab_size)
    return Sample(name, module, (ids, labels), causal_lm_loss, causal_lm_forward, dtype, desc, not tiny)

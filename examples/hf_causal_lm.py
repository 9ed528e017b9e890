"""Bring your own model: a Hugging Face ``transformers`` causal LM, built from its config.

    magis import examples/hf_causal_lm.py:build -o llama.json.gz
    magis verify examples/hf_causal_lm.py:build

A factory returns an object with ``module``, ``inputs`` (example tensors) and ``loss_fn(module,
*inputs)``; ``forward_fn(module, *inputs)`` is optional (``magis import --forward``).  The model
is called as a training loop calls it -- token ids only, the library computes the shifted
next-token loss from ``labels`` -- and nothing is downloaded: the weights are random.
``magis import`` calls the factory on fake tensors, so the same file with a 7B-parameter config
imports without allocating the weights.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402


class CausalLM:
    """A causal LM trained on random token ids of shape ``[batch, seq]``."""

    def __init__(self, config: transformers.PretrainedConfig, batch: int = 8, seq: int = 128) -> None:
        self.module = transformers.AutoModelForCausalLM.from_config(config).train()
        self.inputs = (torch.randint(0, config.vocab_size, (batch, seq)),)
        self.name = f"{config.model_type}_b{batch}_s{seq}"

    @staticmethod
    def loss_fn(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=input_ids, labels=input_ids).loss

    @staticmethod
    def forward_fn(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=input_ids).logits


def build() -> CausalLM:
    """A small Llama: 2 layers, hidden 64, 4 query heads sharing 2 key/value heads (GQA), trained on 8
    sequences of 128 tokens.  At this size the activations are most of the peak (12.7 MiB, against
    0.8 MiB of weights and gradients: ``magis info``'s resident floor is 0.06x), so remat, fission
    and re-ordering have room to work; with a batch of 2 x 16 tokens weights and gradients are 0.97x
    of the peak and no activation plan can save more than 3%."""
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return CausalLM(config)


def build_gpt2() -> CausalLM:
    """A small GPT-2 (its LM head shares the token embedding's weight)."""
    config = transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128,
                                     bos_token_id=0, eos_token_id=0)
    return CausalLM(config)

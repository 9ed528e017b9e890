"""Mixed precision: a training step under bf16 autocast (weights float32, compute in bfloat16).

    magis import examples/bf16_autocast.py:build -o llama_bf16.json.gz
    magis optimize llama_bf16.json.gz --memory-limit 0.6 --time-budget 10 -o llama_bf16.plan.json
    magis verify examples/bf16_autocast.py:build --plan llama_bf16.plan.json --rtol 1.6e-2

Autocast lives where PyTorch users put it: around the forward and the loss, inside ``loss_fn``.
The importer records what autocast does as ordinary aten calls -- a ``_to_copy`` of each float32
weight and activation to bfloat16 before a matmul, convolution or attention, which then run in
bfloat16, and a cast back to float32 where autocast computes in float32 (softmax, the loss) -- so
the graph keeps float32 master weights and float32 gradients while its activations are bfloat16,
and the plans, the exported script and the step API run exactly that.  Autocast acts on one device
type: the loss functions below take it from their inputs' device (``cpu`` while ``magis import``
captures on fake CPU tensors, ``cuda`` when the step API trains on a GPU); a hard-coded
``torch.autocast("cuda", ...)`` casts nothing in a capture on the CPU.

A plan that splits a matmul (fission) sums its bfloat16 products in another order than eager
PyTorch, so its gradients differ from eager's by bfloat16 rounding (a few 1e-3 of each tensor's
scale): verify it with bfloat16's tolerance (``--rtol 1.6e-2``, torch.testing's for bfloat16).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

AUTOCAST_DTYPE = torch.bfloat16


class CausalLM:
    """A causal LM on random token ids ``[batch, seq]``, its forward and loss under bf16 autocast."""

    def __init__(self, config: transformers.PretrainedConfig, batch: int = 4, seq: int = 32) -> None:
        self.module = transformers.AutoModelForCausalLM.from_config(config).train()
        self.inputs = (torch.randint(0, config.vocab_size, (batch, seq)),)
        self.name = f"{config.model_type}_bf16_autocast_b{batch}_s{seq}"

    @staticmethod
    def loss_fn(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        with torch.autocast(input_ids.device.type, dtype=AUTOCAST_DTYPE):
            return model(input_ids=input_ids, labels=input_ids).loss


class SmallCNN(nn.Module):
    """Two convolutions with batch norm, global pooling and a linear classifier."""

    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1, stride=2), nn.BatchNorm2d(2 * channels), nn.ReLU())
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))


class Classifier:
    """``SmallCNN`` on random images ``[batch, 3, size, size]`` and labels, under bf16 autocast."""

    def __init__(self, batch: int = 8, size: int = 16, classes: int = 10) -> None:
        self.module = SmallCNN(classes=classes).train()
        self.inputs = (torch.randn(batch, 3, size, size), torch.randint(0, classes, (batch,)))
        self.name = f"cnn_bf16_autocast_b{batch}_{size}px"

    @staticmethod
    def loss_fn(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with torch.autocast(images.device.type, dtype=AUTOCAST_DTYPE):
            return nn.functional.cross_entropy(model(images), labels)


def build() -> CausalLM:
    """A tiny Llama (2 layers, hidden 32, 4 query heads sharing 2 key/value heads)."""
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return CausalLM(config)


def build_gpt2() -> CausalLM:
    """A tiny GPT-2 (its LM head shares the token embedding's weight), dropout off."""
    config = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=0, eos_token_id=0)
    return CausalLM(config)


def build_cnn() -> Classifier:
    return Classifier()

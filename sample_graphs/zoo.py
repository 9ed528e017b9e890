"""A model zoo nobody tuned the optimizer for: families beyond the samples, as users build them.

Each entry is a ``transformers`` or ``diffusers`` model built from its config class (random weights,
nothing downloaded), with the library's default attention (``F.scaled_dot_product_attention``
wherever the family supports it) and its usual training loss, at a realistic training size and as a
tiny variant that runs in a second on the CPU (``build(name, tiny=True)``: the tests verify each
tiny variant's exported script against eager PyTorch).  Dropout is off everywhere (a random op
blocks fission and recomputation, ``ops.node_draws_random``; the comparison is about the rest).

``bench/zoo.py`` imports the full sizes under fake tensors and compares MAGIS with every peer and
baseline on them.  Language models train in bfloat16 (as the samples GPT-Neo-1.3B and BTLM-3B), the
vision and diffusion models in float32; the tiny variants all in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import transformers
from torch import nn

from .sample import Sample
from .transformers_models import _construct, causal_lm_forward, causal_lm_loss, image_forward, image_loss

TINY_BATCH, TINY_SEQ, TINY_VOCAB = 2, 16, 100


@dataclass(frozen=True)
class ZooModel:
    name: str
    family: str  # the library's model family (its config class)
    kind: str  # "causal LM", "seq2seq", "vision", "diffusion"
    build: Callable[[str, bool], Sample]
    size: str  # the full size, in words


def _lm(cls_name: str, full: dict, tiny: dict, batch: int, seq: int, desc: str) -> Callable[[str, bool], Sample]:
    """A causal LM of ``transformers.<cls_name>ForCausalLM`` with its ``Config``: ``full`` / ``tiny``
    config overrides; full size in bfloat16 at ``batch`` x ``seq`` tokens."""

    def build(name: str, tiny_: bool) -> Sample:
        config_cls = getattr(transformers, f"{cls_name}Config")
        model_cls = getattr(transformers, f"{cls_name}ForCausalLM")
        kw = {"use_cache": False, **(tiny if tiny_ else full)}
        config = config_cls(**kw)
        for attr in ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attention_probs_dropout_prob",
                     "hidden_dropout_prob", "dropout", "resid_dropout", "embed_dropout", "activation_dropout",
                     "attention_dropout_prob", "ffn_dropout"):
            if isinstance(getattr(config, attr, None), float):
                setattr(config, attr, 0.0)
        dtype = torch.float32 if tiny_ else torch.bfloat16
        module = _construct(model_cls, config, dtype)
        b, s = (TINY_BATCH, TINY_SEQ) if tiny_ else (batch, seq)
        ids = torch.randint(0, config.vocab_size, (b, s))
        labels = torch.randint(0, config.vocab_size, (b, s))
        what = f"{cls_name} tiny, fp32, batch {b}, seq {s}" if tiny_ else f"{desc}, bf16, batch {b}, seq {s}"
        return Sample(name, module, (ids, labels), causal_lm_loss, causal_lm_forward, dtype,
                      f"{what}, causal-LM loss", not tiny_)

    return build


def _tiny_lm(**extra) -> dict:
    return {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
            "vocab_size": TINY_VOCAB, "max_position_embeddings": 64, **extra}


def _t5(name: str, tiny: bool) -> Sample:
    """T5 (encoder-decoder), teacher-forced cross-entropy (``labels=``: the decoder's inputs are
    the labels shifted right)."""
    if tiny:
        config = transformers.T5Config(vocab_size=TINY_VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                       num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                                       decoder_start_token_id=0, pad_token_id=0)
        b, src, tgt, dtype = TINY_BATCH, TINY_SEQ, 8, torch.float32
    else:  # t5-base
        config = transformers.T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12,
                                       num_decoder_layers=12, num_heads=12, dropout_rate=0.0,
                                       decoder_start_token_id=0, pad_token_id=0)
        b, src, tgt, dtype = 16, 512, 128, torch.bfloat16
    module = _construct(transformers.T5ForConditionalGeneration, config, dtype)
    ids = torch.randint(1, config.vocab_size, (b, src))
    labels = torch.randint(1, config.vocab_size, (b, tgt))
    desc = ("T5 tiny, fp32" if tiny else "T5-base (12+12 layers, d 768), bf16") + f", batch {b}, {src} -> {tgt} tokens"
    return Sample(name, module, (ids, labels), _t5_loss, _t5_forward, dtype, desc + ", seq2seq cross-entropy", not tiny)


def _t5_loss(module: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = module(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def _t5_forward(module: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return module(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).logits


def _vision(cls_name: str, full: dict, tiny: dict, batch: int, desc: str) -> Callable[[str, bool], Sample]:
    """An image classifier ``transformers.<cls_name>ForImageClassification`` at 224 x 224, fp32."""

    def build(name: str, tiny_: bool) -> Sample:
        config = getattr(transformers, f"{cls_name}Config")(**(tiny if tiny_ else full))
        for attr in ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate", "dropout_rate",
                     "classifier_dropout_prob", "drop_connect_rate"):
            if isinstance(getattr(config, attr, None), float):
                setattr(config, attr, 0.0)
        module = _construct(getattr(transformers, f"{cls_name}ForImageClassification"), config, torch.float32)
        size = getattr(config, "image_size", 224) if tiny_ else 224
        b = TINY_BATCH if tiny_ else batch
        x = torch.randn(b, config.num_channels, size, size)
        y = torch.randint(0, config.num_labels, (b,))
        what = f"{cls_name} tiny, batch {b}, {size}x{size}" if tiny_ else f"{desc}, batch {b}, 224x224"
        return Sample(name, module, (x, y), image_loss, image_forward, torch.float32,
                      f"{what}, fp32, {config.num_labels} classes, cross-entropy", not tiny_)

    return build


def _noise_loss(module: nn.Module, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor,
                noise: torch.Tensor) -> torch.Tensor:
    """A denoiser's training loss: MSE of the predicted noise (``.sample``) against the noise."""
    return F.mse_loss(_denoise(module, x, t, cond), noise)


def _denoise(module: nn.Module, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, *rest: torch.Tensor):
    if cond.is_floating_point():  # text embeddings: a UNet2DConditionModel
        return module(x, t, encoder_hidden_states=cond).sample
    return module(x, timestep=t, class_labels=cond).sample  # class labels: a DiT


def _sd_unet(name: str, tiny: bool) -> Sample:
    """diffusers' UNet2DConditionModel with Stable Diffusion 1.x's config (320/640/1280/1280
    channels, cross-attention on 77 x 768 text embeddings), 64 x 64 latents."""
    from diffusers import UNet2DConditionModel

    if tiny:
        kw = dict(sample_size=8, block_out_channels=(16, 32), layers_per_block=1, cross_attention_dim=16,
                  attention_head_dim=4, norm_num_groups=8,
                  down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                  up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
        b, size, ctx = TINY_BATCH, 8, (4, 16)
    else:
        kw = dict(sample_size=64, block_out_channels=(320, 640, 1280, 1280), layers_per_block=2,
                  cross_attention_dim=768, attention_head_dim=8)
        b, size, ctx = 8, 64, (77, 768)
    module = _construct_plain(lambda: UNet2DConditionModel(**kw))
    x, noise = torch.randn(b, 4, size, size), torch.randn(b, 4, size, size)
    t = torch.randint(0, 1000, (b,))
    cond = torch.randn(b, *ctx)
    desc = ("UNet2DConditionModel tiny (16/32 channels)" if tiny else
            "Stable Diffusion 1.x UNet (diffusers UNet2DConditionModel, 860M parameters)") + \
        f", fp32, batch {b}, 4x{size}x{size} latents, noise-prediction MSE"
    return Sample(name, module, (x, t, cond, noise), _noise_loss, _denoise, torch.float32, desc, not tiny)


def _dit(name: str, tiny: bool) -> Sample:
    """diffusers' DiTTransformer2DModel (a transformer denoiser, adaLN-zero, class-conditional):
    DiT-B/2 on 32 x 32 latents."""
    from diffusers import DiTTransformer2DModel

    if tiny:
        kw = dict(num_attention_heads=2, attention_head_dim=8, in_channels=4, num_layers=2, sample_size=8,
                  patch_size=2, num_embeds_ada_norm=10)
        b, size, classes = TINY_BATCH, 8, 10
    else:
        kw = dict(num_attention_heads=12, attention_head_dim=64, in_channels=4, num_layers=12, sample_size=32,
                  patch_size=2, num_embeds_ada_norm=1000)
        b, size, classes = 32, 32, 1000
    module = _construct_plain(lambda: DiTTransformer2DModel(**kw))
    x = torch.randn(b, 4, size, size)
    t = torch.randint(0, 1000, (b,))
    y = torch.randint(0, classes, (b,))
    noise = torch.randn(b, module.config.out_channels or 4, size, size)
    desc = ("DiT tiny" if tiny else "DiT-B/2 (diffusers DiTTransformer2DModel, 12 layers, 768 wide)") + \
        f", fp32, batch {b}, 4x{size}x{size} latents, noise-prediction MSE"
    return Sample(name, module, (x, t, y, noise), _noise_loss, _denoise, torch.float32, desc, not tiny)


def _construct_plain(make: Callable[[], nn.Module]) -> nn.Module:
    from core.frontend.workload import no_random_init_on_fake_tensors

    with no_random_init_on_fake_tensors():
        return make().train()


def _moe(**extra) -> dict:
    return {"num_local_experts": 8, "num_experts_per_tok": 2, **extra}


ZOO: list[ZooModel] = [
    ZooModel("opt", "OPT", "causal LM", _lm(
        "OPT", dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=32, ffn_dim=8192, vocab_size=50272,
                    max_position_embeddings=2048, word_embed_proj_dim=2048),
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, vocab_size=TINY_VOCAB,
             max_position_embeddings=64, word_embed_proj_dim=32), 4, 1024, "OPT-1.3B"), "OPT-1.3B"),
    ZooModel("gpt_neox", "GPTNeoX", "causal LM", _lm(
        "GPTNeoX", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                        vocab_size=50304, max_position_embeddings=2048),
        _tiny_lm(), 8, 1024, "Pythia-410M (GPT-NeoX)"), "Pythia-410M"),
    ZooModel("falcon", "Falcon", "causal LM", _lm(
        "Falcon", dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=32, vocab_size=50304,
                       multi_query=True, parallel_attn=True, new_decoder_architecture=False, bias=False,
                       alibi=False),
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=TINY_VOCAB, multi_query=True,
             parallel_attn=True, new_decoder_architecture=False, bias=False, alibi=False), 4, 1024,
        "Falcon-1B-like (multi-query, parallel attention)"), "Falcon, 1.3B"),
    ZooModel("phi", "Phi", "causal LM", _lm(
        "Phi", dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=32, intermediate_size=8192,
                    vocab_size=51200, partial_rotary_factor=0.5),
        _tiny_lm(partial_rotary_factor=0.5), 4, 1024, "Phi-1.5 (1.4B)"), "Phi-1.5"),
    ZooModel("phi3", "Phi3", "causal LM", _lm(
        "Phi3", dict(hidden_size=1536, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
                     intermediate_size=6144, vocab_size=32064, max_position_embeddings=4096),
        _tiny_lm(num_key_value_heads=4, pad_token_id=0), 4, 1024, "Phi-3-style 0.6B"), "Phi-3-style, 0.6B"),
    ZooModel("gemma", "Gemma", "causal LM", _lm(
        "Gemma", dict(hidden_size=2048, num_hidden_layers=18, num_attention_heads=8, num_key_value_heads=1,
                      head_dim=256, intermediate_size=16384, vocab_size=256000),
        _tiny_lm(num_key_value_heads=1, head_dim=8), 2, 1024, "Gemma-2B"), "Gemma-2B"),
    ZooModel("gemma2", "Gemma2", "causal LM", _lm(
        "Gemma2", dict(hidden_size=2304, num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                       head_dim=256, intermediate_size=9216, vocab_size=256000, sliding_window=4096),
        _tiny_lm(num_key_value_heads=2, head_dim=8, sliding_window=8), 2, 1024, "Gemma2-2B"), "Gemma2-2B"),
    ZooModel("mixtral", "Mixtral", "causal LM", _lm(
        "Mixtral", _moe(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
                        intermediate_size=2048, vocab_size=32000),
        _tiny_lm(**_moe(num_key_value_heads=2)), 4, 1024, "Mixtral-style MoE (8 experts, top 2, 1.1B)"),
        "Mixtral-style, 8 experts"),
    ZooModel("qwen2_moe", "Qwen2Moe", "causal LM", _lm(
        "Qwen2Moe", dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
                         intermediate_size=2816, moe_intermediate_size=704, shared_expert_intermediate_size=2816,
                         num_experts=16, num_experts_per_tok=4, vocab_size=32000),
        _tiny_lm(moe_intermediate_size=16, shared_expert_intermediate_size=32, num_experts=4,
                 num_experts_per_tok=2, num_key_value_heads=4), 4, 1024,
        "Qwen2-MoE-style (16 experts, top 4, shared expert)"), "Qwen2-MoE-style, 16 experts"),
    ZooModel("t5", "T5", "seq2seq", _t5, "T5-base"),
    ZooModel("convnext", "ConvNext", "vision", _vision(
        "ConvNext", dict(depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768], num_labels=1000),
        dict(depths=[1, 1], hidden_sizes=[8, 16], num_stages=2, num_labels=10, image_size=32), 64, "ConvNeXt-T"),
        "ConvNeXt-T"),
    ZooModel("swin", "Swin", "vision", _vision(
        "Swin", dict(embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7, num_labels=1000),
        dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
             num_labels=10), 64, "Swin-T"), "Swin-T"),
    ZooModel("deit", "DeiT", "vision", _vision(
        "DeiT", dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536,
                     num_labels=1000),
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
             patch_size=8, num_labels=10), 128, "DeiT-S/16"), "DeiT-S"),
    ZooModel("resnet18", "ResNet", "vision", _vision(
        "ResNet", dict(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], num_labels=1000),
        dict(layer_type="basic", depths=[1, 1], hidden_sizes=[8, 16], embedding_size=8, num_labels=10,
             image_size=32), 128, "ResNet-18"), "ResNet-18"),
    ZooModel("mobilenetv2", "MobileNetV2", "vision", _vision(
        "MobileNetV2", dict(num_labels=1000),
        dict(depth_multiplier=0.25, num_labels=10, image_size=32), 128, "MobileNetV2 1.0"), "MobileNetV2"),
    ZooModel("efficientnet", "EfficientNet", "vision", _vision(
        "EfficientNet", dict(width_coefficient=1.0, depth_coefficient=1.0, image_size=224, hidden_dim=1280,
                             num_labels=1000),  # B0 (the config's defaults are B7's)
        dict(width_coefficient=0.1, depth_coefficient=0.1, num_labels=10, image_size=32, hidden_dim=128), 64,
        "EfficientNet-B0"), "EfficientNet-B0"),
    ZooModel("regnet", "RegNet", "vision", _vision(
        "RegNet", dict(num_labels=1000),
        dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8, num_labels=10,
             image_size=32), 128, "RegNet-Y-like (the config's defaults)"), "RegNet"),
    ZooModel("sd_unet", "UNet2DCondition", "diffusion", _sd_unet, "SD-1.x UNet"),
    ZooModel("dit", "DiTTransformer2D", "diffusion", _dit, "DiT-B/2"),
]
BY_NAME = {m.name: m for m in ZOO}
NAMES = [m.name for m in ZOO]


def build(name: str, tiny: bool = False) -> Sample:
    """The zoo model ``name`` (``NAMES``), full size or its tiny variant, built now (call it under
    ``core.frontend.workload.build_fake`` for a full size: nothing is allocated)."""
    if name not in BY_NAME:
        raise ValueError(f"unknown zoo model {name!r}; known: {', '.join(NAMES)}")
    return BY_NAME[name].build(name + ("_tiny" if tiny else ""), tiny)


__all__ = ["BY_NAME", "NAMES", "ZOO", "ZooModel", "build"]

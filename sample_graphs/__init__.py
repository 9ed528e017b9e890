"""Sample workloads for MAGIS Studio: model definitions, example inputs and losses (no weights).

``build(name)`` returns a :class:`Sample`:

* ``module`` - the ``nn.Module`` (random init, dropout 0, ``train()`` mode);
* ``inputs`` - example inputs, the positional arguments of ``loss_fn`` / ``forward_fn``
  (``input_0, input_1, ...``); labels/targets needed by the loss are inputs too, e.g.
  ``(pixels, labels)`` or ``(input_ids, labels)``, and integer inputs are in a valid range;
* ``loss_fn(module, *inputs)`` - a scalar loss; the training graph is forward + this loss;
* ``forward_fn(module, *inputs)`` - the forward output (label inputs are ignored);
* ``dtype``, a one-line ``description`` and ``full_size`` (True for the paper-size workloads).

``NAMES`` lists every sample: the MAGIS paper's evaluation set at paper sizes (``resnet50``,
``bert_base``, ``vit_base``, ``unet``, ``unetpp``, ``gpt_neo_1_3b``, ``btlm_3b``), a small float32
variant of each (``*_tiny``) and two toy graphs after the paper's figures (``fig2_skip``,
``fig6_ftree``). ``build`` seeds torch with 0, so it is deterministic, and it only uses ordinary
constructors and ``torch.randn``/``randint``: called inside
``torch._subclasses.fake_tensor.FakeTensorMode()`` it allocates nothing, which is how the
multi-billion-parameter models should be built::

    with FakeTensorMode():
        s = sample_graphs.build("btlm_3b")
    loss = s.loss_fn(s.module, *s.inputs)  # shape propagation only
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported by ``build`` only: listing names and paths stays instant
    import torch

    from .sample import Sample

__all__ = ["FORWARD_NAMES", "NAMES", "Sample", "build"]

# name -> (builder module, builder function, small variant?); builders are called as fn(name, small)
_REGISTRY: dict[str, tuple[str, str, bool]] = {
    "resnet50": ("resnet", "build_resnet", False),
    "resnet50_tiny": ("resnet", "build_resnet", True),
    "bert_base": ("transformers_models", "build_bert", False),
    "bert_tiny": ("transformers_models", "build_bert", True),
    "vit_base": ("transformers_models", "build_vit", False),
    "vit_tiny": ("transformers_models", "build_vit", True),
    "unet": ("unet", "build_unet", False),
    "unet_tiny": ("unet", "build_unet", True),
    "unetpp": ("unetpp", "build_unetpp", False),
    "unetpp_tiny": ("unetpp", "build_unetpp", True),
    "gpt_neo_1_3b": ("transformers_models", "build_gpt_neo", False),
    "gpt_neo_tiny": ("transformers_models", "build_gpt_neo", True),
    "btlm_3b": ("transformers_models", "build_btlm", False),
    "btlm_tiny": ("transformers_models", "build_btlm", True),
    "fig2_skip": ("toy", "build_fig2", True),
    "fig6_ftree": ("toy", "build_fig6", True),
}

NAMES: list[str] = sorted(_REGISTRY)

# inference models -- the CNNs for layer fusion (``magis fuse``) and the graph-substitution
# benchmark's CNNs and RNNs: forward graphs only, no loss, so they are not among ``NAMES`` (whose
# samples all have training graphs); ``build`` knows them too
_FORWARD_REGISTRY: dict[str, tuple[str, str, bool]] = {
    "efficientnet_b3": ("fusion_cnns", "build_fusion_cnn", False),
    "mobilenet_v2": ("fusion_cnns", "build_fusion_cnn", False),
    "resnet152": ("fusion_cnns", "build_fusion_cnn", False),
    # graph-substitution benchmark of OCGGS (Fang et al. 2020): BN kept, RNNs unrolled
    "inception_v3": ("ocggs_nets", "build_ocggs_net", False),
    "resnext50": ("ocggs_nets", "build_ocggs_net", False),
    "sru": ("ocggs_nets", "build_ocggs_net", False),
    "nasrnn": ("ocggs_nets", "build_ocggs_net", False),
}
FORWARD_NAMES: list[str] = sorted(_FORWARD_REGISTRY)


def __getattr__(attr: str) -> Any:
    if attr == "Sample":
        from .sample import Sample

        return Sample
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def build(name: str, device: str | torch.device = "cpu") -> Sample:
    """Build sample ``name`` on ``device`` (seeded, so deterministic); ValueError for unknown names."""
    entry = _REGISTRY.get(name) or _FORWARD_REGISTRY.get(name)
    if entry is None:
        raise ValueError(f"unknown sample {name!r}; valid names: {', '.join(NAMES)}")
    import torch

    module_name, fn_name, tiny = entry
    # builders are imported lazily: ``import sample_graphs`` stays cheap (no transformers import)
    builder: Callable[[str, bool], Sample] = getattr(importlib.import_module(f"{__name__}.{module_name}"), fn_name)
    torch.manual_seed(0)
    # parameters, buffers and inputs are created on ``device`` directly (no ``.to()`` copies)
    with torch.device(device):
        return builder(name, tiny)

"""Model files as users write them (``magis import path/model.py:factory``): a file that defines a
dataclass (its module must be in ``sys.modules`` while it runs, as ``import`` makes it) and a file
that imports a sibling module of its folder both load and capture."""

from __future__ import annotations

from app.specs import capture_spec, load_factory

DATACLASS_FILE = '''
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Workload:
    module: nn.Module
    inputs: tuple

    @staticmethod
    def loss_fn(module, x):
        return module(x).square().mean()


def build():
    return Workload(nn.Sequential(nn.Linear(8, 4), nn.ReLU()), (torch.randn(2, 8),))
'''

SIBLING_FILE = '''
import torch
from my_layers import make


class Workload:
    def __init__(self):
        self.module, self.inputs = make(), (torch.randn(2, 8),)

    @staticmethod
    def loss_fn(module, x):
        return module(x).sum()


def build():
    return Workload()
'''


def test_a_model_file_with_a_dataclass_loads_and_captures(tmp_path):
    f = tmp_path / "dc_model.py"
    f.write_text(DATACLASS_FILE)
    w = load_factory(f"{f}:build")()
    assert type(w).__dataclass_fields__.keys() == {"module", "inputs"}
    g = capture_spec(f"{f}:build")
    assert any(n.op == "aten.addmm.default" for n in g.ops())


def test_a_model_file_imports_its_folders_modules(tmp_path):
    (tmp_path / "my_layers.py").write_text("from torch import nn\n\ndef make():\n    return nn.Linear(8, 3)\n")
    f = tmp_path / "sibling_model.py"
    f.write_text(SIBLING_FILE)
    g = capture_spec(f"{f}:build")
    assert [t.shape for t in (g.tensor(r) for r in g.output_refs()) if t.shape == (3, 8)]

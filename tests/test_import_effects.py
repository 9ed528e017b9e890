"""Importing the product changes nothing outside it: torch's fake-kernel table is touched only while a
capture traces (``fake_kernels.capture_kernels``), and the HuggingFace offline switches are set by
``magis``'s ``main`` -- not by importing the CLI, the app or the samples."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
import os
from torch._subclasses import fake_impls
table = list(fake_impls.op_implementations_checks)
import core.frontend.torch_import, core.search.compare, app.cli, app.main
import sample_graphs.zoo, sample_graphs.heldout, sample_graphs.transformers_models
assert fake_impls.op_implementations_checks == table, "the fake-kernel table changed on import"
env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
assert env == {"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None}, env
print("clean")
"""


def test_importing_the_product_leaves_torch_and_the_environment_as_they_were():
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    p = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "clean", p.stderr[-2000:]


def test_magis_main_sets_the_offline_switches(monkeypatch):
    from app.cli import main

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert main(["info", "fig2_skip"]) == 0
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["TRANSFORMERS_OFFLINE"] == "1"

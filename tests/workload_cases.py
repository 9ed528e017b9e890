"""A tiny workload prepared once for many transformed graphs: captured on real tensors, its inputs
by the script's keys and its eager outputs (shared by the round-trip tests of the rules)."""

from __future__ import annotations

import torch

from app.specs import build_workload
from core.codegen.verify import capture_real, eager_outputs, graph_inputs, problems, verify_graph
from core.frontend.workload import workload_fns
from core.ir.graph import Graph
from core.schedule import get_scheduler

TINY = ["bert_tiny", "vit_tiny", "gpt_neo_tiny", "btlm_tiny", "resnet50_tiny", "unet_tiny", "unetpp_tiny"]


def _to(w, dtype: torch.dtype):
    """The workload with its module and floating-point inputs in ``dtype``."""
    w.module.to(dtype)
    w.inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in w.inputs)
    return w


class Case:
    """``dtype=torch.float64`` checks transformations that change the order of floating-point
    operations (fission sums parts, normalises slices): the tiny models are so ill-conditioned in
    float32 that a 1e-6 change of one weight moves some gradients by 30%; in float64 a reordering
    stays far inside rtol 1e-4.  Rules that keep every operation (remat, swap) run in float32."""

    def __init__(self, name: str, dtype: torch.dtype | None = None) -> None:
        def build():
            w = build_workload(name, 0)
            return _to(w, dtype) if dtype is not None else w

        w = build()
        self.g = capture_real(w, name=name, rebuild=build)
        loss_fn, forward_fn = workload_fns(w)
        self.tensors = graph_inputs(self.g, w.module, tuple(w.inputs))
        torch.manual_seed(0)
        self.ref = eager_outputs(self.g, w.module, tuple(w.inputs), loss_fn, forward_fn)
        self.checked = 0
        self.worst_peak_ratio = 1.0

    def verify(self, h: Graph, what: str) -> dict:
        return self.verify_order(h, get_scheduler("traced").run(h).order, what)

    def verify_order(self, h: Graph, order: list[int], what: str) -> dict:
        h.lint()
        res = verify_graph(h, order, self.tensors, self.ref, schedule=what, details=True)
        assert problems(res) == [], (what, problems(res))
        assert "loss" in res and res["compared"] > 1  # the loss and the gradients
        self.checked += 1
        r = res["peak_ratio"]
        if abs(r - 1) > abs(self.worst_peak_ratio - 1):
            self.worst_peak_ratio = r
        return res

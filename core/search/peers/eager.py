"""PyTorch eager: the imported graph as traced, no rule applied, in the order PyTorch ran it.
Every peak and latency ratio in a comparison is against this point."""

from __future__ import annotations

from ...simulate import simulate
from ..plan import Plan
from .base import Method
from .common import traced_order


class Eager(Method):
    name = "eager"
    label = "PyTorch eager"
    colour = "#111827"
    symbol = "x"
    family = "baseline"
    paper = "PyTorch eager execution (the traced order)"

    def _run(self, g, cost, *, time_budget, progress, **options):
        order = traced_order(g)
        sim = simulate(g, order, cost)
        return [Plan(self.name, [], order, sim.metrics(), "traced order")], []

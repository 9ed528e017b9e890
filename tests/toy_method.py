"""A toy method, written as a new method is: one file, then one ``register_method`` line.  Its one
point is PyTorch's traced order with one Clone (``toy_rule``) of the first op's output."""

from __future__ import annotations

from core.ir.graph import NodeKind
from core.search.peers.base import Method
from core.search.peers.common import traced_order
from core.search.plan import Plan
from core.simulate import simulate
from core.transform.registry import get_rule
from core.transform.rule import Application


class ToyOrder(Method):
    name = "toy_order"
    label = "Toy order"
    colour = "#123456"
    symbol = "cross"
    family = "peer"
    paper = "a test of the registries"

    def _run(self, g, cost, *, time_budget, progress, **options):
        h = g.copy()
        a, b = next((n.id, u) for n in h.ops() for u in h.users(n.id) if h.nodes[u].kind == NodeKind.OP)
        app = Application("toy_clone", (a, b))
        get_rule(app.rule).apply(h, app)
        order = traced_order(h)
        return [Plan(self.name, [app], order, simulate(h, order, cost).metrics(), "clone of the first op")], []

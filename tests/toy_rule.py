"""A toy rule, written as a new rule is: one file, then one ``register_rule`` line.

Clone(A, B): B reads ``aten.clone(A)`` instead of A's output 0 (the same values, one more copy of
the tensor: a rule that only costs, which is all the registry test needs)."""

from __future__ import annotations

import copy
from collections.abc import Iterable

from core.ir.graph import Graph, NodeKind, TRef
from core.transform.names import tensor_and_user
from core.transform.rule import Application, Rule, RuleNotApplicable, RuleOption, Where


class ToyClone(Rule):
    name = "toy_clone"
    family = "toy"
    text = "Toy clone: a reader reads a clone of the tensor"
    option = RuleOption("--toy-clone", "TENSOR:USER", "USER reads a clone of TENSOR")

    def from_text(self, g: Graph, text: str, *, where: Where | None = None, ftree=None) -> Application:
        ref, b = tensor_and_user(g, text, self.option.flag)
        return Application(self.name, (ref.node, b))

    def match(self, g: Graph, hot: Iterable[TRef], where: Where | None = None) -> list[Application]:
        return [Application(self.name, (r.node, b)) for r in sorted(set(hot)) if r.index == 0
                for b in g.users(r.node) if g.nodes[b].kind == NodeKind.OP]

    def edit(self, g: Graph, app: Application) -> None:
        a, b = app.params
        if a not in g.nodes or b not in g.users(a):
            raise RuleNotApplicable(f"{app}: node {b} does not read node {a}")
        out = copy.copy(g.nodes[a].outputs[0])
        out.alias = None
        dup = g.add_node(name=f"{g.nodes[a].name}_toy_clone_{g.new_id()}", op="aten.clone.default",
                         kind=NodeKind.OP, args=(TRef(a, 0),), kwargs={}, outputs=[out])
        g.replace_input(b, TRef(a, 0), TRef(dup.id, 0))

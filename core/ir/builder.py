"""Small graphs by hand, for tests and the notes' worked examples.

Sizes are in bytes (uint8 tensors of shape (size,)); ops are abstract (``op="synthetic"``: they
simulate and schedule, but have no aten semantics)::

    b = GraphBuilder()
    x = b.input("x", 4)
    a = b.op("A", [x], 8)
    y = b.op("B", [a], 2, output=True)
    g = b.graph
"""

from __future__ import annotations

from .graph import Graph, NodeKind, TensorKind, TensorMeta, TRef


class GraphBuilder:
    def __init__(self, name: str = "hand") -> None:
        self.graph = Graph(name, {"mode": "synthetic"})
        self._n_inputs = 0

    def input(self, name: str, size: int, kind: TensorKind = TensorKind.INPUT) -> TRef:
        target = f"input:{self._n_inputs}" if kind == TensorKind.INPUT else f"param:{name}"
        self._n_inputs += kind == TensorKind.INPUT
        n = self.graph.add_node(name=name, op="placeholder", kind=NodeKind.PLACEHOLDER,
                                outputs=[TensorMeta((size,), "uint8", kind)], target=target)
        return TRef(n.id, 0)

    def weight(self, name: str, size: int) -> TRef:
        return self.input(name, size, TensorKind.WEIGHT)

    def op(self, name: str, inputs: list[TRef], sizes: int | list[int], output: bool = False,
           view_of: TRef | None = None, module: str = "") -> TRef:
        """Add an op; ``sizes`` is one size or a list (several outputs); ``view_of`` makes output 0 a
        view of that tensor (no new bytes)."""
        sizes = [sizes] if isinstance(sizes, int) else list(sizes)
        outs = [TensorMeta((s,), "uint8", TensorKind.ACTIVATION) for s in sizes]
        if view_of is not None:
            outs[0].alias = view_of
        n = self.graph.add_node(name=name, op="synthetic", args=list(inputs), outputs=outs, module=module)
        if output:
            self.graph.outputs[f"output_{len(self.graph.outputs)}"] = TRef(n.id, 0)
        return TRef(n.id, 0)

    def ids(self, *names: str) -> list[int]:
        return [self.graph.by_name(n).id for n in names]

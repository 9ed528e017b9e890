"""Graph IR: nodes, tensors, aliasing, the ops registry and JSON io."""

from .graph import (
    DTYPE_BYTES,
    FissionSpec,
    Graph,
    GraphError,
    Node,
    NodeKind,
    TensorKind,
    TensorMeta,
    TorchConst,
    TRef,
    kahn_order,
    map_refs,
)
from .io import load, loads, save

__all__ = [
    "DTYPE_BYTES", "FissionSpec", "Graph", "GraphError", "Node", "NodeKind", "TensorKind",
    "TensorMeta", "TorchConst", "TRef", "kahn_order", "map_refs", "load", "loads", "save",
]

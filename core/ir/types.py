"""The value types of the graph IR: tensor metadata, edges, node kinds and the graph error."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class TensorKind(StrEnum):
    INPUT = "input"
    WEIGHT = "weight"
    ACTIVATION = "activation"
    GRADIENT = "gradient"
    OPTIMIZER_STATE = "optimizer_state"
    OUTPUT = "output"


class NodeKind(StrEnum):
    PLACEHOLDER = "placeholder"
    OP = "op"
    FISSION = "fission"
    STORE = "store"
    LOAD = "load"


DTYPE_BYTES: dict[str, float] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "uint64": 8, "uint32": 4, "uint16": 2,  # CUDA flash attention's RNG state is uint64
    "complex64": 8, "complex128": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
}


class GraphError(ValueError):
    """A graph is malformed (bad file, cycle, missing shape, dangling edge...)."""


@dataclass(frozen=True, order=True)
class TRef:
    """Reference to output ``index`` of node ``node`` -- an edge of the graph."""

    node: int
    index: int = 0

    def __repr__(self) -> str:
        return f"%{self.node}" if self.index == 0 else f"%{self.node}.{self.index}"


@dataclass
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str
    kind: TensorKind = TensorKind.ACTIVATION
    alias: TRef | None = None  # the tensor whose storage this one shares (a view)
    device: str = "device"  # "device" (accelerator memory) or "host" (swapped out)
    storage_bytes: int | None = None  # when the op's storage is larger than the tensor (see ops)

    def __post_init__(self) -> None:
        self.shape = tuple(int(s) for s in self.shape)
        if self.dtype not in DTYPE_BYTES:
            raise GraphError(f"unknown dtype {self.dtype!r}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def nbytes(self) -> int:
        """Bytes of this tensor's own storage (0 for a view: it shares its base's)."""
        if self.alias is not None:
            return 0
        if self.storage_bytes is not None:
            return self.storage_bytes
        return int(self.numel * self.itemsize)

    @property
    def logical_bytes(self) -> int:
        return int(self.numel * self.itemsize)


@dataclass(frozen=True)
class TorchConst:
    """A torch constant in op arguments: ("dtype", "float32"), ("layout", "strided"),
    ("memory_format", "contiguous_format") or ("device", "cpu")."""

    kind: str
    value: str

    def __repr__(self) -> str:
        return f"torch.{self.value}" if self.kind != "device" else f"device({self.value!r})"


COMBINES = ("cat", "sum")  # how the parts of a fission output are merged


def map_refs(obj: Any, fn) -> Any:
    """Rebuild an args structure with every TRef replaced by ``fn(ref)``."""
    if isinstance(obj, TRef):
        return fn(obj)
    if isinstance(obj, list):
        return [map_refs(x, fn) for x in obj]
    if isinstance(obj, tuple):
        return tuple(map_refs(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: map_refs(v, fn) for k, v in obj.items()}
    return obj

"""Measured per-op latency on the local device (CPU here, CUDA where present), cached on disk.

Each distinct op signature (op, input shapes/dtypes, constant arguments) is run on random inputs a
few times; the median is stored in a JSON cache keyed by device name, so a second run of the same
workload costs nothing.  Ops that cannot run on random inputs fall back to the analytic model.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import torch

from ..ir.graph import Graph, Node, NodeKind, TRef
from ..ir.torch_bridge import materialize, resolve_op, torch_dtype
from .devices import DeviceProfile, get_device
from .model import AnalyticCost, CostModel


def default_cache_dir() -> Path:
    return Path(os.environ.get("MAGIS_CACHE", Path.home() / ".cache" / "magis"))


class MeasuredCost(CostModel):
    def __init__(self, device: str | None = None, cache_dir: str | os.PathLike | None = None,
                 repeats: int = 5, fallback: str | DeviceProfile = "cpu") -> None:
        self.torch_device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = get_device(fallback) if isinstance(fallback, str) else fallback
        self.repeats = repeats
        name = torch.cuda.get_device_name() if self.torch_device == "cuda" else "cpu"
        self.path = Path(cache_dir or default_cache_dir()) / f"op-times-{name.replace(' ', '_')}.json"
        self._times: dict[str, float] = {}
        if self.path.exists():
            try:
                self._times = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError):
                self._times = {}
        self._analytic = AnalyticCost(self.device)
        self._dirty = 0
        self.failures: dict[str, str] = {}

    def key(self, g: Graph, node: Node) -> str:
        ins = [(g.tensor(r).shape, g.tensor(r).dtype) for r in node.inputs()]
        consts = repr([a for a in node.args if not isinstance(a, TRef)]) + repr(sorted(node.kwargs.items()))
        return f"{node.op}|{ins}|{consts}"

    def node_time(self, g: Graph, node: Node) -> float:
        if node.kind == NodeKind.PLACEHOLDER:
            return 0.0
        if node.kind != NodeKind.OP:
            return self._analytic.node_time(g, node)
        k = self.key(g, node)
        if k not in self._times:
            t = self._measure(g, node)
            if t is None:
                return self._analytic.node_time(g, node)
            self._times[k] = t
            self._dirty += 1
            if self._dirty >= 50:
                self.save()
        return self._times[k]

    def _random(self, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
        dt = torch_dtype(dtype)
        if dt.is_floating_point:
            return torch.randn(shape, dtype=dt, device=self.torch_device)
        if dt == torch.bool:
            return torch.rand(shape, device=self.torch_device) > 0.5
        return torch.zeros(shape, dtype=dt, device=self.torch_device)  # valid indices everywhere

    def _measure(self, g: Graph, node: Node) -> float | None:
        vals = {r: self._random(g.tensor(r).shape, g.tensor(r).dtype) for r in node.inputs()}
        fn = resolve_op(node.op)
        try:
            args = materialize(node.args, vals.__getitem__, self.torch_device)
            kwargs = materialize(node.kwargs, vals.__getitem__, self.torch_device)
            fn(*args, **kwargs)
            times = []
            for _ in range(self.repeats):
                if self.torch_device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn(*args, **kwargs)
                if self.torch_device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)
        except Exception as e:  # any op failure on random data: fall back to the analytic model
            self.failures[node.op] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return None

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._times))
        os.replace(tmp, self.path)
        self._dirty = 0

    def __del__(self) -> None:
        try:
            if self._dirty:
                self.save()
        except Exception:
            pass

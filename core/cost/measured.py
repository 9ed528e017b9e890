"""Measured per-op latency on the local device (CPU here, CUDA where present), cached on disk.

Each distinct op signature (op, input shapes/dtypes, constant arguments) is run on random inputs:
one warm-up call, then ``repeats`` samples of ``k`` back-to-back calls each (``k`` chosen so that a
sample lasts at least ``min_sample`` seconds: a 3 us op is not timed by one ``perf_counter`` pair),
and the median sample / ``k`` is stored in a JSON cache keyed by the machine, with the op's roofline
features (class, FLOPs, bytes) so that calibration (``core.cost.calibrate``) can fit the analytic
model's constants to every op ever timed here.  A second run of the same workload measures nothing.

* Ops that cannot run on random inputs (or whose inputs exceed ``max_bytes``) fall back to the
  analytic model of ``fallback`` and are counted: ``fallbacks`` (lookups), ``failures`` (op -> why);
  the failure is cached too, so it is not retried on every lookup.
* Store/Load (swap) nodes: the copy of their bytes to host memory and back, timed like an op
  (pinned host memory on CUDA; on the CPU an ordinary copy, what the exported script does).
* Fission nodes: ``n`` times the measured ops of their sub-graph, plus the loop's slicing and
  combining (``model.fission_glue``, on the fallback profile's roofline).
* Views: timed like any op (a view costs its dispatch only: about a microsecond on the CPU).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..ir.graph import Graph, Node, NodeKind, TRef
from ..ir.torch_bridge import materialize, resolve_op, torch_dtype
from .devices import DeviceProfile, get_device
from .model import AnalyticCost, CostModel, fission_time, op_features
from .variants import kernel_variant

CACHE_VERSION = 3  # 3: records carry the kernel variant (core.cost.variants)
COPY_KINDS = (NodeKind.STORE, NodeKind.LOAD)


def default_cache_dir() -> Path:
    return Path(os.environ.get("MAGIS_CACHE", Path.home() / ".cache" / "magis"))


def local_torch_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def machine_name(torch_device: str) -> str:
    """The cache files' name of this machine's device: ``cpu`` or the CUDA device's name."""
    name = torch.cuda.get_device_name() if torch_device == "cuda" else "cpu"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def local_profile(torch_device: str | None = None) -> str:
    """The device profile (``devices.DEVICES``) that describes this machine's device: ``cpu``, or
    the profile whose GPU the CUDA device's name names (ValueError for a GPU without a profile)."""
    dev = torch_device or local_torch_device()
    if dev == "cpu":
        return "cpu"
    name = torch.cuda.get_device_name().lower()
    for key, profile in (("h100", "h100-sxm"), ("h200", "h100-sxm"), ("a100", "a100-80gb"), ("3090", "rtx3090")):
        if key in name:
            return profile
    raise ValueError(f"no device profile for {torch.cuda.get_device_name()!r}; measure on the CPU or add one")


def _sync(torch_device: str) -> None:
    if torch_device == "cuda":
        torch.cuda.synchronize()


def time_call(fn: Callable[[], Any], torch_device: str = "cpu", repeats: int = 5,
              min_sample: float = 2e-4, max_inner: int = 200) -> float:
    """Median seconds of one ``fn()`` call: a warm-up call, then ``repeats`` samples of ``k`` calls."""
    _sync(torch_device)
    t0 = time.perf_counter()
    fn()
    _sync(torch_device)
    first = time.perf_counter() - t0
    k = max(1, min(max_inner, int(min_sample / max(first, 1e-9))))
    samples = []
    for _ in range(repeats):
        _sync(torch_device)
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        _sync(torch_device)
        samples.append((time.perf_counter() - t0) / k)
    return statistics.median(samples)


def host_bandwidth(torch_device: str | None = None, nbytes: int = 64 << 20, repeats: int = 5) -> dict[str, Any]:
    """Bytes/s of a copy of ``nbytes`` from the device to host memory: ordinary (pageable) and
    pinned (``None`` where pinning is not available, as on a CPU-only build).  On the CPU both are
    a memory-to-memory copy: what the exported script's swap does there."""
    dev = torch_device or local_torch_device()
    x = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).fill_(1.0)
    out: dict[str, Any] = {"bytes": int(x.nbytes)}
    host = torch.empty(x.shape, dtype=x.dtype)
    out["pageable"] = x.nbytes / time_call(lambda: host.copy_(x), dev, repeats, min_sample=0.0)
    try:
        pinned = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
    except RuntimeError:
        out["pinned"] = None
    else:
        out["pinned"] = x.nbytes / time_call(lambda: pinned.copy_(x, non_blocking=dev == "cuda"), dev, repeats,
                                             min_sample=0.0)
    return out


class MeasuredCost(CostModel):
    """Seconds of each node timed on this machine (cached); the analytic model of ``fallback``
    (a profile or its name; default: this machine's profile) for what cannot be timed."""

    def __init__(self, device: str | None = None, cache_dir: str | os.PathLike | None = None,
                 repeats: int = 5, fallback: str | DeviceProfile | None = None,
                 max_bytes: int = 1 << 30, min_sample: float = 2e-4) -> None:
        self.torch_device = device or local_torch_device()
        fallback = fallback or local_profile(self.torch_device)
        self.device = get_device(fallback) if isinstance(fallback, str) else fallback
        self.repeats, self.max_bytes, self.min_sample = repeats, max_bytes, min_sample
        self.path = Path(cache_dir or default_cache_dir()) / f"op-times-{machine_name(self.torch_device)}.json"
        self._ops: dict[str, dict[str, Any]] = {}  # key -> {"t", "op", "cls", "flops", "bytes"}
        self._failed: dict[str, str] = {}  # key -> why it could not be timed
        self._load()
        self._analytic = AnalyticCost(self.device)
        self._dirty = 0
        self.measured = 0  # signatures timed by this object (not found in the cache)
        self.fallbacks = 0  # lookups answered by the analytic model
        self.failures: dict[str, str] = {}  # op -> why (the first failure of each op)

    # -- cache ------------------------------------------------------------------------------------
    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return
        if isinstance(data, dict) and data.get("version") == CACHE_VERSION:  # older caches are re-measured
            ops, failed = data.get("ops"), data.get("failed")
            if isinstance(ops, dict):
                self._ops = {k: v for k, v in ops.items()
                             if isinstance(v, dict) and isinstance(v.get("t"), (int, float))}
            if isinstance(failed, dict):
                self._failed = {k: str(v) for k, v in failed.items()}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": CACHE_VERSION, "device": machine_name(self.torch_device),
                                   "ops": self._ops, "failed": self._failed}))
        os.replace(tmp, self.path)
        self._dirty = 0

    @property
    def timed(self) -> int:
        """Signatures in the cache (not ``__len__``: callers test a cost model with ``cost or default``)."""
        return len(self._ops)

    def records(self) -> list[dict[str, Any]]:
        """Every timed signature: seconds ``t``, ``op``, roofline class ``cls``, ``flops``, ``bytes``,
        and the kernel ``variant`` torch ran where it picks one by shape."""
        return [dict(r, key=k) for k, r in self._ops.items()]

    # -- lookups ----------------------------------------------------------------------------------
    def key(self, g: Graph, node: Node) -> str:
        ins = [(g.tensor(r).shape, g.tensor(r).dtype) for r in node.inputs()]
        consts = repr([a for a in node.args if not isinstance(a, TRef)]) + repr(sorted(node.kwargs.items()))
        if node.kind in COPY_KINDS:
            return f"{node.kind.value}|{[(t.shape, t.dtype) for t in node.outputs]}"
        return f"{node.op}|{ins}|{consts}"

    def node_time(self, g: Graph, node: Node) -> float:
        if node.kind == NodeKind.PLACEHOLDER:
            return 0.0
        if node.kind == NodeKind.FISSION and node.fission is not None:
            return fission_time(self, node)
        if node.kind not in (NodeKind.OP, *COPY_KINDS):
            return self._analytic.node_time(g, node)
        k = self.key(g, node)
        rec = self._ops.get(k)
        if rec is not None:
            return float(rec["t"])
        if k not in self._failed:
            try:
                t = self._measure(g, node)
            except Exception as e:  # noqa: BLE001 -- any op failure on random data: the analytic model
                self._failed[k] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                self._dirty += 1
            else:
                cls, flops, nbytes = (("copy", 0.0, float(sum(t.logical_bytes for t in node.outputs)))
                                      if node.kind in COPY_KINDS else op_features(g, node))
                self._ops[k] = {"t": t, "op": node.op if node.kind == NodeKind.OP else node.kind.value,
                                "cls": cls, "flops": flops, "bytes": nbytes}
                variant = kernel_variant(g, node) if self.torch_device == "cpu" else None
                if variant:
                    self._ops[k]["variant"] = variant
                self.measured += 1
                self._dirty += 1
                if self._dirty >= 50:
                    self.save()
                return t
        self.fallbacks += 1
        self.failures.setdefault(node.op or node.kind.value, self._failed[k])
        return self._analytic.node_time(g, node)

    def measure_graph(self, g: Graph) -> int:
        """Time every op of ``g`` not yet in the cache (fission sub-graphs and copies included);
        returns how many were timed now."""
        before = self.measured
        for node in g.ops():
            self.node_time(g, node)
        return self.measured - before

    # -- timing -----------------------------------------------------------------------------------
    def _random(self, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
        dt = torch_dtype(dtype)
        if dt.is_floating_point:
            return torch.randn(shape, dtype=dt, device=self.torch_device)
        if dt == torch.bool:
            return torch.rand(shape, device=self.torch_device) > 0.5
        return torch.zeros(shape, dtype=dt, device=self.torch_device)  # valid indices everywhere

    def _measure(self, g: Graph, node: Node) -> float:
        size = sum(g.tensor(r).logical_bytes for r in node.inputs()) + sum(t.logical_bytes for t in node.outputs)
        if size > self.max_bytes:
            raise MemoryError(f"{size} bytes of inputs and outputs, more than the {self.max_bytes} timed here")
        if node.kind in COPY_KINDS:
            return self._measure_copy(node)
        vals = {r: self._random(g.tensor(r).shape, g.tensor(r).dtype) for r in node.inputs()}
        fn = resolve_op(node.op)
        args = materialize(node.args, vals.__getitem__, self.torch_device)
        kwargs = materialize(node.kwargs, vals.__getitem__, self.torch_device)
        return time_call(lambda: fn(*args, **kwargs), self.torch_device, self.repeats, self.min_sample)

    def _measure_copy(self, node: Node) -> float:
        """A Store (device -> host) or Load (host -> device) of the node's tensor, as the exported
        script's ``Swapper`` does it (pinned host memory on CUDA)."""
        t = node.outputs[0]
        cuda = self.torch_device == "cuda"
        dev_t = self._random(t.shape, t.dtype)
        host = torch.empty(t.shape, dtype=torch_dtype(t.dtype), pin_memory=cuda)
        if node.kind == NodeKind.STORE:
            fn = (lambda: host.copy_(dev_t, non_blocking=True)) if cuda else (lambda: dev_t.to("cpu", copy=True))
        else:
            fn = (lambda: dev_t.copy_(host, non_blocking=True)) if cuda else (lambda: host.to("cpu", copy=True))
        return time_call(fn, self.torch_device, self.repeats, self.min_sample)

    def __del__(self) -> None:
        try:
            if self._dirty:
                self.save()
        except Exception:  # noqa: BLE001 -- interpreter shutdown
            pass

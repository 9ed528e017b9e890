"""Named metrics: what a plan is measured by.

Every state of a search, every evaluated child, every plan and the Pareto archive carry a vector of
named metrics (``Metrics``: name -> value), not two fixed fields, so that a new system adds its
quantity with one ``register_metric`` line: SwapAdvisor's pool size, GET's DRAM traffic.  Lower is
better for every metric.  ``Objective`` (``search.moptimizer``) compares over them with MAGIS's
lexicographic rule, and a frontier (``search.pareto``) can be taken over any of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .fmt import format_bytes
from .registry import Registry

Metrics = Mapping[str, float]  # metric name -> value (a dict; lower is better)


@dataclass(frozen=True)
class Metric:
    """A quantity plans are compared by (lower is better)."""

    name: str  # key in every metrics vector and plan file
    label: str  # axis and column title
    unit: str  # "bytes" or "seconds"
    text: str  # what it measures

    def format(self, value: float) -> str:
        if self.unit == "bytes":
            return format_bytes(value)
        if self.unit == "seconds":
            return f"{value * 1e3:.2f} ms"
        return f"{value:g} {self.unit}".strip()


def _check_metric(name: str, m: Metric) -> None:
    if name != m.name:
        raise ValueError(f"metric {m.name!r} registered as {name!r}: a metric goes by its own name")


METRICS: Registry[Metric] = Registry("metric", check=_check_metric)


def register_metric(m: Metric) -> Metric:
    """Add ``m`` (ValueError if its name is taken)."""
    return METRICS.register(m.name, m)


PEAK = register_metric(Metric("peak", "peak memory", "bytes", "the simulated peak of device memory"))
LATENCY = register_metric(Metric("latency", "latency", "seconds", "the simulated time of one step"))
HOST_BYTES = register_metric(Metric("host_bytes", "host memory", "bytes",
                                    "the peak of host memory held by swapped tensors"))
DRAM = register_metric(Metric("dram", "DRAM traffic", "bytes",
                              "bytes a fusion plan moves between DRAM and the on-chip buffer (GET's F_D)"))


class HasMetrics:
    """``peak`` and ``latency`` read off a ``metrics`` vector (states, children, plans)."""

    __slots__ = ()
    metrics: Metrics

    @property
    def peak(self) -> int:
        """Simulated peak (bytes)."""
        return int(self.metrics["peak"])

    @property
    def latency(self) -> float:
        """Simulated latency (seconds)."""
        return float(self.metrics["latency"])


def get_metric(name: str) -> Metric:
    """The metric called ``name`` (ValueError listing the known ones for an unknown name)."""
    return METRICS.get(name)


def metrics(peak: int, latency: float, **others: float) -> dict[str, float]:
    """A metrics vector with the two every method reports, and ``others`` (registered names)."""
    for k in others:
        get_metric(k)
    return {"peak": int(peak), "latency": float(latency), **others}


__all__ = ["DRAM", "HOST_BYTES", "HasMetrics", "LATENCY", "METRICS", "PEAK", "Metric", "Metrics", "get_metric", "metrics",
           "register_metric"]

POOL_BYTES = register_metric(Metric("pool_bytes", "memory pool", "bytes",
                                    "SwapAdvisor's pool of size-class objects (with the residents) the device holds"))
__all__ += ["POOL_BYTES"]

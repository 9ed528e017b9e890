"""Cost models: device profiles, the analytic roofline, and measured timings with a disk cache."""

from __future__ import annotations

from .devices import DEFAULT_PROFILE, DEVICES, DeviceProfile, get_device
from .model import AnalyticCost, CostModel


def get_cost_model(device: str = "rtx3090", measured: bool = False, cache_dir: str | None = None) -> CostModel:
    """The analytic model of ``device``, or (``measured=True``) timings of the ops on this machine
    cached in ``cache_dir`` (imported only then: it needs torch)."""
    if measured:
        from .measured import MeasuredCost

        return MeasuredCost(cache_dir=cache_dir)
    return AnalyticCost(device)


__all__ = ["DEFAULT_PROFILE", "DEVICES", "DeviceProfile", "get_device", "AnalyticCost", "CostModel",
           "get_cost_model"]

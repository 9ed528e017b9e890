"""Cost models: device profiles, the analytic roofline, measured timings with a disk cache, and
calibration of the roofline's constants from them (``choice``: which one a user picks)."""

from __future__ import annotations

from .choice import COST_MODELS, DEFAULT_COST, check_cost, cost_device, make_cost
from .devices import DEFAULT_PROFILE, DEVICES, DeviceProfile, get_device
from .model import AnalyticCost, CostModel

__all__ = ["COST_MODELS", "DEFAULT_COST", "DEFAULT_PROFILE", "DEVICES", "DeviceProfile", "get_device",
           "AnalyticCost", "CostModel", "check_cost", "cost_device", "make_cost"]

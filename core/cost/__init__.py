"""Cost models: device profiles, the analytic roofline, and measured timings with a disk cache."""

from .devices import DEFAULT_DEVICE, DEVICES, DeviceProfile, get_device
from .model import AnalyticCost, CostModel, get_cost_model

__all__ = ["DEFAULT_DEVICE", "DEVICES", "DeviceProfile", "get_device", "AnalyticCost", "CostModel",
           "get_cost_model"]

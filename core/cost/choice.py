"""The cost models a user chooses between (``--cost`` of ``magis optimize`` / ``sweep``, the app).

* ``analytic``: the roofline of ``core.cost.model`` with a device profile's datasheet constants;
  any profile, no measurement (the default): eager PyTorch, one kernel per op.
* ``compiled``: the same roofline with Inductor's fusion (``core.cost.compiled``): what a step
  run under ``torch.compile`` costs; any profile.
* ``calibrated``: the same roofline with the constants fitted to op timings measured on this machine
  (``core.cost.calibrate``): the profile ``<profile>-calibrated`` saved in the cache directory; the
  first use times the graph's ops and fits it.
* ``measured``: each op's own timing on this machine (``core.cost.measured``, cached on disk); ops
  that cannot be timed use the calibrated roofline where there is one, else the datasheet's.

``calibrated`` and ``measured`` describe the machine at hand, so they take its profile (``cpu`` without a GPU); a
``device`` naming another profile is refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .devices import DEFAULT_PROFILE, get_device
from .model import AnalyticCost, CostModel

COST_MODELS: dict[str, str] = {
    "analytic": "roofline with the device profile's datasheet constants (no measurement): eager, one kernel per op",
    "compiled": "the analytic roofline with torch.compile's (Inductor's) fusion of pointwise, reduction and norm chains",
    "calibrated": "roofline with constants fitted to op timings measured on this machine (cached)",
    "measured": "each op timed on this machine (cached); ops that cannot run use the calibrated roofline",
}
DEFAULT_COST = "analytic"
DATASHEET = ("analytic", "compiled")  # the models that take any profile (no measurement)


def check_cost(name: str) -> str:
    """``name`` if it is a cost model, else ValueError naming the valid ones."""
    if name not in COST_MODELS:
        raise ValueError(f"unknown cost model {name!r}; known: {', '.join(COST_MODELS)}")
    return name


def cost_device(cost: str, device: str | None = None) -> str:
    """The device profile a cost model of kind ``cost`` describes: ``device`` (default: the default
    profile) for ``analytic``; this machine's profile for the measuring ones (ValueError when
    ``device`` names another)."""
    check_cost(cost)
    if cost in DATASHEET:
        return get_device(device or DEFAULT_PROFILE).name
    from .measured import local_profile

    here = local_profile()
    if device is not None and get_device(device).name != here:
        raise ValueError(f"the {cost} cost model times ops on this machine, whose profile is {here!r}, "
                         f"not {device!r}: choose the {here} profile, or the analytic cost model")
    return here


def make_cost(cost: str = DEFAULT_COST, device: str | None = None, graphs: Any = (),
              cache_dir: str | os.PathLike | None = None,
              say: Callable[[str], None] | None = None) -> CostModel:
    """The cost model ``cost`` for ``device`` (see :func:`cost_device`).  ``graphs``: what a missing
    calibration is fitted on (their ops are timed first); ``say``: progress lines."""
    base = cost_device(cost, device)
    if cost == "analytic":
        return AnalyticCost(base)
    if cost == "compiled":
        from .compiled import CompiledCost

        return CompiledCost(base)
    from .calibrate import calibrate, load_calibrated

    prof = load_calibrated(base, cache_dir)
    if cost == "calibrated":
        if prof is None:
            if say:
                say(f"calibrating the {base} profile: timing the graph's ops on this machine (cached for later runs)")
            prof, report = calibrate(base, list(graphs), cache_dir=cache_dir)
            if say:
                say(f"calibrated {base}: median op time error {_pct(report['median_abs_rel_error_before'])} -> "
                    f"{_pct(report['median_abs_rel_error_after'])} ({_pct(report.get('median_abs_rel_error_held_out'))} "
                    f"on op shapes held out of the fit), saved {report['path']}")
        return AnalyticCost(prof)
    from .measured import MeasuredCost

    if say:
        say("timing ops on this machine (cached for later runs)")
    return MeasuredCost(cache_dir=cache_dir, fallback=prof or get_device(base))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.0f}%"

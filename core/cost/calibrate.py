"""Calibration: the analytic model's constants fitted to measured op timings, per device profile.

The roofline of ``core.cost.model`` predicts, for an op of class ``compute`` (matmul, convolution)
or ``memory`` (everything else that launches a kernel) with F FLOPs and B bytes moved,

    t = c0 + max(F / P, B / W)        c0 = launch + half_time,  P = peak * e_c,  W = bandwidth * e_m

(``half_time`` adds the same constant to every op, so timings cannot tell it from the launch
overhead: a calibrated profile folds it into ``launch_overhead``), and for a view (no kernel)
t = ``view_overhead``.  :func:`fit` finds c0, P_compute, P_vector and W by least squares on
log(t_model) - log(t_measured) over every timed op (``scipy.optimize.least_squares``, two
starts: the base profile's constants and a guess from the data; a weak prior towards the base
constants keeps those the timings do not determine); the view constant is the geometric
mean of the views' timings (the least-squares answer in log space); the host bandwidth is measured
(``measured.host_bandwidth``) or fitted from timed Store/Load copies.  A class without timings
keeps the base profile's constant.  The result is a :class:`DeviceProfile` named
``<base>-calibrated``, saved as JSON next to the op-time cache.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .devices import DeviceProfile, get_device, profile_from_dict, profile_to_dict

MIN_T = 1e-9  # timings below this (a clock's resolution) are not used
PRIOR_WEIGHT = 1e-3  # residual weight of log(constant / base constant) per fitted constant


def _default_cache_dir() -> Path:
    return Path(os.environ.get("MAGIS_CACHE", Path.home() / ".cache" / "magis"))


def calibrated_name(base: str) -> str:
    return f"{base}-calibrated"


def profile_path(base: str, cache_dir: str | os.PathLike | None = None) -> Path:
    return Path(cache_dir or _default_cache_dir()) / f"profile-{calibrated_name(base)}.json"


def effective(p: DeviceProfile) -> dict[str, float]:
    """The constants the model actually uses: c0 (s), compute / vector FLOP/s, bandwidth (B/s), view (s)."""
    return {"c0": p.launch_overhead + p.half_time,
            "compute": p.matmul_peak("float32") * p.compute_efficiency,
            "vector": p.vector_flops * p.compute_efficiency,
            "bandwidth": p.mem_bandwidth * p.memory_efficiency,
            "view": p.view_overhead, "host_bandwidth": p.host_bandwidth}


def predict(consts: dict[str, float], cls: str, flops: float, nbytes: float) -> float:
    """The roofline's seconds for one op of class ``cls`` under the effective ``consts``."""
    if cls == "view":
        return consts["view"]
    if cls == "copy":
        return consts["c0"] + nbytes / consts["host_bandwidth"]
    peak = consts["compute"] if cls == "compute" else consts["vector"]
    return consts["c0"] + max(flops / peak, nbytes / consts["bandwidth"])


def log_errors(consts: dict[str, float], records: Iterable[dict[str, Any]]) -> np.ndarray:
    """log(predicted / measured) of every usable record."""
    out = [math.log(max(predict(consts, r["cls"], r["flops"], r["bytes"]), MIN_T) / r["t"])
           for r in records if r["t"] > MIN_T]
    return np.asarray(out, dtype=float)


def fit(records: Sequence[dict[str, Any]], base: DeviceProfile) -> tuple[dict[str, float], dict[str, Any]]:
    """Fitted effective constants (see :func:`effective`) and a report (counts per class, rms and
    median absolute log error before and after)."""
    from scipy.optimize import least_squares

    recs = [r for r in records if r["t"] > MIN_T and r.get("cls") in ("compute", "memory", "view", "copy")]
    consts = effective(base)
    by = {c: [r for r in recs if r["cls"] == c] for c in ("compute", "memory", "view", "copy")}
    kernels = by["compute"] + by["memory"]
    names = ["c0", "bandwidth"] + (["compute"] if by["compute"] else []) + (["vector"] if by["memory"] else [])
    if kernels:
        t = np.array([r["t"] for r in kernels])
        fl = np.array([r["flops"] for r in kernels])
        by_ = np.array([r["bytes"] for r in kernels])
        is_mm = np.array([r["cls"] == "compute" for r in kernels])

        def model(x: np.ndarray) -> np.ndarray:
            c = dict(zip(names, np.exp(x), strict=True))
            peak = np.where(is_mm, c.get("compute", consts["compute"]), c.get("vector", consts["vector"]))
            return c["c0"] + np.maximum(fl / peak, by_ / c["bandwidth"])

        prior = np.log([consts[n] for n in names])

        def resid(x: np.ndarray) -> np.ndarray:
            # a weak pull towards the base profile keeps a constant the timings cannot see (a peak
            # that no op reaches) where it was, instead of drifting to infinity along a flat valley
            return np.concatenate([np.log(model(x)) - np.log(t), PRIOR_WEIGHT * (x - prior)])

        # a data-driven start: c0 the fastest op, throughputs from the slowest ops' work per second
        guess = {"c0": float(np.min(t)), "bandwidth": float(np.max(by_ / t)),
                 "compute": float(np.max(np.where(is_mm, fl / t, 0.0))) or consts["compute"],
                 "vector": float(np.max(np.where(~is_mm, fl / t, 0.0))) or consts["vector"]}
        best = None
        for start in ({n: consts[n] for n in names}, {n: guess[n] for n in names}):
            x0 = np.log([max(start[n], 1e-30) for n in names])
            r = least_squares(resid, x0, method="trf", x_scale=1.0, max_nfev=2000)
            if best is None or r.cost < best.cost:
                best = r
        assert best is not None
        consts.update(dict(zip(names, map(float, np.exp(best.x)), strict=True)))
    if by["view"]:
        consts["view"] = float(np.exp(np.mean([math.log(r["t"]) for r in by["view"]])))
    if by["copy"]:
        # t = c0 + bytes / H with c0 fitted above: H from the copies' median bytes per extra second
        rates = [r["bytes"] / (r["t"] - consts["c0"]) for r in by["copy"] if r["t"] > consts["c0"] and r["bytes"]]
        if rates:
            consts["host_bandwidth"] = float(np.median(rates))
    before, after = log_errors(effective(base), recs), log_errors(consts, recs)
    report = {"records": {c: len(v) for c, v in by.items()},
              "rms_log_error_before": _rms(before), "rms_log_error_after": _rms(after),
              "median_abs_rel_error_before": _med_rel(before), "median_abs_rel_error_after": _med_rel(after)}
    return consts, report


def _rms(e: np.ndarray) -> float | None:
    return float(np.sqrt(np.mean(e**2))) if len(e) else None


def _med_rel(e: np.ndarray) -> float | None:
    return float(np.median(np.abs(np.expm1(e)))) if len(e) else None


def to_profile(base: DeviceProfile, consts: dict[str, float], report: dict[str, Any] | None = None) -> DeviceProfile:
    """``base`` with the fitted effective constants (efficiencies kept: the peaks absorb the fit;
    ``half_time`` folded into ``launch_overhead``)."""
    scale = consts["compute"] / (base.matmul_peak("float32") * base.compute_efficiency)
    extra = dict(base.extra)
    if report:
        extra.update({k: float(v) for k, v in report.items() if isinstance(v, (int, float))})
    return replace(base, name=calibrated_name(base.name),
                   matmul_flops={dt: v * scale for dt, v in base.matmul_flops.items()},
                   vector_flops=consts["vector"] / base.compute_efficiency,
                   mem_bandwidth=consts["bandwidth"] / base.memory_efficiency,
                   launch_overhead=consts["c0"], half_time=0.0, view_overhead=consts["view"],
                   host_bandwidth=consts["host_bandwidth"],
                   notes=f"{base.name} calibrated from measured op timings on this machine", extra=extra)


def save_profile(p: DeviceProfile, base: str, report: dict[str, Any], cache_dir: str | os.PathLike | None = None) -> Path:
    path = profile_path(base, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"base": base, "profile": profile_to_dict(p), "fit": report}, indent=1))
    os.replace(tmp, path)
    return path


def load_profile(path: str | os.PathLike) -> DeviceProfile:
    """A calibrated profile from its JSON file (ValueError: one line)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read a device profile ({type(e).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("profile"), dict):
        raise ValueError(f"{path}: not a calibrated device profile")
    return profile_from_dict(data["profile"])


def load_calibrated(base: str, cache_dir: str | os.PathLike | None = None) -> DeviceProfile | None:
    """The saved calibrated profile of ``base``, or None when this machine has none (or it is unreadable)."""
    path = profile_path(base, cache_dir)
    if not path.exists():
        return None
    try:
        return load_profile(path)
    except ValueError:
        return None


def calibrate(base: str, graphs: Iterable[Any] = (), cache_dir: str | os.PathLike | None = None,
              measured: Any = None, host: bool = True, save: bool = True) -> tuple[DeviceProfile, dict[str, Any]]:
    """Time the ops of ``graphs`` on this machine (added to the op-time cache), fit ``base``'s
    constants to every timing in the cache, measure the host copy bandwidth, and save the profile
    (``profile_path``).  ``measured``: a ``MeasuredCost`` to use (default: one on ``cache_dir``)."""
    from .measured import MeasuredCost, host_bandwidth

    prof = get_device(base)
    m = measured or MeasuredCost(cache_dir=cache_dir, fallback=prof)
    for g in graphs:
        m.measure_graph(g)
    m.save()
    consts, report = fit(m.records(), prof)
    if host:
        bw = host_bandwidth(m.torch_device)
        consts["host_bandwidth"] = float(bw["pinned"] or bw["pageable"])
        report["host_copy"] = bw
    report["fallbacks"] = dict(m.failures)
    p = to_profile(prof, consts, {k: v for k, v in report.items() if k.startswith(("rms", "median"))})
    if save:
        report["path"] = str(save_profile(p, base, report, cache_dir or m.path.parent))
    return p, report

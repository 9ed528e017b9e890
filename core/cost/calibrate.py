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
keeps the base profile's constant.

One roofline for every kernel is off by a factor per kind of op (on a CPU a convolution runs far
below the matmul peak and has a larger fixed cost; a max-pool is slower than its bytes say), so the
fit then refines, per ops category with at least ``MIN_GROUP`` timed signatures, per op and per
op's kernel variant where torch picks among kernels by shape (``core.cost.variants``), a pair
(c0, s): t = c0 + s * max(F / P, B / W), each pulled towards its parent's pair (a variant's towards
its op's, an op's towards its category's, a category's towards the global (c0, 1)) by a prior of
weight ``GROUP_PRIOR``.  These pairs are the profile's ``op_fits``; an op of a kind never timed keeps the global constants.  The report gives
the error before, after, and held out (each quarter of the signatures predicted by a fit to the
other three: what an op shape never timed can expect).  The result is a :class:`DeviceProfile`
named ``<base>-calibrated``, saved as JSON next to the op-time cache.
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

from .devices import DeviceProfile, fit_of, get_device, profile_from_dict, profile_to_dict

MIN_T = 1e-9  # timings below this (a clock's resolution) are not used
PRIOR_WEIGHT = 1e-3  # residual weight of log(constant / base constant) per fitted constant
MIN_GROUP = 3  # timed signatures an op (or a category) needs for a (c0, s) pair of its own
GROUP_PRIOR = 0.1  # residual weight of log(pair / parent pair): the least held-out error of 0.03-0.3
HELD_OUT_FOLDS = 4


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


def predict(consts: dict[str, float], cls: str, flops: float, nbytes: float,
            pair: tuple[float, float] | None = None) -> float:
    """The roofline's seconds for one op of class ``cls`` under the effective ``consts``; ``pair``:
    the op's own (c0, s) (``op_pair``), else the global c0 and 1."""
    if cls == "view":
        return consts["view"]
    if cls == "copy":
        return consts["c0"] + nbytes / consts["host_bandwidth"]
    c0, s = pair or (consts["c0"], 1.0)
    peak = consts["compute"] if cls == "compute" else consts["vector"]
    return c0 + s * max(flops / peak, nbytes / consts["bandwidth"])


def _category(op: str | None) -> str | None:
    from ..ir import ops

    d = ops.get(op) if op else None
    return d.category if d is not None else None


def op_pair(fits: dict[str, tuple[float, float]], op: str | None, variant: str | None = None
            ) -> tuple[float, float] | None:
    """An op's fitted (c0, s): its variant's, else its own, else its category's (the lookup of
    ``DeviceProfile.op_fit``)."""
    return fit_of(fits, op, _category(op), variant) if fits else None


def log_errors(consts: dict[str, Any], records: Iterable[dict[str, Any]]) -> np.ndarray:
    """log(predicted / measured) of every usable record (with ``consts["op_fits"]`` where fitted)."""
    fits = consts.get("op_fits") or {}
    out = [math.log(max(predict(consts, r["cls"], r["flops"], r["bytes"], op_pair(fits, r.get("op"), r.get("variant"))),
                        MIN_T)
                    / r["t"])
           for r in records if r["t"] > MIN_T]
    return np.asarray(out, dtype=float)


def fit_op_pairs(consts: dict[str, Any], records: Sequence[dict[str, Any]]
                 ) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """The roofline's throughputs refitted together with a (c0, s) pair per ops category, per op and
    per op's kernel variant (``core.cost.variants``) with at least ``MIN_GROUP`` kernel timings (one
    least squares in log space; each pair pulled towards its parent's: a variant's towards its op's,
    an op's towards its category's, a category's towards (c0, 1)).  Returns the refitted global
    constants and the pairs."""
    from scipy.optimize import least_squares

    kernels = [r for r in records if r["cls"] in ("compute", "memory") and r["t"] > MIN_T and r.get("op")]
    members: dict[str, list[int]] = {}  # group key -> records: categories, ops, ops' variants
    for i, r in enumerate(kernels):
        cat = _category(r["op"])
        if cat is not None:
            members.setdefault(f"category:{cat}", []).append(i)
        members.setdefault(r["op"], []).append(i)
        if r.get("variant"):
            members.setdefault(f"{r['op']}[{r['variant']}]", []).append(i)

    def level(k: str) -> int:
        return 0 if k.startswith("category:") else 2 if k.endswith("]") else 1

    groups = sorted((k for k, v in members.items() if len(v) >= MIN_GROUP), key=lambda k: (level(k), k))
    if not groups:
        return dict(consts), {}
    gi = {k: j for j, k in enumerate(groups)}
    owner = np.full(len(kernels), -1)
    for k in groups:  # categories, then ops, then variants: the most specific pair wins
        owner[members[k]] = gi[k]

    def parent_of(k: str) -> int:
        if level(k) == 2 and k.partition("[")[0] in gi:
            return gi[k.partition("[")[0]]
        return gi.get(f"category:{_category(k.partition('[')[0])}", -1) if level(k) else -1

    parent = np.array([parent_of(k) for k in groups])
    names = ["c0", "compute", "vector", "bandwidth"]
    t = np.log([r["t"] for r in kernels])
    fl = np.array([r["flops"] for r in kernels])
    nb = np.array([r["bytes"] for r in kernels])
    is_mm = np.array([r["cls"] == "compute" for r in kernels])
    x0 = np.concatenate([np.log([consts[n] for n in names]), np.tile([math.log(consts["c0"]), 0.0], len(groups))])
    prior = x0[:4].copy()
    has = owner >= 0

    def resid(x: np.ndarray) -> np.ndarray:
        c0, pc, pv, w = np.exp(x[:4])
        pairs = x[4:].reshape(-1, 2)
        lc0 = np.where(has, pairs[owner, 0], x[0])
        ls = np.where(has, pairs[owner, 1], 0.0)
        roof = np.maximum(fl / np.where(is_mm, pc, pv), nb / w)
        up = np.where(parent[:, None] >= 0, pairs[parent], [x[0], 0.0])
        return np.concatenate([np.log(np.exp(lc0) + np.exp(ls) * roof) - t,
                               GROUP_PRIOR * (pairs - up).ravel(), PRIOR_WEIGHT * (x[:4] - prior)])

    x = least_squares(resid, x0, method="trf", max_nfev=200 * len(x0)).x
    out = dict(consts)
    out.update(zip(names, map(float, np.exp(x[:4])), strict=True))
    return out, {k: (float(math.exp(x[4 + 2 * j])), float(math.exp(x[5 + 2 * j]))) for j, k in enumerate(groups)}


def fit(records: Sequence[dict[str, Any]], base: DeviceProfile, per_op: bool = True
        ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fitted effective constants (see :func:`effective`; with ``per_op`` also ``"op_fits"``, the
    per-category and per-op pairs) and a report (counts per class, rms and median absolute log error
    before and after)."""
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
    if per_op:  # before the copies' bandwidth, which takes the final c0
        consts, pairs = fit_op_pairs(consts, recs)
        consts["op_fits"] = pairs
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
              "median_abs_rel_error_before": median_rel_error(before), "median_abs_rel_error_after": median_rel_error(after)}
    if per_op:
        report["op_fits"] = len(consts["op_fits"])
    return consts, report


def held_out_errors(records: Sequence[dict[str, Any]], base: DeviceProfile, folds: int = HELD_OUT_FOLDS,
                    seed: int = 0) -> np.ndarray:
    """log(predicted / measured) of every record, each predicted by a fit (:func:`fit`) to the
    other folds' records: the error on op signatures the calibration has not seen."""
    import random

    recs = [r for r in records if r["t"] > MIN_T and r.get("cls") in ("compute", "memory", "view", "copy")]
    idx = list(range(len(recs)))
    random.Random(seed).shuffle(idx)
    out: list[float] = []
    for k in range(folds):
        test = set(idx[k::folds])
        consts, _ = fit([recs[i] for i in idx if i not in test], base)
        out.extend(log_errors(consts, [recs[i] for i in sorted(test)]))
    return np.asarray(out, dtype=float)


def _rms(e: np.ndarray) -> float | None:
    return float(np.sqrt(np.mean(e**2))) if len(e) else None


def median_rel_error(e: np.ndarray) -> float | None:
    return float(np.median(np.abs(np.expm1(e)))) if len(e) else None


def to_profile(base: DeviceProfile, consts: dict[str, Any], report: dict[str, Any] | None = None) -> DeviceProfile:
    """``base`` with the fitted effective constants (efficiencies kept: the peaks absorb the fit;
    ``half_time`` folded into ``launch_overhead``; the per-op pairs as ``op_fits``)."""
    scale = consts["compute"] / (base.matmul_peak("float32") * base.compute_efficiency)
    extra = dict(base.extra)
    if report:
        extra.update({k: float(v) for k, v in report.items() if isinstance(v, (int, float))})
    return replace(base, name=calibrated_name(base.name),
                   matmul_flops={dt: v * scale for dt, v in base.matmul_flops.items()},
                   vector_flops=consts["vector"] / base.compute_efficiency,
                   mem_bandwidth=consts["bandwidth"] / base.memory_efficiency,
                   launch_overhead=consts["c0"], half_time=0.0, view_overhead=consts["view"],
                   host_bandwidth=consts["host_bandwidth"], op_fits=dict(consts.get("op_fits") or {}),
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
    held = held_out_errors(m.records(), prof)
    report["rms_log_error_held_out"], report["median_abs_rel_error_held_out"] = _rms(held), median_rel_error(held)
    if host:
        bw = host_bandwidth(m.torch_device)
        consts["host_bandwidth"] = float(bw["pinned"] or bw["pageable"])
        report["host_copy"] = bw
    report["fallbacks"] = dict(m.failures)
    p = to_profile(prof, consts, {k: v for k, v in report.items() if k.startswith(("rms", "median"))})
    if save:
        report["path"] = str(save_profile(p, base, report, cache_dir or m.path.parent))
    return p, report

"""Renders every results table and quoted result figure of README.md and docs/*.md from
bench/results/*.json, so the docs cannot drift from the committed runs.

A table sits between marker comments that name its renderer::

    <!-- results:zoo -->
    | model | ... |
    <!-- /results:zoo -->

and a figure in prose between inline ones: ``<!-- fig:zoo.sd_unet.magis.peak_at_10pct -->0.386x<!-- /fig -->``.
``python bench/docs.py`` rewrites what lies between the markers; ``python bench/docs.py --check``
changes nothing and exits 1 listing each block whose committed text differs from what the JSON
renders (``tests/test_docs.py`` runs the check).  Only the standard library is used: rendering the
docs needs no torch.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

BLOCK = re.compile(r"<!-- results:(?P<name>[a-z0-9_][\w.-]*) -->\n(?P<body>.*?)<!-- /results:(?P=name) -->", re.S)
FIG = re.compile(r"<!-- fig:(?P<name>[a-z0-9_][\w.+-]*) -->(?P<body>.*?)<!-- /fig -->")


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("**/*.md"))]


@functools.cache
def load(name: str) -> dict | list:
    return json.loads((RESULTS / f"{name}.json").read_text())


# ---- formatting ----------------------------------------------------------------------------------

def x(v: float | None, digits: int = 3) -> str:
    """A ratio to eager: ``0.386x``; ``-`` where no point qualifies."""
    return "-" if v is None else f"{v:.{digits}f}x"


def pct(v: float | None) -> str:
    """A latency overhead as a signed percentage: ``+9.9%``."""
    return "-" if v is None else f"{100 * v:+.1f}%"


def gib(b: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            v = b / size
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{b:.0f} B"


def bold_if(s: str, cond: bool) -> str:
    return f"**{s}**" if cond else s


def table(head: list[str], align: str, rows: list[list[str]]) -> str:
    """A Markdown table; ``align`` has one letter per column, ``l`` or ``r``."""
    sep = ["---:" if a == "r" else "---" for a in align]
    return "\n".join("| " + " | ".join(r) + " |" for r in [head, sep, *rows]) + "\n"


def ms_or_s(sec: float) -> str:
    return f"{sec * 1e3:.0f}" if sec < 1 else f"{sec:.2f}"


# ---- the tables ----------------------------------------------------------------------------------

HEADLINES = ("peak_at_5pct", "peak_at_10pct", "overhead_at_80pct", "overhead_at_40pct")
RENDERERS: dict[str, Callable[[], str]] = {}


def renderer(name: str):
    def deco(f):
        RENDERERS[name] = f
        return f
    return deco


@renderer("workloads")
def _workloads() -> str:
    rows = []
    for w in load("workloads"):
        lat = w["latency_seconds"]
        unit = "ms" if lat["rtx3090"] < 1 else "s"
        est = " / ".join(ms_or_s(lat[d]) for d in ("rtx3090", "a100-80gb", "h100-sxm")) + f" {unit}"
        rows.append([w["workload"], w["description"], f"{w['ops']:,}", f"{w['weight_bytes'] / 2**30:.2f} GiB",
                     f"{w['baseline_peak_bytes'] / 2**30:.2f} GiB", est])
    return table(["workload", "what", "ops", "weights", "baseline peak", "est. step (RTX 3090 / A100 / H100)"],
                 "llrrrr", rows)


def _method_rows(rows: list[dict], columns: bool = True) -> list[list[str]]:
    return [[r["workload"], r["method"], x(r["peak_at_5pct"]), x(r["peak_at_10pct"]), pct(r["overhead_at_80pct"]),
             pct(r["overhead_at_40pct"]), str(r["points"]), f"{r['seconds']:.0f}"] for r in rows]


@renderer("pareto")
def _pareto() -> str:
    return table(["workload", "method", "peak at <= 5% overhead", "peak at <= 10%", "overhead under 80% limit",
                  "under 40%", "points", "seconds"], "llrrrrrr", _method_rows(load("pareto")["rows"]))


def versus(rows: list[dict], key: str = "peak_at_10pct") -> tuple[float | None, float | None, str | None]:
    """MAGIS's ``key`` against the best other method's (eager and the ideal bound left out)."""
    by = {r["method"]: r for r in rows}
    mine = by.get("magis", {}).get(key)
    others = [(r[key], m) for m, r in by.items() if m not in ("magis", "eager", "ideal") and r.get(key) is not None]
    best = min(others, default=(None, None))
    return mine, best[0], best[1]


def _by_workload(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["workload"], []).append(r)
    return out


@renderer("pareto_versus")
def _pareto_versus() -> str:
    out = []
    for w, rows in _by_workload(load("pareto")["rows"]).items():
        mine, best, who = versus(rows)
        out.append([w, bold_if(x(mine), mine <= best), f"{who} {x(best)}", f"{mine / best:.2f}"])
    return table(["workload", "MAGIS", "best other at <= 10%", "ratio"], "lrlr", out)


@renderer("pareto_magis_spikes")
def _pareto_magis_spikes() -> str:
    rows = [r for r in load("pareto_magis_spikes")["rows"] if r["method"] == "magis"]
    return table(["workload", "peak at <= 5% overhead", "peak at <= 10%", "overhead under 80% limit", "under 40%",
                  "points", "seconds"], "lrrrrrr", [r[:1] + r[2:] for r in _method_rows(rows)])


@renderer("zoo")
def _zoo() -> str:
    def cell(rows: list[dict], key: str) -> str:
        num = x if key.startswith("peak") else pct
        mine, best, who = versus(rows, key)
        win = mine is not None and (best is None or mine <= best + 1e-12)
        return f"{bold_if(num(mine), win)} / {'-' if best is None else f'{who} {num(best)}'}"

    out = []
    for m in load("zoo")["models"]:
        mine, best, _ = versus(m["rows"])
        ratio = "-" if mine is None or not best else f"{mine / best:.2f}"
        links = ", ".join(f"`{o}`" for o in m["no_dim_links"]) or "none"
        out.append([m["model"], m["size"], f"{m['ops']:,}", f"{m['time_budget']:.0f}", f"{m['floor_ratio']:.2f}x",
                    cell(m["rows"], HEADLINES[0]), cell(m["rows"], HEADLINES[1]), ratio,
                    cell(m["rows"], HEADLINES[2]), cell(m["rows"], HEADLINES[3]), links])
    return table(["model", "size", "ops", "s per method", "resident floor", "<= 5%: MAGIS / best other",
                  "<= 10%: MAGIS / best other", "ratio", "80%: MAGIS / best other", "40%: MAGIS / best other",
                  "ops without dim links"], "llrrrllrlll", out)


# ---- peers at full strength under both cost models (bench/results/*_costs_*.json) -------------------
COSTS = ("analytic", "compiled")


def _units(kind: str, cost: str) -> list[tuple[str, list[dict], dict]]:
    """(workload or model, its rows, its record) of ``pareto_costs_<cost>`` or ``zoo_costs_<cost>``."""
    d = load(f"{kind}_costs_{cost}")
    if kind == "pareto":
        by = _by_workload(d["rows"])
        return [(w["workload"], by[w["workload"]], w) for w in d["workloads"]]
    return [(m["model"], m["rows"], m) for m in d["models"]]


def _versus_cells(rows: list[dict]) -> list[str]:
    mine, best, who = versus(rows)
    by = {r["method"]: r for r in rows}
    share = by.get("magis", {}).get("reducible_removed")
    win = mine is not None and (best is None or mine <= best + 1e-12)
    return [bold_if(x(mine), win), "-" if best is None else f"{who} {x(best)}",
            "-" if mine is None or not best else f"{mine / best:.2f}",
            "-" if share is None else f"{100 * share:.0f}%"]


def _cost_versus(kind: str) -> str:
    per = {c: {name: (rows, rec) for name, rows, rec in _units(kind, c)} for c in COSTS}
    names = list(per[COSTS[0]])
    out = []
    for n in names:
        rec = per[COSTS[0]][n][1]
        b = rec.get("bound") or {}
        bound = "-" if not b else f"{b['bound'] / rec['eager']['peak']:.2f}x ({'floor' if b['bound'] == b['resident_floor'] else 'largest op'})"
        cells = [n, bound]
        for c in COSTS:
            cells += _versus_cells(per[c][n][0]) if n in per[c] else ["-"] * 4
        out.append(cells)
    head = ["workload" if kind == "pareto" else "model", "lower bound"]
    for c in COSTS:
        head += [f"{c}: MAGIS", "best other", "ratio", "reducible removed"]
    return table(head, "lr" + "rlrr" * len(COSTS), out)


@renderer("pareto_costs")
def _pareto_costs() -> str:
    """The paper's workloads under both cost models: MAGIS at <= 10% overhead against the best other
    method, the ratio, and the share of the reducible memory MAGIS's point removes."""
    return _cost_versus("pareto")


@renderer("zoo_costs")
def _zoo_costs() -> str:
    return _cost_versus("zoo")


@renderer("budget_used")
def _budget_used() -> str:
    """Per method, over the workloads and zoo models of both cost models: the share of its budget it
    used (median, and the range) and its points (median)."""
    used: dict[str, list[float]] = {}
    points: dict[str, list[int]] = {}
    for kind in ("pareto", "zoo"):
        for c in COSTS:
            for _, rows, _ in _units(kind, c):
                for r in rows:
                    if r.get("budget_used") is not None and r["method"] not in ("eager", "ideal"):
                        used.setdefault(r["method"], []).append(r["budget_used"])
                        points.setdefault(r["method"], []).append(r["points"])

    def med(v: list[float]) -> float:
        v = sorted(v)
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2

    out = [[m, f"{100 * med(u):.0f}%", f"{100 * min(u):.0f}-{100 * max(u):.0f}%", f"{med(points[m]):.0f}",
            str(len(u))] for m, u in used.items()]
    return table(["method", "budget used (median)", "range", "points (median)", "runs"], "lrrrr", out)


def _granularity(points: list[dict]) -> str:
    kinds = sorted({str(p.get("stats", {}).get("granularity", "op")) for p in points})
    return ", ".join(kinds) if kinds else "-"


def _solvers(points: list[dict]) -> str:
    kinds: dict[str, int] = {}
    for p in points:
        st = p.get("stats", {})
        solver = st.get("solver", "milp")
        k = solver + (" (not proven optimal)" if solver == "milp" and not st.get("optimal", True) else "")
        kinds[k] = kinds.get(k, 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "-"


@renderer("checkmate_points")
def _checkmate_points() -> str:
    """Checkmate per workload and zoo model (analytic cost model): its points, its lowest peak at <= 10%
    overhead, the granularity and solver behind its points, and why it gave none where it did not."""
    out = []
    for kind in ("pareto", "zoo"):
        for name, rows, rec in _units(kind, "analytic"):
            by = {r["method"]: r for r in rows}
            if "checkmate" not in by:
                continue
            pts = rec["points"].get("checkmate", [])
            fails = [f for f in (rec.get("failures") or []) if f.get("method") == "checkmate"] if kind == "zoo" else [
                f for f in load("pareto_costs_analytic")["failures"] if f["workload"] == name and f["method"] == "checkmate"]
            why = "" if pts else (fails[0]["reason"].split(";")[0] if fails else "")
            out.append([name, str(len(pts)), x(by["checkmate"]["peak_at_10pct"]), _granularity(pts) if pts else "-",
                        _solvers(pts) if pts else why, f"{by['checkmate']['seconds']:.0f}"])
    return table(["workload / model", "points", "peak at <= 10%", "granularity", "solver (points)", "seconds"],
                 "lrrllr", out)


@renderer("compiled_check")
def _compiled_check() -> str:
    """The compiled cost model's predicted speedup over eager against torch.compile's measured one."""
    out = []
    for r in load("compiled_check")["rows"]:
        p, m = r["predicted"], r["measured"]
        out.append([r["sample"], f"{p['ops']:,}", f"{p['speedup']:.2f}x", f"{m['speedup']:.2f}x",
                    f"{m['eager_s'] * 1e3:.1f}", f"{m['compiled_s'] * 1e3:.1f}", f"{m['compile_s']:.0f}"])
    return table(["sample", "ops", "predicted speedup (cpu profile)", "measured speedup", "eager ms", "compiled ms",
                  "compile s"], "lrrrrrr", out)


@renderer("zoo_budgets")
def _zoo_budgets() -> str:
    """MAGIS against the best other method at <= 10% latency at the budgets a user waits (10 s and
    30 s per method, ``zoo_10s.json`` / ``zoo_30s.json``) and at the zoo's 40 s per thousand ops."""
    runs = [(label, {m["model"]: m for m in load(name)["models"]}) for label, name in
            (("10 s", "zoo_10s"), ("30 s", "zoo_30s"), ("40 s/kop", "zoo"))]
    out, wins = [], {label: 0 for label, _ in runs}
    for m in load("zoo")["models"]:
        row = [m["model"], f"{m['ops']:,}"]
        for label, by in runs:
            r = by.get(m["model"])
            if r is None:
                row.append("-")
                continue
            mine, best, who = versus(r["rows"])
            win = mine is not None and (best is None or mine <= best + 1e-12)
            wins[label] += win
            magis_s = next((x["seconds"] for x in r["rows"] if x["method"] == "magis"), None)
            row.append(f"{bold_if(x(mine), win)} / {'-' if best is None else f'{who} {x(best)}'} "
                       f"({'-' if magis_s is None else f'{magis_s:.0f}'} s)")
        out.append(row)
    out.append(["at or below the best other", ""] + [f"{wins[label]} of {len(out)}" for label, _ in runs])
    return table(["model", "ops", *(f"{label}: MAGIS / best other (MAGIS's s)" for label, _ in runs)], "lrlll", out)


@renderer("zoo_convergence")
def _zoo_convergence() -> str:
    """MAGIS at the zoo's 40 s per thousand ops before the anytime schedule (``zoo.json``) and after
    it (``zoo_magis_40kop.json``): the seconds until its lowest peak came within 1% of its final
    value, and its lowest peak at <= 5% and <= 10% latency overhead."""
    before = {m["model"]: next(r for r in m["rows"] if r["method"] == "magis") for m in load("zoo")["models"]}
    after = {m["model"]: next(r for r in m["rows"] if r["method"] == "magis")
             for m in load("zoo_magis_40kop")["models"]}
    out = []
    for m in load("zoo")["models"]:
        b, a = before[m["model"]], after.get(m["model"])
        if a is None:
            continue

        def s1(r: dict, key: str = "seconds_to_1pct") -> str:
            v = r.get(key)
            return "-" if v is None else f"{v:.0f}"

        out.append([m["model"], f"{m['time_budget']:.0f}", s1(b), s1(a), s1(a, "seconds_to_1pct_any"),
                    x(b.get("peak_at_5pct")), x(a.get("peak_at_5pct")),
                    x(b.get("peak_at_10pct")), bold_if(x(a.get("peak_at_10pct")),
                                                       (a.get("peak_at_10pct") or 9) <= (b.get("peak_at_10pct") or 9) + 1e-12)])
    return table(["model", "budget s", "s to within 1%: before", "after", "after, stages counted", "<= 5%: before",
                  "after", "<= 10%: before", "after"], "lrrrrrrrr", out)


@renderer("profile_search")
def _profile_search() -> str:
    out = []
    for r in load("profile_search")["runs"]:
        for st in r["stages"]:
            out.append([f"{r['model']} ({r['ops']:,} ops), {r['budget']:g} s", st["name"], f"{st['start']:.1f}",
                        f"{st['end']:.1f}", str(st["states"]), x(st["peak_at_5pct"]), x(st["peak_at_10pct"])])
    return table(["run", "stage", "from s", "to s", "states", "<= 5%", "<= 10%"], "llrrrrr", out)


@renderer("profile_search_parts")
def _profile_search_parts() -> str:
    runs = load("profile_search")["runs"]
    parts = list(dict.fromkeys(k for r in runs for k in r["profile"]))
    return table(["run", *parts], "l" + "r" * len(parts),
                 [[f"{r['model']}, {r['budget']:g} s", *(f"{100 * r['profile'].get(k, 0):.0f}%" for k in parts)]
                  for r in runs])


def _one_model(d: dict) -> str:
    out = [[r["method"], f"{r['seconds']:.1f}", str(r["points"]), x(r.get("peak_at_10pct"))] for r in d["rows"]]
    return table(["method", f"seconds (budget {d['time_budget']:g})", "points", "peak at <= 10%"], "lrrr", out)


@renderer("long_graph")
def _long_graph() -> str:
    return _one_model(load("long_graph"))


@renderer("heldout_lm")
def _heldout_lm() -> str:
    return _one_model(load("heldout_lm"))


@renderer("plan_step_vs_dtr")
def _plan_step_vs_dtr() -> str:
    out = []
    for r in load("plan_step_vs_dtr")["rows"]:
        e = r["eager_peak"]
        out.append([r["model"], f"{r['limit']:g}", x(r["magis_peak"] / e), f"{r['magis_latency'] * 1e3:.3f}",
                    "-" if r["dtr_peak"] is None else x(r["dtr_peak"] / e),
                    "-" if r["dtr_latency"] is None else f"{r['dtr_latency'] * 1e3:.3f}",
                    "yes" if r["magis_at_or_below"] else "**no**"])
    return table(["model", "limit", "plan_step peak", "ms", "DTR's lowest at no more latency", "ms",
                  "at or below"], "lrrrrrl", out)


@renderer("unet_norm")
def _unet_norm() -> str:
    rows = sorted(load("unet_norm")["rows"], key=lambda r: (r["workload"], r["batch_norm"]))
    return table(["workload", "BatchNorm", "eager peak", "peak at <= 5%", "peak at <= 10%", "lowest",
                  "fission nodes at <= 10%"], "llrrrrr",
                 [[r["workload"], "yes" if r["batch_norm"] else "no (sample)", gib(r["eager_peak"]),
                   x(r["peak_at_5pct"]), x(r["peak_at_10pct"]), x(r["lowest_peak"]), str(r["fission_nodes_at_10pct"])]
                  for r in rows])


@renderer("fission")
def _fission() -> str:
    out = []
    for r in load("fission"):
        f = r["fission"]
        peak = x(f["peak_ratio"]) + (f" ({gib(f['peak'])})" if f["peak_ratio"] < 0.99 else "")
        out.append([r["workload"], str(r["ftree_nodes"]), f"{100 * r['covered_fraction']:.0f}%", peak,
                    x(f["latency_ratio"])])
    return table(["workload", "F-Tree nodes", "ops in a candidate", "peak", "latency"], "lrrrr", out)


@renderer("remat_swap")
def _remat_swap() -> str:
    out = []
    for r in load("remat_swap"):
        rm, sw = r["remat"], r["swap"]
        out.append([r["workload"], gib(r["baseline"]["peak"]), x(rm["peak_ratio"]), x(rm["latency_ratio"]),
                    x(sw["peak_ratio"]), x(sw["latency_ratio"]), gib(sw["host_peak"])])
    return table(["workload", "baseline peak", "remat peak", "remat latency", "swap peak", "swap latency",
                  "swapped to host"], "lrrrrrr", out)


@renderer("states")
def _states() -> str:
    def rate(v: float) -> str:
        return f"{v:.2g} states/s" if v < 10 else f"{v:.0f} states/s"
    return table(["workload", "ops", "old pipeline", "delta evaluation", "speedup", "bytes per queued state",
                  "mismatches"], "lrrrrrr",
                 [[r["workload"], f"{r['ops']:,}", rate(r["old_states_per_s"]), rate(r["new_states_per_s"]),
                   f"{r['speedup']:,.0f}x", f"{r['bytes_per_state']:,.0f}", f"{r['mismatches']} / {r['checked']}"]
                  for r in load("states")])


@renderer("windows")
def _windows() -> str:
    def rate(v: float) -> str:
        return f"{v:.1f}/s" if v < 100 else f"{v:.0f}/s"
    return table(["workload", "ops", "children", "unbounded", "bounded (cap 96)", "ratio", "window mean / max",
                  "DP ops max", "mismatches"], "lrrrrrrrr",
                 [[r["workload"], f"{r['ops']:,}", str(r["children"]), rate(r["before_children_per_s"]),
                   rate(r["after_children_per_s"]), f"{r['ratio']:.1f}x",
                   f"{r['window_mean']:,.0f} / {r['window_max']:,}", str(r["dp_ops_max"]), str(r["mismatches"])]
                  for r in load("windows")])


@renderer("dtr_choice")
def _dtr_choice() -> str:
    return table(["workload", "ops", "budget", "exhaustive", "pruned", "ratio", "evictions", "same decisions"],
                 "lrrrrrrl",
                 [[r["workload"], f"{r['ops']:,}", f"{r['budget']:g}", f"{r['exhaustive_seconds']:.2f} s",
                   f"{r['pruned_seconds']:.2f} s", f"{r['exhaustive_seconds'] / r['pruned_seconds']:.1f}x",
                   "(fails)" if r["failed"] else str(r["evictions"]), "yes" if r["same"] else "no"]
                  for r in load("dtr_choice")["rows"]])


def _at(p: dict | None) -> str:
    return "-" if p is None else f"{p['peak']:.3f}x at {pct(p['overhead'])}"


@renderer("peak_fission")
def _peak_fission() -> str:
    return table(["DTR budget", "DTR's plan", "Swap steps alone", "best at <= +10%", "peak fission",
                  "then Swap steps", "best at <= +10%"], "rllllll",
                 [[f"{r['budget']:g}", _at(r["start"]), _at(r["swaps_swaps"]),
                   _at(r["swaps_swaps"]["best_within_10pct"]), _at(r["fission"]), _at(r["fission_swaps"]),
                   _at(r["fission_swaps"]["best_within_10pct"])] for r in load("peak_fission")["rows"]])


@renderer("spike_steps")
def _spike_steps() -> str:
    return table(["DTR budget", "DTR's plan", "Swap steps", "best at <= +10%", "then spike steps: best at <= +10%",
                  "lowest", "spike steps"], "rllllll",
                 [[f"{r['budget']:g}", _at(r["start"]), _at(r["swaps"]), _at(r["swaps"]["best_within_10pct"]),
                   _at(r["spikes"]["best_within_10pct"]), _at(r["spikes"]["lowest"]), str(r["spikes"]["steps"])]
                  for r in load("spike_steps")["rows"]])


@renderer("swapadvisor")
def _swapadvisor() -> str:
    return load("swapadvisor")["table"].strip() + "\n"


@renderer("swapadvisor_pools")
def _swapadvisor_pools() -> str:
    return load("swapadvisor_pools")["table"].strip() + "\n"


@renderer("fidelity")
def _fidelity() -> str:
    s = load("fidelity")["summary"]
    names = {"analytic": "analytic (`cpu` datasheet)", "calibrated": "calibrated", "measured": "measured"}
    out = []
    for k, label in names.items():
        m = s[k]
        out.append([label, f"{m['spearman_latency_pooled']:.3f}", f"{m['spearman_latency_within_workload_mean']:.3f}",
                    f"{m['overhead_error_pp_mean']:.1f} / {m['overhead_error_pp_median']:.1f} / "
                    f"{m['overhead_error_pp_max']:.1f} pp", f"{100 * m['overhead_within_5pp_share']:.0f}%",
                    f"{m['overhead_error_pp_mean_without_swaps']:.1f} pp"])
    n = s["calibrated"]["overhead_points_within_30pct"]
    return table(["cost model", "Spearman, latencies (pooled)", "Spearman within a workload (mean)",
                  f"overhead error, points <= 30% ({n}) mean / median / max", "share <= 5 pp",
                  "mean without the swap points"], "lrrrrr", out)


SUBST_METHODS = ("enu", "pruning", "dpp", "metaflow", "taso", "sampling", "greedy")
SUBST_LABELS = ("ENU", "Pruning", "DPP", "MetaFlow", "TASO", "Sampling", "greedy")
EXACT = ("enu", "pruning", "dpp")


def _cost(r: dict, m: str) -> str:
    if "error" in r:
        return "n/a" if r["error"] == "not run" else "error"
    return "-" if m in EXACT and not r["complete"] else f"{r['cost_after_ms']:.3f}"


@renderer("substitutions")
def _substitutions() -> str:
    out = []
    for g, per in load("substitutions")["table3"].items():
        any_row = next(r for r in per.values() if "ops" in r)
        costs = {m: per[m]["cost_after_ms"] for m in SUBST_METHODS if "cost_after_ms" in per[m]}
        best = min(costs.values())
        cells = [bold_if(_cost(per[m], m), m == "sampling" and costs.get(m) == best) for m in SUBST_METHODS]
        out.append([g, str(any_row["ops"]), f"{any_row['cost_before_ms']:.3f}", *cells])
    return table(["graph", "ops", "before", *SUBST_LABELS], "lrrrrrrrrr", out)


@renderer("substitutions_seconds")
def _substitutions_seconds() -> str:
    def cell(r: dict) -> str:
        return f"{r['seconds']:.1f}{'' if r['complete'] else '*'} ({r['best_seconds']:.1f})"
    return table(["graph", *SUBST_LABELS], "lrrrrrrr",
                 [[g, *(cell(per[m]) for m in SUBST_METHODS)] for g, per in load("substitutions")["table3"].items()])


@renderer("substitutions_blocks")
def _substitutions_blocks() -> str:
    methods = SUBST_METHODS[:-1]
    out = []
    for g, per in load("substitutions")["blocks"].items():
        any_row = next(r for r in per.values() if "ops" in r)

        out.append([g.replace("_", " "), str(any_row["ops"]), f"{any_row['cost_before_ms']:.3f}",
                    *(_cost_and_seconds(per.get(m), m) for m in methods)])
    return table(["graph", "ops", "before", *SUBST_LABELS[:-1]], "lrrrrrrrr", out)


def _cost_and_seconds(r: dict | None, m: str) -> str:
    """An OCGGS cell: the cost after and, in brackets, the seconds (* stopped by the budget)."""
    if r is None or r.get("error") == "not run":
        return ""
    c = _cost(r, m)
    return c if c == "-" else f"{c} ({r['seconds']:.2f}{'' if r['complete'] else '*'})"


@renderer("substitutions_k_scaling")
def _substitutions_k_scaling() -> str:
    rows = load("substitutions")["k_scaling"]
    methods = [m for m in SUBST_METHODS if any(m in per for per in rows.values())]
    out = []
    for name, per in rows.items():
        g, k = name.rsplit(" K=", 1)
        any_row = next(r for r in per.values() if "ops" in r)
        out.append([g.replace("_", " "), k, str(any_row["ops"]), f"{any_row['cost_before_ms']:.3f}",
                    *(_cost_and_seconds(per.get(m), m) for m in methods)])
    return table(["graph", "K", "ops", "before", *(SUBST_LABELS[SUBST_METHODS.index(m)] for m in methods)],
                 "lrrr" + "r" * len(methods), out)


@renderer("magis_substitutions")
def _magis_substitutions() -> str:
    return table(["workload", "pre-pass latency", "peak at <= 10%: without", "with", "overhead at 80% memory: without",
                  "with"], "lrrrrr",
                 [[r["workload"], f"{r['prepass_latency_ratio']:.4f}", f"{r['without']['peak_at_10pct']:.3f}",
                   f"{r['with']['peak_at_10pct']:.3f}", pct(r["without"]["overhead_at_80pct"]),
                   pct(r["with"]["overhead_at_80pct"])] for r in load("magis_substitutions")["rows"]])


FUSION_GRAPHS = {"efficientnet_b3": "EfficientNet-B3", "resnet152": "ResNet-152", "mobilenet_v2": "MobileNetV2"}
FUSION_SEARCHES = (("random", "random"), ("local", "local"), ("nsga2", "NSGA-II"))
MB = 1e6


@renderer("fusion")
def _fusion() -> str:
    d = load("fusion")
    lo, hi = str(min(d["budgets"])), str(max(d["budgets"]))
    out = []
    for r in d["rows"]:
        cells, best = [], math.inf
        for s, _ in FUSION_SEARCHES:
            for b in (lo, hi):
                rnd, grad = r["search"][f"{s}/none"]["best"][b] / MB, r["search"][f"{s}/grad"]["best"][b] / MB
                best = min(best, grad)
                cells.append(f"{rnd:.1f} / {bold_if(f'{grad:.1f}', grad < rnd - 0.05)}")
        out.append([FUSION_GRAPHS.get(r["graph"], r["graph"]), r["scheme"].upper(), f"{r['buffer_kib']} KiB",
                    f"{r['unfusable']} of {r['ops']}", f"{r['trivial_dram'] / MB:.1f}", *cells,
                    f"{100 * (best * MB / r['trivial_dram'] - 1):.1f}%"])
    head = [f"{label} {n // 1000}k" for _, label in FUSION_SEARCHES for n in sorted(d["budgets"])]
    return table(["graph", "scheme", "buffer", "ops too big alone", "unfused plan", *head, "best guided vs unfused"],
                 "llrrr" + "r" * (len(head) + 1), out)


@renderer("fusion_rectify")
def _fusion_rectify() -> str:
    out = []
    for r in load("fusion")["rows"]:
        rc = r["rectify"]
        if r["buffer_kib"] != 256 or not rc["groups"]:
            continue
        per = {e: rc[e]["seconds"] / rc["groups"] * 1e3 for e in ("gnn", "grad")}
        out.append([FUSION_GRAPHS.get(r["graph"], r["graph"]), r["scheme"].upper(),
                    f"{rc['groups']} ({rc['mean_size']:.1f})",
                    *(f"{100 * rc[e]['rectify_rate']:.0f}%" for e in ("gnn", "grad", "oracle", "random")),
                    f"{per['gnn']:.0f} / {per['grad']:.0f}"])
    return table(["graph", "scheme (256 KiB)", "invalid groups (mean ops)", "GNNExplainer", "gradient", "oracle",
                  "random edges", "ms per group (GNNExplainer / gradient)"], "llrrrrrr", out)


@renderer("app_plan_timing")
def _app_plan_timing() -> str:
    rows = load("app_plan_timing")
    actions: dict[str, dict[str, dict]] = {}
    for r in rows:
        action = r["action"].replace(r["model"], "MODEL")
        actions.setdefault(action, {})[r["model"]] = r
    models = sorted({r["model"] for r in rows}, key=[r["model"] for r in rows].index)
    out = []
    for action, per in actions.items():
        target = next((r["target_s"] for r in per.values() if r["target_s"]), None)
        out.append([action, *(f"{per[m]['median_s']:.3f} s" if m in per else "-" for m in models),
                    "" if target is None else f"{target:g} s"])
    return table(["action (median of the runs)", *models, "target"], "l" + "r" * (len(models) + 1), out)


@renderer("gpu_plans")
def _gpu_plans() -> str:
    out = []
    for r in load("gpu_plans"):
        rep = r.get("report") or {}
        out.append([r["sample"], str(r["point"]), r["method"], "yes" if r.get("eager") else "no", str(r["swaps"]),
                    gib(r["simulated_peak"]),
                    gib(rep["measured_peak_bytes"]) if "measured_peak_bytes" in rep else "-",
                    f"{rep['peak_ratio']:.3f}" if "peak_ratio" in rep else "-"])
    return table(["sample", "point", "method", "eager", "swaps", "simulated peak", "measured peak (CUDA)",
                  "measured / simulated"], "lrllrrrr", out)


@renderer("incremental_substitution")
def _incremental_substitution() -> str:
    s = load("incremental_substitution")["summary"]
    return table(["tests", "IS speedup over FS: geometric mean", "mean", "range", "same peak as FS", "not worse",
                  "worst peak ratio", "paper"], "rrrlrrrl",
                 [[str(s["tests"]), f"{s['speedup_geomean']:.1f}x", f"{s['speedup_mean']:.0f}x",
                   f"{s['speedup_min']:.1f}x-{s['speedup_max']:.0f}x", f"{s['same_peak']} / {s['tests']}",
                   f"{s['is_not_worse']} / {s['tests']}", f"{s['peak_ratio_max']:.2f}x",
                   f"{s['paper']['speedup']}, {s['paper']['same_peak']} same peak"]])


FIT_VERDICTS = {"fits": "fits eagerly", "fits_with_plan": "fits only with a plan", "does_not_fit": "nothing fits"}


def _fit_models() -> list[dict]:
    return load("fit")["models"]


def _fit_bound(r: dict) -> str:
    out = []
    for b in r["bounds"]:
        what = "resident floor" if b["bound"] == "resident_floor" else f"largest op ({b['op']}) + held"
        out.append(f"{what} {gib(b['bytes'])} > {gib(r['memory_bytes'])}")
    return "; ".join(out) or "-"


@renderer("fit")
def _fit() -> str:
    out = []
    for m in _fit_models():
        r, e = m["report"], m["report"]["eager"]
        best = r["plans"][0] if r["plans"] else None
        plan = ("-" if best is None else
                f"{best['label']}: peak {gib(best['peak_bytes'])}, reserved {gib(best['reserved_bytes'])}, "
                f"{pct(best['overhead'])}")
        fitting = f"{len(r['plans'])} of {len(r['plans']) + len(r['no_plan'])}" if r["status"] != "fits" else "-"
        out.append([f"`{m['model']}`", m["what"], f"{r['nodes']:,}", gib(r["memory_bytes"]), gib(e["peak_bytes"]),
                    gib(e["reserved_bytes"]) if e["reserved_bytes"] is not None else "-", gib(r["floor"]["bytes"]),
                    f"{FIT_VERDICTS[r['status']]} ({m['exit_status']})", plan, fitting, _fit_bound(r)])
    return table(["model", "step", "nodes", "memory", "eager peak", "eager reserved", "resident floor",
                  "verdict (exit status)", "fastest plan that fits", "methods that fit", "bound"],
                 "llrrrrrllrl", out)


@renderer("fit_breakdown")
def _fit_breakdown() -> str:
    models = _fit_models()
    parts = [p for p in ("weights", "gradients", "optimizer_state", "updated", "inputs", "outputs", "activations",
                         "backward")
             if any(m["report"]["eager"]["breakdown"][p]["at_peak"] or m["report"]["eager"]["breakdown"][p]["total"]
                    for m in models)]
    words = {"optimizer_state": "optimizer state", "updated": "updated weights and state", "outputs": "outputs (loss)",
             "backward": "backward temporaries"}
    out = []
    for p in parts:
        cells = []
        for m in models:
            b = m["report"]["eager"]["breakdown"][p]
            cells.append(f"{gib(b['at_peak'])} / {'-' if b['total'] is None else gib(b['total'])}")
        out.append([words.get(p, p), *cells])
    out.append(["**eager peak**", *(f"**{gib(m['report']['eager']['peak_bytes'])}**" for m in models)])
    return table(["part (at the peak / whole step)", *(f"`{m['model']}`" for m in models)], "l" + "r" * len(models),
                 out)


def _fit_reason(why: str) -> str:
    """A method's reason for no plan, up to its first clause."""
    cut = min((i for i in (why.find(": "), why.find("; "), why.find(" (")) if i >= 0), default=len(why))
    return why[:cut]


@renderer("fit_methods")
def _fit_methods() -> str:
    models = [m for m in _fit_models() if m["report"]["status"] != "fits"]
    labels: dict[str, str] = {}
    for m in models:
        for p in m["report"]["plans"] + m["report"]["no_plan"]:
            labels.setdefault(p["method"], p["label"])
    out = []
    for method, label in labels.items():
        cells = []
        for m in models:
            plan = next((p for p in m["report"]["plans"] if p["method"] == method), None)
            miss = next((p for p in m["report"]["no_plan"] if p["method"] == method), None)
            if plan is not None:
                cells.append(f"**{pct(plan['overhead'])}**, reserved {gib(plan['reserved_bytes'])} "
                             f"[{plan['point_label']}]")
            elif miss is None:
                cells.append("-")
            elif miss["lowest_peak_bytes"] is not None:
                cells.append(f"no: lowest peak {gib(miss['lowest_peak_bytes'])}")
            else:
                cells.append(f"no: {_fit_reason(miss['why'])}")
        out.append([label, *cells])
    return table(["method", *(f"`{m['model']}`" for m in models)], "l" * (len(models) + 1), out)


# ---- figures in prose ----------------------------------------------------------------------------

FIGURES: dict[str, Callable[[], str]] = {}


def fig(name: str):
    """Registers a named figure of the prose: ``<!-- fig:NAME -->...<!-- /fig -->``."""
    def deco(f):
        FIGURES[name] = f
        return f
    return deco


def span(values, fmt: str = "{:.2f}", unit: str = "") -> str:
    """``lo-hi`` of ``values`` (one value where they agree when formatted)."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return (lo if lo == hi else f"{lo}-{hi}") + unit


def of(n: int, total: int) -> str:
    return f"{n} of {total}"


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def _subst_value(r: dict, key: str) -> str:
    """One field of an OCGGS search's result, formatted by its kind."""
    v = r[key]
    if key.endswith("_ms"):
        return f"{v:.4f}"
    if key in ("states", "matches", "steps", "ops"):
        return f"{v:,}"
    if key == "memory_bytes":
        return gib(v)
    if key.endswith("seconds"):
        return f"{v:.1f} s"
    raise KeyError(key)


def _table3() -> dict[str, dict[str, dict]]:
    return load("substitutions")["table3"]


def _cost_units(kind: str, cost: str) -> list[tuple[float | None, float | None, float | None]]:
    """(MAGIS's peak at <= 10%, the best other's, MAGIS's share of the reducible memory) per unit."""
    out = []
    for _, rows, _ in _units(kind, cost):
        mine, best, _ = versus(rows)
        share = {r["method"]: r for r in rows}.get("magis", {}).get("reducible_removed")
        out.append((mine, best, share))
    return out


def _wins(kind: str, cost: str) -> str:
    u = _cost_units(kind, cost)
    return of(sum(m is not None and (b is None or m <= b + 1e-12) for m, b, _ in u), len(u))


def _within(kind: str, cost: str, ratio: float) -> str:
    u = _cost_units(kind, cost)
    return of(sum(m is not None and (b is None or m <= ratio * b + 1e-12) for m, b, _ in u), len(u))


def _removes(kind: str, cost: str, share: float) -> str:
    u = _cost_units(kind, cost)
    return of(sum(r is not None and r >= share for _, _, r in u), len(u))


for _c in COSTS:  # the targets of the runs under both cost models (docs/baselines.md)
    FIGURES[f"costs.zoo.{_c}.wins"] = functools.partial(_wins, "zoo", _c)
    FIGURES[f"costs.pareto.{_c}.wins"] = functools.partial(_wins, "pareto", _c)
    FIGURES[f"costs.pareto.{_c}.085"] = functools.partial(_within, "pareto", _c, 0.85)
    FIGURES[f"costs.pareto.{_c}.80pct"] = functools.partial(_removes, "pareto", _c, 0.8)


@fig("substitutions.sampling_seconds")
def _f_sampling_seconds() -> str:
    return span([per["sampling"]["seconds"] for per in _table3().values()], "{:.1f}", " s")


def _sampling_vs(other: str) -> tuple[list[str], list[str]]:
    """The graphs where Sampling's cost equals ``other``'s, and those where it is lower."""
    same, lower = [], []
    for g, per in _table3().items():
        s, o = per["sampling"]["cost_after_ms"], per[other]["cost_after_ms"]
        (same if _same(s, o) else lower if s < o else []).append(g)
    return same, lower


@fig("substitutions.sampling_reaches_taso")
def _f_sampling_reaches_taso() -> str:
    same, lower = _sampling_vs("taso")
    return of(len(same) + len(lower), len(_table3()))


@fig("substitutions.sampling_beats_taso")
def _f_sampling_beats_taso() -> str:
    return str(len(_sampling_vs("taso")[1]))


@fig("substitutions.sampling_beats_taso.graphs")
def _f_sampling_beats_taso_graphs() -> str:
    return ", ".join(_sampling_vs("taso")[1])


@fig("substitutions.greedy_matches_sampling")
def _f_greedy_matches_sampling() -> str:
    return of(len(_sampling_vs("greedy")[0]), len(_table3()))


def _gain(per: dict) -> float:
    r = per["sampling"]
    return 100 * (1 - r["cost_after_ms"] / r["cost_before_ms"])


BATCH_32 = ("bert_base",)  # the one graph of Table 3 not at batch 1


@fig("substitutions.gain_range_batch1")
def _f_gain_range() -> str:
    return span([_gain(per) for g, per in _table3().items() if g not in BATCH_32], "{:.0f}", "%")


@fig("substitutions.blocks.sampling_gap")
def _f_blocks_gap() -> str:
    """The most Sampling's cost is above an exact search's that finished, on the block stacks."""
    gaps = [0.0]
    for per in load("substitutions")["blocks"].values():
        done = [r["cost_after_ms"] for m, r in per.items() if m in EXACT and r.get("complete")]
        if done and "cost_after_ms" in per["sampling"]:
            gaps.append(per["sampling"]["cost_after_ms"] - min(done))
    return f"{max(gaps):.3f} ms"


@fig("substitutions.blocks.sampling_seconds_max")
def _f_blocks_seconds() -> str:
    return f"{max(per['sampling']['seconds'] for per in load('substitutions')['blocks'].values()):.1f} s"


@fig("swapadvisor_pools.minutes")
def _f_pools_minutes() -> str:
    return f"{sum(r['seconds'] for r in load('swapadvisor_pools')['rows']) / 60:.0f} minutes"


def _complete_pools() -> list[dict]:
    return [r for r in load("swapadvisor_pools")["rows"] if r["complete"]]


@fig("swapadvisor_pools.ga_below_best_pool")
def _f_ga_below() -> str:
    return f"{max(0.0, *(r['pool_ceiling'] - r['swapadvisor'] for r in _complete_pools())):.3f}"


@fig("swapadvisor_pools.ga_above_best_pool")
def _f_ga_above() -> str:
    return f"{max(0.0, *(r['swapadvisor'] - r['pool_ceiling'] for r in _complete_pools())):.2f}"


PAPER_SA = 0.53  # SwapAdvisor's paper: 53-99% of ideal


def _sa_rows(name: str = "swapadvisor") -> list[tuple[dict, float]]:
    """The rows where SwapAdvisor found a plan, with its throughput."""
    return [(r, r["cells"]["swapadvisor"]["throughput"]) for r in load(name)["rows"]
            if r["cells"].get("swapadvisor", {}).get("throughput") is not None]


def _cells(rows: list[dict]) -> str:
    return ", ".join(f"{r['workload']} {r['fraction']}" for r in rows)


@fig("swapadvisor.sa_plans")
def _f_sa_plans() -> str:
    return str(len(_sa_rows()))


@fig("swapadvisor.sa_in_paper_range")
def _f_sa_in() -> str:
    return str(len([r for r, t in _sa_rows() if t >= PAPER_SA]))


@fig("swapadvisor.sa_in_paper_range.cells")
def _f_sa_in_cells() -> str:
    return _cells([r for r, t in _sa_rows() if t >= PAPER_SA])


@fig("swapadvisor.sa_in_paper_range.values")
def _f_sa_in_values() -> str:
    return span([t for r, t in _sa_rows() if t >= PAPER_SA])


def _ceiling_below() -> list[dict]:
    return [r for r, t in _sa_rows() if t < PAPER_SA and r["swap_ceiling"] < PAPER_SA]


@fig("swapadvisor.ceiling_below_paper")
def _f_ceiling_below() -> str:
    return str(len(_ceiling_below()))


@fig("swapadvisor.ceiling_below_paper.cells")
def _f_ceiling_below_cells() -> str:
    return _cells(_ceiling_below())


@fig("swapadvisor.ceiling_below_paper.values")
def _f_ceiling_below_values() -> str:
    return span([r["swap_ceiling"] for r in _ceiling_below()])


def _throughput(r: dict, method: str) -> float | None:
    return r["cells"].get(method, {}).get("throughput")


def _row_value(r: dict, key: str) -> float | None:
    """``swap_ceiling``, ``sa_odswap`` (SwapAdvisor's throughput over ODSwap's), ``ceiling_odswap``
    (the swap ceiling over ODSwap's throughput) or a method's throughput, of one row."""
    if key == "swap_ceiling":
        return r["swap_ceiling"]
    if key in ("sa_odswap", "ceiling_odswap"):
        top = _throughput(r, "swapadvisor") if key == "sa_odswap" else r["swap_ceiling"]
        od = _throughput(r, "odswap")
        return None if top is None or od is None else top / od
    return _throughput(r, key)


def _row_fmt(key: str, v: float) -> str:
    return f"{v:.2f}x" if key == "sa_odswap" else f"{v:.1f}x" if key == "ceiling_odswap" else f"{v:.2f}"


def _swap_figure(name: str, parts: list[str]) -> str:
    """``swapadvisor[_v100].WORKLOAD.N.KEY`` (the limit 1/N; KEY as ``_row_value``, or
    ``METHOD.FIELD`` of its cell) and ``swapadvisor[_v100].range.KEY.W1+W2`` (``all``: every workload)."""
    rows = load(name)["rows"]
    if parts[0] == "range":
        key, ws = parts[1], parts[2].split("+")
        vals = [_row_value(r, key) for r in rows if parts[2] == "all" or r["workload"] in ws]
        vals = [v for v in vals if v is not None]
        lo, hi = _row_fmt(key, min(vals)), _row_fmt(key, max(vals))
        return lo if lo == hi else f"{lo.rstrip('x')}-{hi}"
    w, n, key = parts[0], parts[1], parts[2]
    r = next(r for r in rows if r["workload"] == w and r["fraction"] == f"1/{n}")
    if len(parts) == 3:
        return _row_fmt(key, _row_value(r, key))
    v = r["cells"][key][parts[3]]
    return f"{v / 1e9:.1f} GB" if parts[3].startswith("bytes") else str(v)


@fig("magis_substitutions.resnet50.prepass_change")
def _f_prepass() -> str:
    r = next(r for r in load("magis_substitutions")["rows"] if r["workload"] == "resnet50")
    return f"{100 * (r['prepass_latency_ratio'] - 1):+.2f}%"


@fig("incremental_substitution.ops")
def _f_incremental_ops() -> str:
    return span([t["ops"] for t in load("incremental_substitution")["tests"]], "{}")


FUSION_SCHEMES = {"lbdf": "LBDF", "brr": "BRR"}


def _fusion_label(r: dict) -> str:
    return f"{FUSION_GRAPHS.get(r['graph'], r['graph'])} {FUSION_SCHEMES[r['scheme']]} {r['buffer_kib']} KiB"


@fig("fusion.minutes")
def _f_fusion_minutes() -> str:
    return f"{load('fusion')['seconds'] / 60:.0f} min"


@fig("fusion.guided_not_worse")
def _f_guided_not_worse() -> str:
    cells = [(r["search"][f"{s}/grad"]["best"][b], r["search"][f"{s}/none"]["best"][b])
             for r in load("fusion")["rows"] for s, _ in FUSION_SEARCHES for b in r["search"][f"{s}/none"]["best"]]
    return of(sum(g <= n for g, n in cells), len(cells))


def _guided_1k_vs_random_4k() -> list[tuple[str, dict, float]]:
    """Per row and search: the guided search's best after 1k plans over the random split's after 4k, - 1."""
    d = load("fusion")
    lo, hi = str(min(d["budgets"])), str(max(d["budgets"]))
    return [(s, r, r["search"][f"{s}/grad"]["best"][lo] / r["search"][f"{s}/none"]["best"][hi] - 1)
            for r in d["rows"] for s, _ in FUSION_SEARCHES]


def _guided_counts(searches: str) -> tuple[int, int, int]:
    vs = [v for s, _, v in _guided_1k_vs_random_4k() if searches == "all" or s in searches.split("+")]
    return sum(v < 0 for v in vs), sum(v == 0 for v in vs), sum(v > 0 for v in vs)


for _i, _what in enumerate(("beats", "ties", "loses")):
    fig(f"fusion.guided_1k_vs_random_4k.{_what}")(lambda i=_i: str(_guided_counts("all")[i]))
fig("fusion.guided_1k_vs_random_4k.cells")(lambda: str(sum(_guided_counts("all"))))
for _s in ("random+nsga2", "local"):
    fig(f"fusion.guided_1k_vs_random_4k.not_worse.{_s}")(
        lambda s=_s: of(sum(_guided_counts(s)[:2]), sum(_guided_counts(s))))


@fig("fusion.guided_1k_vs_random_4k.losses")
def _f_guided_losses() -> str:
    losses = sorted(((v, s, r) for s, r, v in _guided_1k_vs_random_4k() if v > 0), key=lambda t: -t[0])
    return ", ".join(f"{s} on {_fusion_label(r)} +{100 * v:.{1 if v >= 1e-3 else 2}f}%" for v, s, r in losses)


def _fusion_row(graph: str, scheme: str, kib: str) -> dict:
    return next(r for r in load("fusion")["rows"]
                if r["graph"] == graph and r["scheme"] == scheme and r["buffer_kib"] == int(kib))


def _fusion_figure(parts: list[str]) -> str:
    """``fusion.GRAPH.SCHEME.KIB.KEY``: ``ops``, ``unfusable``, ``best_vs_unfused`` (the best guided plan's
    DRAM below the unfused plan's), ``gnn_vs_grad`` (the most GNNExplainer's 1k-plan searches differ from
    the gradient's), ``gnn_cost`` (GNNExplainer's seconds per explanation over the gradient's), or
    ``SEARCH.EXPLAINER`` (the best DRAM after 1k plans, MB)."""
    r = _fusion_row(*parts[:3])
    key = parts[3:]
    lo = str(min(load("fusion")["budgets"]))
    if key == ["ops"] or key == ["unfusable"]:
        return str(r[key[0]])
    if key == ["best_vs_unfused"]:
        hi = str(max(load("fusion")["budgets"]))
        best = min(v["best"][hi] for k, v in r["search"].items() if k.endswith("/grad"))
        return f"{100 * (1 - best / r['trivial_dram']):.1f}%"
    if key == ["gnn_vs_grad"]:
        best = {k: v["best"][lo] for k, v in r["search"].items()}
        return f"{100 * max(abs(best[f'{s}/gnn'] / best[f'{s}/grad'] - 1) for s, _ in FUSION_SEARCHES):.1f}%"
    if key == ["gnn_cost"]:
        return f"{r['rectify']['gnn']['seconds'] / r['rectify']['grad']['seconds']:.0f}x"
    if len(key) == 2:
        return f"{r['search'][f'{key[0]}/{key[1]}']['best'][lo] / MB:.1f}"
    raise KeyError(".".join(parts))


def _rectified(name: str = "fusion") -> list[dict]:
    return [r for r in load(name)["rows"] if r["rectify"]["groups"]]


EXPLAINERS = ("gnn", "grad", "oracle", "random")


def _mean_rate(name: str, explainer: str) -> float:
    rows = _rectified(name)
    return sum(r["rectify"][explainer]["rectify_rate"] for r in rows) / len(rows)


def _repaired_dram(explainer: str) -> float:
    """The DRAM of the repaired groups of the 2-edge run, summed (``random_split``: the random split's)."""
    rows = [r["rectify"] for r in _rectified("fusion_rectify_k2")]
    return sum(r["random_split_dram"] if explainer == "random_split" else r[explainer]["dram"] for r in rows)


@fig("fusion.rectify.configurations")
def _f_rectify_configs() -> str:
    return str(len(_rectified()))


@fig("fusion.rectify.none")
def _f_rectify_none() -> str:
    return ", ".join(_fusion_label(r) for r in load("fusion")["rows"] if not r["rectify"]["groups"])


@fig("fusion.rectify.range")
def _f_rectify_range() -> str:
    return span([100 * r["rectify"][e]["rectify_rate"] for r in _rectified() for e in EXPLAINERS], "{:.0f}", "%")


@fig("fusion.rectify.median_size")
def _f_rectify_size() -> str:
    sizes = sorted(r["rectify"]["mean_size"] for r in _rectified())
    n = len(sizes)
    return f"{(sizes[n // 2] + sizes[(n - 1) // 2]) / 2:.1f}"


for _name in ("fusion", "fusion_rectify_k2"):
    for _e in EXPLAINERS:
        fig(f"{_name}.rectify.mean.{_e}")(lambda n=_name, e=_e: f"{100 * _mean_rate(n, e):.0f}%")
        if _name == "fusion_rectify_k2":
            fig(f"{_name}.rectify.min.{_e}")(
                lambda n=_name, e=_e: f"{100 * min(r['rectify'][e]['rectify_rate'] for r in _rectified(n)):.0f}%")
for _e in (*EXPLAINERS, "random_split"):
    fig(f"fusion_rectify_k2.dram.{_e}")(lambda e=_e: f"{_repaired_dram(e) / MB:,.0f}")
fig("fusion_rectify_k2.seconds")(lambda: f"{load('fusion_rectify_k2')['seconds']:.0f} s")
for _sch in FUSION_SCHEMES:
    for _key in ("accuracy", "majority"):
        fig(f"fusion.classifier.{_sch}.{_key}")(
            lambda s=_sch, k=_key: f"{100 * load('fusion')['classifiers'][s][k]:.1f}%")


fig("fusion.classifier.samples")(lambda: span([c["samples"] for c in load("fusion")["classifiers"].values()], "{:,}"))


@fig("zoo.models")
def _f_zoo_models() -> str:
    return str(len(load("zoo")["models"]))


@fig("zoo.time_budgets")
def _f_zoo_budgets() -> str:
    return span([m["time_budget"] for m in load("zoo")["models"]], "{:.0f}", " s")


@fig("states.bytes_per_state")
def _f_state_bytes() -> str:
    return span([r["bytes_per_state"] / 1e3 for r in load("states")], "{:.1f}", " KB")


@fig("fidelity.minutes")
def _f_fidelity_minutes() -> str:
    return f"{load('fidelity')['seconds']['total'] / 60:.0f} minutes"


@fig("fidelity.points")
def _f_fidelity_points() -> str:
    return str(len(load("fidelity")["rows"]))


MID_WORKLOADS = ("resnet_mid", "bert_mid")  # built by bench/fidelity.py; the rest are the tiny samples


@fig("fidelity.tiny_samples")
def _f_fidelity_tiny() -> str:
    return str(len([w for w in load("fidelity")["workloads"] if w not in MID_WORKLOADS]))


@fig("corpus.models")
def _f_corpus_models() -> str:
    return str(len(load("corpus")["rows"]))


@fig("fit.minutes")
def _f_fit_minutes() -> str:
    return span([m["seconds"] / 60 for m in _fit_models()], "{:.0f}", " minutes")


@fig("fit.adam_floor_over_weights")
def _f_fit_adam_floor() -> str:
    """The resident floor over the weights of the models captured with Adam's update."""
    reps = [m["report"] for m in _fit_models() if m["report"]["optimizer"] == "adam"]
    return span([r["floor"]["bytes"] / r["eager"]["breakdown"]["weights"]["total"] for r in reps], "{:.1f}", "x")


def figure(name: str) -> str:
    """A figure by its name: one of ``FIGURES``, or by its dotted path: ``zoo.MODEL.METHOD.KEY`` and
    ``pareto.WORKLOAD.METHOD.KEY`` (a ratio, overhead or point count of that method's row),
    ``pareto.WORKLOAD.nodes``, ``zoo.MODEL.floor_ratio``, ``fidelity.MODEL.METRIC``,
    ``unet_norm.WORKLOAD.bn|plain.KEY``, ``workloads.WORKLOAD.ops``, ``windows.WORKLOAD.KEY``,
    ``substitutions.table3.GRAPH.METHOD.KEY``, ``substitutions.memory.M1+M2``, ``substitutions.gain.GRAPH``,
    ``substitutions_long.GRAPH.METHOD.KEY`` and
    ``substitutions_long.GRAPH.speedup``, ``swapadvisor[_v100]...`` (``_swap_figure``),
    ``swapadvisor_pools.WORKLOAD.largest``,
    ``fusion.GRAPH.SCHEME.KIB...`` (``_fusion_figure``)."""
    if name in FIGURES:
        return FIGURES[name]()
    parts = name.split(".")
    kind = parts[0]
    try:
        return _path_figure(kind, parts)
    except (KeyError, StopIteration, IndexError, TypeError, ValueError):
        raise KeyError(f"no figure named {name!r}") from None


def _path_figure(kind: str, parts: list[str]) -> str:
    if kind in ("zoo", "pareto") and len(parts) == 4:
        _, w, method, key = parts
        rows = (next(m["rows"] for m in load("zoo")["models"] if m["model"] == w) if kind == "zoo"
                else [r for r in load("pareto")["rows"] if r["workload"] == w])
        v = next(r for r in rows if r["method"] == method)[key]
        return str(v) if key == "points" else x(v) if key.startswith("peak") else pct(v)
    if kind == "pareto" and len(parts) == 3 and parts[2] == "nodes":
        return f"{next(w for w in load('pareto')['workloads'] if w['workload'] == parts[1])['nodes']:,}"
    if kind == "zoo" and len(parts) == 3 and parts[2] == "floor_ratio":
        return f"{next(m for m in load('zoo')['models'] if m['model'] == parts[1])['floor_ratio']:.3f}x"
    if kind == "fidelity" and len(parts) == 3:
        s = load("fidelity")["summary"]
        model, metric = parts[1], parts[2]
        if metric == "spearman":
            return f"{s[model]['spearman_latency_pooled']:.3f}"
        if metric in ("mean", "median"):
            return f"{s[model]['overhead_error_pp_' + metric]:.1f} pp"
        if metric == "share5":
            return f"{100 * s[model]['overhead_within_5pp_share']:.0f}%"
    if kind == "unet_norm" and len(parts) == 4:
        _, w, bn, key = parts
        r = next(r for r in load("unet_norm")["rows"] if r["workload"] == w and r["batch_norm"] == (bn == "bn"))
        return x(r[key])
    if kind == "workloads" and len(parts) == 3 and parts[2] == "ops":
        return f"{next(w for w in load('workloads') if w['workload'] == parts[1])['ops']:,}"
    if kind == "windows" and len(parts) == 3:
        r = next(r for r in load("windows") if r["workload"] == parts[1])
        if parts[2] == "child_seconds":  # one child's evaluation, unbounded
            return f"{1 / r['before_children_per_s']:.2f} s"
        return f"{r[parts[2]]:,.0f}"
    if kind == "substitutions" and len(parts) == 3 and parts[1] == "memory":  # the search processes' peaks
        ms = parts[2].split("+")
        return span([per[m]["memory_bytes"] / 2**20 for per in _table3().values() for m in ms], "{:.0f}", " MiB")
    if kind == "substitutions" and len(parts) == 3 and parts[1] == "gain":  # Sampling's, of the cost before
        return f"{_gain(_table3()[parts[2]]):.2f}%"
    if kind == "substitutions" and len(parts) == 5 and parts[1] == "table3":
        return _subst_value(_table3()[parts[2]][parts[3]], parts[4])
    if kind == "substitutions_long" and len(parts) in (3, 4):
        per = load("substitutions_long")["long"][parts[1]]
        if parts[2:] == ["speedup"]:  # TASO-style's time to Sampling's cost (or its whole run) over Sampling's
            taso = per["taso"]["best_seconds" if per["taso_reaches_sampling"] else "seconds"]
            return f"{taso / per['sampling']['seconds']:.0f}x"
        return _subst_value(per[parts[2]], parts[3])
    if kind in ("swapadvisor", "swapadvisor_v100") and len(parts) >= 4:
        return _swap_figure(kind, parts[1:])
    if kind == "swapadvisor_pools" and len(parts) == 3 and parts[2] == "largest":  # its largest tensor size
        r = next(r for r in load("swapadvisor_pools")["rows"] if r["workload"] == parts[1])
        return gib(max(r["allocation"]["sizes"]))
    if kind == "fusion" and len(parts) >= 5:
        return _fusion_figure(parts[1:])
    raise KeyError(".".join(parts))


# ---- rendering and checking ----------------------------------------------------------------------

def render(text: str) -> str:
    """``text`` with every marked table and figure rendered from the JSON."""
    def block(m: re.Match) -> str:
        if m["name"] not in RENDERERS:
            raise KeyError(f"no results table named {m['name']!r} (known: {', '.join(sorted(RENDERERS))})")
        return f"<!-- results:{m['name']} -->\n{RENDERERS[m['name']]()}<!-- /results:{m['name']} -->"
    text = BLOCK.sub(block, text)
    return FIG.sub(lambda m: f"<!-- fig:{m['name']} -->{figure(m['name'])}<!-- /fig -->", text)


def differences(text: str) -> list[str]:
    """One line per marked block or figure of ``text`` whose committed content is not what it renders."""
    out = []
    for m in BLOCK.finditer(text):
        want = render(m[0])
        if want != m[0]:
            got_lines, want_lines = m["body"].splitlines(), BLOCK.match(want)["body"].splitlines()
            first = next((i for i, (a, b) in enumerate(zip(got_lines, want_lines, strict=False)) if a != b),
                         min(len(got_lines), len(want_lines)))
            line = text[:m.start()].count("\n") + 2 + first
            out.append(f"results:{m['name']}, line {line}: committed "
                       f"{(got_lines[first:first + 1] or [''])[0]!r}, rendered {(want_lines[first:first + 1] or [''])[0]!r}")
    for m in FIG.finditer(text):
        want = figure(m["name"])
        if m["body"] != want:
            out.append(f"fig:{m['name']}, line {text[:m.start()].count(chr(10)) + 1}: committed {m['body']!r}, "
                       f"rendered {want!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block differs")
    a = ap.parse_args(argv)
    stale = 0
    for path in doc_files():
        text = path.read_text()
        rel = path.relative_to(ROOT)
        if a.check:
            for d in differences(text):
                print(f"{rel}: {d}")
                stale += 1
        else:
            new = render(text)
            if new != text:
                path.write_text(new)
                print(f"rendered {rel}")
    if stale:
        print(f"{stale} stale block(s): run `python bench/docs.py` (make docs)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())

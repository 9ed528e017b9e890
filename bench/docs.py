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

        def cell(m: str, per: dict = per) -> str:
            r = per.get(m)
            if r is None or r.get("error") == "not run":
                return ""
            c = _cost(r, m)
            return c if c == "-" else f"{c} ({r['seconds']:.2f}{'' if r['complete'] else '*'})"
        out.append([g.replace("_", " "), str(any_row["ops"]), f"{any_row['cost_before_ms']:.3f}",
                    *(cell(m) for m in methods)])
    return table(["graph", "ops", "before", *SUBST_LABELS[:-1]], "lrrrrrrrr", out)


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


# ---- figures in prose ----------------------------------------------------------------------------

def figure(name: str) -> str:
    """A figure by its dotted name: ``zoo.MODEL.METHOD.KEY`` and ``pareto.WORKLOAD.METHOD.KEY`` (a
    ratio or overhead of that method's row), ``zoo.MODEL.eager_peak``, ``fidelity.METRIC``."""
    parts = name.split(".")
    kind = parts[0]
    if kind in ("zoo", "pareto") and len(parts) == 4:
        _, w, method, key = parts
        rows = (next(m["rows"] for m in load("zoo")["models"] if m["model"] == w) if kind == "zoo"
                else [r for r in load("pareto")["rows"] if r["workload"] == w])
        v = next(r for r in rows if r["method"] == method)[key]
        return x(v) if key.startswith("peak") else pct(v)
    if kind == "zoo" and len(parts) == 3 and parts[2] == "floor_ratio":
        return f"{next(m for m in load('zoo')['models'] if m['model'] == parts[1])['floor_ratio']:.3f}x"
    if kind == "fidelity":
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
    raise KeyError(f"no figure named {name!r}")


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

"""Fidelity of the cost model on the CPU: simulated against measured latency overhead and peak.

    python bench/fidelity.py [--rounds 7] [--mid-budget 12] [--cache DIR] [--quick]

For the frontier points of the tiny samples (their committed plan files: MAGIS's frontier and the
peers' points -- micro-batching, offloading, sqrt(n), DTR, min-cut, Checkmate, the schedulers) and
of two mid-size workloads built here (a ResNet and a BERT that run in tens of milliseconds on this
machine; their frontier is searched in this run: MAGIS's Pareto sweep and the quick peers), each
point's exported script (``core.codegen``) is run on the CPU with its own measure functions
(``core/codegen/runtime.py``: the peak of live storage bytes, and the time of runs interleaved with
the workload's other points: each sample the fastest of back-to-back runs, each paired with a sample
of the eager point taken next to it; the measured overhead is the median of the paired ratios).  Each point's latency is
simulated three ways: the ``cpu`` profile's datasheet constants (before calibration), the profile
calibrated in this run from the points' op timings (``core.cost.calibrate``: the roofline and a
pair per op, after), and the sum of the measured op timings (``measured``, as ``--cost measured``
builds it: what was not timed -- a fission loop's slicing and combining -- on the calibrated
roofline).  Overheads are relative to the same workload's eager point,
simulated and measured in the same run.

Printed: one row per point and a summary per cost model: Spearman rank correlation of the points'
latencies (pooled, and the mean within a workload), and the overhead error (percentage points) for
the points whose measured overhead is within 30%.  JSON: ``bench/results/fidelity.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "bench" / "results" / "fidelity.json"
PEERS = ("microbatch", "offload", "sqrt_n", "dtr")  # quick on a mid-size graph
WITHIN = 0.30  # overhead error is reported for points measured within this overhead
COSTS = ("analytic", "calibrated", "measured")


# ---- workloads ------------------------------------------------------------------------------------
def tiny_names() -> list[str]:
    import sample_graphs

    return [n for n in sample_graphs.NAMES if n.endswith("_tiny") or n.startswith("fig")]


def build_resnet_mid():
    import torch

    from sample_graphs.resnet import ResNet
    from sample_graphs.sample import Sample, classify_loss, plain_forward

    module = ResNet((1, 1, 1, 1), 16, 100).train()
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 100, (8,))
    return Sample("resnet_mid", module, (x, y), classify_loss, plain_forward, torch.float32,
                  "ResNet-50-like: bottleneck blocks [1,1,1,1], width 16, batch 8, 3x64x64, 100 classes", False)


def build_bert_mid():
    import torch
    import transformers

    from sample_graphs.sample import Sample
    from sample_graphs.transformers_models import _construct, _drop_bias_alias, _tokens, mlm_forward, mlm_loss

    config = transformers.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=512, vocab_size=2000, max_position_embeddings=128,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                     attn_implementation="eager")
    module = _construct(transformers.BertForMaskedLM, config, torch.float32)
    _drop_bias_alias(module)
    ids, labels = _tokens(4, 128, config.vocab_size)
    return Sample("bert_mid", module, (ids, labels), mlm_loss, mlm_forward, torch.float32,
                  "BERT (BertForMaskedLM): 2 layers, hidden 128, 4 heads, vocab 2000, batch 4, seq 128", False)


MID = {"resnet_mid": build_resnet_mid, "bert_mid": build_bert_mid}


def tiny_points(name: str, per_method: int) -> tuple[Any, list[Any]]:
    """The sample's graph and its committed frontier, each method's points thinned to ``per_method``."""
    from core.search.plan import load_plans
    from sample_graphs.frontiers import plan_path
    from sample_graphs.store import load_sample_graph

    g = load_sample_graph(name)
    pf = load_plans(plan_path(name), g)
    return g, pick(pf.points, per_method)


def pick(points: list[Any], per_method: int) -> list[Any]:
    from core.search.plan import thin

    by: dict[str, list[Any]] = {}
    for p in points:
        by.setdefault(p.method, []).append(p)
    out = []
    for m, ps in by.items():
        if m == "eager":
            out.append(ps[0])
        else:
            out += thin(sorted(ps, key=lambda p: p.peak), per_method) if len(ps) > per_method else ps
    return out


def mid_points(name: str, budget: float, per_method: int, say) -> tuple[Any, list[Any]]:
    """A mid-size workload captured here and its frontier searched here on the ``cpu`` profile."""
    from core.cost import AnalyticCost
    from core.frontend.workload import build_fake, capture_workload
    from core.search.methods import run_method
    from core.search.moptimizer import optimize

    t0 = time.perf_counter()
    w = build_fake(MID[name])
    g = capture_workload(w, name=name)
    pf = optimize(g, pareto=True, time_budget=budget, device="cpu")
    points = list(pf.points)
    cost = AnalyticCost("cpu")
    for m in PEERS:
        try:
            run = run_method(m, g, cost, time_budget=budget / 3)
        except Exception as e:  # noqa: BLE001 -- a peer that cannot run is a note, not a stop
            say(f"  {name}: {m} failed ({type(e).__name__}: {e})")
            continue
        points += run.plans
    say(f"  {name}: {len(g)} nodes, {len(points)} frontier points in {time.perf_counter() - t0:.1f} s")
    return g, pick(points, per_method)


# ---- measurement ----------------------------------------------------------------------------------
class Point:
    def __init__(self, workload: str, k: int, plan: Any, g: Any, script_dir: Path) -> None:
        from core.codegen.emit import generate_source
        from core.codegen.verify import load_script
        from core.cost import AnalyticCost

        self.workload, self.k, self.plan, self.g = workload, k, plan, g
        self.method, self.label = plan.method, plan.label
        from core.ir.graph import NodeKind

        self.swaps = sum(1 for n in g.ops() if n.kind == NodeKind.STORE)
        self.aa = False  # a second copy of the eager point: its measured overhead is the noise floor
        path = script_dir / f"{workload}_{k}.py"
        path.write_text(generate_source(g, plan.order, schedule_name=f"{plan.method} {plan.label}",
                                        cost=AnalyticCost("cpu")))
        self.mod = load_script(path)
        self.times: list[float] = []
        self.ratios: list[float] = []  # to the eager sample taken next to each sample
        self.sim: dict[str, float] = {}
        self.sim_peak = 0
        self.measured_peak = 0


def measure_peaks(points: list[Point], tensors: dict[str, Any]) -> None:
    for p in points:
        _, mem = p.mod.measure(tensors, "cpu")
        p.measured_peak = int(mem["measured_peak_bytes"])


def measure_times(points: list[Point], tensors: dict[str, Any], rounds: int, min_run: float) -> None:
    """``rounds`` interleaved rounds (a shuffled order each round); in each, every point's sample is
    taken right next to a sample of the workload's eager point (before it in even rounds, after it in
    odd ones), so the point's overhead is the median of paired ratios: contention from other work on
    the machine that lasts longer than a pair cancels out.  One sample is the fastest of enough
    back-to-back runs to last ``min_run`` seconds (on a shared machine noise only ever adds time)."""
    rng = random.Random(0)
    inner = {}
    for p in points:  # warm-up, and how many runs make a sample
        t = min(p.mod.measure_time(p.mod.run, tensors, "cpu", repeat=2, warmup=1))
        inner[p.k] = max(1, min(20, int(min_run / max(t, 1e-6))))
    eager = next(p for p in points if p.method == "eager" and not p.aa)

    def sample(p: Point) -> float:
        return min(p.mod.measure_time(p.mod.run, tensors, "cpu", repeat=inner[p.k], warmup=0))

    for r in range(rounds):
        order = [p for p in points if p is not eager]
        rng.shuffle(order)
        for p in order:
            if r % 2 == 0:
                e, t = sample(eager), sample(p)
            else:
                t, e = sample(p), sample(eager)
            p.times.append(t)
            p.ratios.append(t / e)
            eager.times.append(e)
    eager.ratios = [1.0]


# ---- statistics -----------------------------------------------------------------------------------
def _mean(xs: list[float]) -> float | None:
    return statistics.mean(xs) if xs else None


def spearman(a: list[float], b: list[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(a) < 3:
        return None
    r = spearmanr(a, b).statistic
    return None if r != r else float(r)  # nan: a constant column


def summary(all_rows: list[dict[str, Any]]) -> dict[str, Any]:
    aa = [abs(r["measured_overhead"]) * 100 for r in all_rows if r["aa"]]
    out: dict[str, Any] = {"noise_floor_pp": {"median": statistics.median(aa) if aa else None,
                                              "max": max(aa) if aa else None,
                                              "per_workload": {r["workload"]: 100 * r["measured_overhead"]
                                                               for r in all_rows if r["aa"]}}}
    rows = [r for r in all_rows if not r["aa"]]
    workloads = sorted({r["workload"] for r in rows})
    for c in COSTS:
        lat_s = [r["sim_latency"][c] for r in rows]
        lat_m = [r["measured_latency"] for r in rows]
        per = {w: spearman([r["sim_latency"][c] for r in rows if r["workload"] == w],
                           [r["measured_latency"] for r in rows if r["workload"] == w]) for w in workloads}
        vals = [v for v in per.values() if v is not None]
        near = [r for r in rows if r["measured_overhead"] <= WITHIN and r["method"] != "eager"]
        err = [abs(r["overhead_error_pp"][c]) for r in near]
        out[c] = {"spearman_latency_pooled": spearman(lat_s, lat_m),
                  "spearman_latency_within_workload_mean": statistics.mean(vals) if vals else None,
                  "spearman_latency_within_workload": per,
                  "spearman_overhead_pooled": spearman([r["sim_overhead"][c] for r in rows if r["method"] != "eager"],
                                                       [r["measured_overhead"] for r in rows if r["method"] != "eager"]),
                  "overhead_points_within_30pct": len(near),
                  "overhead_error_pp_mean": statistics.mean(err) if err else None,
                  "overhead_error_pp_median": statistics.median(err) if err else None,
                  "overhead_error_pp_max": max(err) if err else None,
                  "overhead_within_5pp_share": sum(e <= 5 for e in err) / len(err) if err else None,
                  "overhead_error_pp_mean_without_swaps": _mean([abs(r["overhead_error_pp"][c]) for r in near
                                                                 if not r["swaps"]]),
                  "latency_ratio_median": statistics.median(s / m for s, m in zip(lat_s, lat_m, strict=True))}
    return out


# ---- main -----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds per point (median)")
    ap.add_argument("--min-run", type=float, default=0.1, help="seconds of back-to-back runs per sample (fastest)")
    ap.add_argument("--per-method", type=int, default=3, help="points kept per method and workload")
    ap.add_argument("--mid-budget", type=float, default=12.0, help="MAGIS search seconds per mid-size workload")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (one: less noise on a shared machine)")
    ap.add_argument("--cache", default=None, help="op-time cache directory (default: a fresh one: "
                                                  "calibrated in this run)")
    ap.add_argument("--workloads", default=None, help="comma-separated subset (tiny sample names, resnet_mid, bert_mid)")
    ap.add_argument("--quick", action="store_true", help="three rounds, two tiny workloads, no mid-size ones")
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    a = ap.parse_args(argv)

    import torch

    from core.cost import AnalyticCost
    from core.cost.calibrate import calibrate
    from core.cost.measured import MeasuredCost
    from core.simulate import simulate

    torch.set_num_threads(a.threads)
    t_start = time.perf_counter()
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    names = tiny_names() + list(MID)
    if a.quick:
        names, a.rounds = ["fig2_skip", "bert_tiny"], 3
    if a.workloads:
        names = [n.strip() for n in a.workloads.split(",") if n.strip()]
    tmp = tempfile.TemporaryDirectory(prefix="magis_fidelity_")
    cache = Path(a.cache) if a.cache else Path(tmp.name) / "cache"
    scripts = Path(tmp.name)

    say(f"fidelity: {len(names)} workloads, torch threads {a.threads}")
    work: dict[str, list[Point]] = {}
    for name in names:
        g0, plans = mid_points(name, a.mid_budget, a.per_method + 2, say) if name in MID else tiny_points(name, a.per_method)
        pts = [Point(name, k, p, p.graph(g0), scripts) for k, p in enumerate(plans)]
        eager = next(p for p in pts if p.method == "eager")
        aa = Point(name, len(pts), eager.plan, eager.g, scripts)
        aa.aa, aa.label = True, "A/A: eager again"
        work[name] = [*pts, aa]
    t_plans = time.perf_counter() - t_start
    say(f"  {sum(map(len, work.values()))} points exported in {t_plans:.1f} s")

    # op timings (the calibration's data and the measured cost model), then the fit
    t0 = time.perf_counter()
    measured = MeasuredCost(cache_dir=cache, fallback="cpu")
    for pts in work.values():
        for p in pts:
            measured.measure_graph(p.g)
    prof, report = calibrate("cpu", cache_dir=cache, measured=measured)
    t_cal = time.perf_counter() - t0
    say(f"  calibrated cpu from {measured.timed} op timings in {t_cal:.1f} s: median op error "
        f"{report['median_abs_rel_error_before'] * 100:.0f}% -> {report['median_abs_rel_error_after'] * 100:.0f}% "
        f"({report['median_abs_rel_error_held_out'] * 100:.0f}% on signatures held out of the fit)")
    # the measured model as ``--cost measured`` builds it: what was not timed (a fission loop's slicing
    # and combining, an op that cannot run on random data) on the calibrated roofline
    measured = MeasuredCost(cache_dir=cache, fallback=prof)
    models = {"analytic": AnalyticCost("cpu"), "calibrated": AnalyticCost(prof), "measured": measured}
    for pts in work.values():
        for p in pts:
            for c, m in models.items():
                s = simulate(p.g, p.plan.order, m, validate=False)
                p.sim[c] = s.latency
                p.sim_peak = s.peak

    # end-to-end: peak once, then interleaved timing rounds per workload
    t0 = time.perf_counter()
    for name, pts in work.items():
        tensors = pts[0].mod.make_inputs(pts[0].mod.INPUTS, 0)
        measure_peaks(pts, tensors)
        measure_times(pts, tensors, a.rounds, a.min_run)
        say(f"  {name}: {len(pts)} points timed ({time.perf_counter() - t0:.0f} s so far)")
    t_run = time.perf_counter() - t0

    rows = []
    for name, pts in work.items():
        eager = next(p for p in pts if p.method == "eager" and not p.aa)
        for p in pts:
            m = statistics.median(p.times)
            mo = statistics.median(p.ratios) - 1
            so = {c: p.sim[c] / eager.sim[c] - 1 for c in COSTS}
            rows.append({"workload": name, "point": p.k, "method": p.method, "label": p.label, "aa": p.aa,
                         "swaps": p.swaps,
                         "ops": len(p.plan.order), "measured_latency": m,
                         "measured_latency_spread": (max(p.times) - min(p.times)) / m,
                         "sim_latency": dict(p.sim), "measured_overhead": mo, "sim_overhead": so,
                         "overhead_error_pp": {c: 100 * (so[c] - mo) for c in COSTS},
                         "sim_peak": p.sim_peak, "measured_peak": p.measured_peak,
                         "peak_ratio": p.measured_peak / p.sim_peak if p.sim_peak else None})
    summ = summary(rows)
    print_table(rows, summ)
    doc = {"machine": "cpu", "torch_threads": a.threads, "rounds": a.rounds, "per_method": a.per_method,
           "within": WITHIN, "workloads": names, "calibrated_profile": report | {"constants": {
               "launch_overhead": prof.launch_overhead, "view_overhead": prof.view_overhead,
               "matmul_float32": prof.matmul_peak("float32") * prof.compute_efficiency,
               "vector_flops": prof.vector_flops * prof.compute_efficiency,
               "mem_bandwidth": prof.mem_bandwidth * prof.memory_efficiency, "host_bandwidth": prof.host_bandwidth}},
           "op_timings": measured.timed, "op_fallbacks": measured.failures, "summary": summ, "rows": rows,
           "seconds": {"plans": t_plans, "calibration": t_cal, "timing": t_run,
                       "total": time.perf_counter() - t_start}}
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"wrote {a.output} ({time.perf_counter() - t_start:.0f} s)")
    return 0


def print_table(rows: list[dict[str, Any]], summ: dict[str, Any]) -> None:
    print(f"{'workload':<14}{'method':<14}{'label':<22}{'meas ms':>9}{'meas ov':>9}"
          f"{'analytic':>10}{'calibr.':>9}{'measured':>10}{'peak m/s':>10}{'swaps':>6}")
    for r in rows:
        so = r["sim_overhead"]
        print(f"{r['workload']:<14}{r['method']:<14}{r['label'][:21]:<22}{r['measured_latency'] * 1e3:>9.2f}"
              f"{r['measured_overhead'] * 100:>8.1f}%{so['analytic'] * 100:>9.1f}%{so['calibrated'] * 100:>8.1f}%"
              f"{so['measured'] * 100:>9.1f}%{r['peak_ratio']:>10.3f}{r['swaps']:>6}")
    print()
    print(f"{'cost model':<12}{'rho lat (pooled)':>17}{'rho lat (per wl)':>17}{'rho overhead':>13}"
          f"{'|err| pp mean':>14}{'median':>8}{'max':>8}{'<=5pp':>7}{'sim/meas':>9}")
    for c in COSTS:
        s = summ[c]
        f = lambda x, fmt: "n/a" if x is None else format(x, fmt)  # noqa: E731
        print(f"{c:<12}{f(s['spearman_latency_pooled'], '.3f'):>17}{f(s['spearman_latency_within_workload_mean'], '.3f'):>17}"
              f"{f(s['spearman_overhead_pooled'], '.3f'):>13}{f(s['overhead_error_pp_mean'], '.1f'):>14}"
              f"{f(s['overhead_error_pp_median'], '.1f'):>8}{f(s['overhead_error_pp_max'], '.1f'):>8}"
              f"{f(s['overhead_within_5pp_share'], '.0%'):>7}{f(s['latency_ratio_median'], '.2f'):>9}")
    nf = summ["noise_floor_pp"]
    print(f"(overhead error: points with a measured overhead <= {WITHIN:.0%}, "
          f"{summ['analytic']['overhead_points_within_30pct']} of them; rho: Spearman; without the points "
          f"that swap: " + ", ".join(f"{c} {summ[c]['overhead_error_pp_mean_without_swaps']:.1f}" for c in COSTS)
          + " pp mean)")
    print(f"noise floor (eager against itself, |overhead|): median {nf['median']:.1f} pp, max {nf['max']:.1f} pp")


if __name__ == "__main__":
    sys.exit(main())

"""Incremental vs full scheduling (MAGIS section 7.3, Figure 14).

    python bench/incremental.py [--graphs 10] [--rounds 10] [--cells 8] [--blocks 5]

Protocol of the paper: 10 random NASNet-like graphs x 10 rounds of local transformations after an
initial schedule.  Each round applies one random local rewrite (an op split in two, an op inserted
on an edge, an op split into two halves + a merge, two chained ops fused; half of the time at a
producer of the current schedule's memory hot-spots, as MAGIS picks rewrite sites), then schedules the new
graph twice: incremental scheduling (IS, ``incremental_schedule`` around the mutated nodes, from
the previous round's IS schedule) and full scheduling (FS, the ``incremental`` scheduler:
GraphPartition + Serenity's DP on the whole graph).  Reports the speedup IS/FS per test and how
many of the tests IS reaches FS's peak (paper: 4-30x, 10x mean; 94/100).  Memory is counted as in
HMCOS (inference: graph inputs freed after their last use, weights not counted).

With ``--perturb substitution`` the rounds are the paper's own perturbation, TASO-style
substitutions: the graphs are the captured inference graphs of the nine NAS networks and
Inception-v3, and each round applies one substitution chosen at random among the graph's matches
(every rule of ``transform.substitution``, commutativity included; half of the time one that
replaces a producer of a memory hot-spot); the mutated nodes are the ones it created and the
readers it re-pointed.  Writes bench/results/incremental_substitution.json.

Writes bench/results/incremental.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.analysis.lifetimes import check_schedule, memory_profile  # noqa: E402
from core.schedule.incremental import IncrementalFull, incremental_schedule  # noqa: E402
from sample_graphs.nas_random import local_rewrite, random_nasnet  # noqa: E402

MODEL = {"free_inputs": True, "count_weights": False}


def _forward(name: str):
    from sample_graphs.store import load_sample_graph

    return load_sample_graph(name, "forward")


def substitution_round(g, rng: random.Random, hot: set[int]):
    """One substitution at random on a copy of ``g``: (new graph, mutated ids, rule name)."""
    from core.errors import RuleNotApplicable
    from core.transform.substitution import SUBSTITUTE_RULES

    new = g.copy()
    apps = [(r, a) for r in SUBSTITUTE_RULES for a in r.match(new)]
    near = [(r, a) for r, a in apps if hot.intersection(a.params[:r.sub.n_source])]
    rng.shuffle(apps)
    if near and rng.random() < 0.5:
        apps = [rng.choice(near)] + apps
    for r, a in apps:
        try:
            log = r.apply(new, a)
        except RuleNotApplicable:
            continue
        made = set(log.added())
        mutated = made | {u for v in made for u in new.users(v)} | {
            e.nid for e in log.edits if e.kind == "args" and e.nid in new.nodes}
        return new, mutated, r.name
    raise RuntimeError(f"no substitution applies to {g.name}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--cells", type=int, default=11)
    p.add_argument("--normal", type=int, default=3, help="normal cells between reductions")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3, help="time each scheduler as the best of N runs")
    p.add_argument("--perturb", choices=("synthetic", "substitution"), default="synthetic",
                   help="the rounds' rewrites: random local rewrites of synthetic NASNet-like graphs, or "
                        "substitutions (TASO's rules) on the captured NAS networks and Inception-v3")
    a = p.parse_args()
    subst = a.perturb == "substitution"
    if subst:
        from sample_graphs.nas import NAS_NAMES, nas_graph

        names = [*NAS_NAMES, "inception_v3"][: a.graphs]
    tests = []
    print(f"{'graph':>5} {'round':>5} {'ops':>5} {'rewrite':>11} {'window':>7} {'IS ms':>8} {'FS ms':>8} "
          f"{'speedup':>8} {'IS peak':>9} {'FS peak':>9}  same")
    for gi in range(len(names) if subst else a.graphs):
        if subst:
            g = nas_graph(names[gi]) if names[gi] in NAS_NAMES else _forward(names[gi])
        else:
            g = random_nasnet(gi, cells=a.cells, blocks=a.blocks, normal=a.normal)
        prev_fs = None
        rng = random.Random(1000 + gi)
        order = IncrementalFull(**MODEL).run(g).order
        for r in range(a.rounds):
            prof = memory_profile(g, order, **MODEL)
            hot = {s.root.node for s in prof.hotspots()}
            if subst:
                new, mutated, kind = substitution_round(g, rng, hot)
            else:
                new, mutated = local_rewrite(g, rng, focus=hot)
                kind = new.nodes[max(mutated)].name.split("_")[0] if mutated else "?"
            info: dict = {}
            t_is = None
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                o_is = incremental_schedule(g, order, new, mutated, info=info, **MODEL)
                dt = time.perf_counter() - t0
                t_is = dt if t_is is None else min(t_is, dt)
            check_schedule(new, o_is)
            t_fs, s_fs = None, None
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                s_fs = IncrementalFull(**MODEL).run(new)
                dt = time.perf_counter() - t0
                t_fs = dt if t_fs is None else min(t_fs, dt)
            p_is = memory_profile(new, o_is, **MODEL).peak
            p_fs = s_fs.peak
            row = {"graph": gi, "round": r, "ops": len(new.ops()), "rewrite": kind,
                   "window_ops": info.get("window_ops"), "is_seconds": t_is, "fs_seconds": t_fs,
                   "speedup": t_fs / t_is, "is_peak": p_is, "fs_peak": p_fs,
                   "same_peak": p_is == p_fs, "is_not_worse": p_is <= p_fs,
                   "fs_peak_changed": prev_fs is not None and p_fs != prev_fs}
            prev_fs = p_fs
            tests.append(row)
            print(f"{gi:>5} {r:>5} {row['ops']:>5} {kind[:11]:>11} {row['window_ops']:>7} {t_is * 1e3:>8.1f} "
                  f"{t_fs * 1e3:>8.1f} {row['speedup']:>7.1f}x {p_is:>9} {p_fs:>9}  "
                  f"{'=' if p_is == p_fs else ('<' if p_is < p_fs else '>')}", flush=True)
            g, order = new, o_is
    sp = [t["speedup"] for t in tests]
    same = sum(t["same_peak"] for t in tests)
    not_worse = sum(t["is_not_worse"] for t in tests)
    ratios = [t["is_peak"] / t["fs_peak"] for t in tests]
    changed = [t for t in tests if t["fs_peak_changed"]]
    summary = {
        "tests": len(tests), "speedup_min": min(sp), "speedup_max": max(sp),
        "speedup_mean": statistics.mean(sp), "speedup_geomean": statistics.geometric_mean(sp),
        "same_peak": same, "is_not_worse": not_worse, "peak_ratio_max": max(ratios),
        "rewrites_that_moved_the_peak": len(changed),
        "same_peak_among_those": sum(t["same_peak"] for t in changed),
        "paper": {"speedup": "4-30x, 10x mean", "same_peak": "94/100"},
        "config": vars(a),
    }
    print(f"\nspeedup IS vs FS: {summary['speedup_min']:.1f}x - {summary['speedup_max']:.1f}x "
          f"(mean {summary['speedup_mean']:.1f}x, geomean {summary['speedup_geomean']:.1f}x); "
          f"same peak as FS in {same}/{len(tests)} tests, not worse in {not_worse}/{len(tests)}; "
          f"worst IS/FS peak ratio {summary['peak_ratio_max']:.3f}; the rewrite moved FS's peak in "
          f"{len(changed)} tests, IS matched it in {summary['same_peak_among_those']} of them")
    print("paper (MAGIS Fig. 14): 4-30x, 10x mean; same peak in 94/100")
    out = ROOT / "bench" / "results" / ("incremental_substitution.json" if subst else "incremental.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "tests": tests}, indent=1))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

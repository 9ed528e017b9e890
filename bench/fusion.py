"""Explanation-guided layer fusion (GET) on three inference CNNs: EfficientNet-B3-, ResNet-152- and
MobileNetV2-style forward graphs (batch 1, float32), buffers of 128/256/512 KiB, LBDF and BRR.

For every (graph, scheme, buffer) and every search (random, local, NSGA-II on DRAM and the number of
groups), the DRAM traffic of the best plan after 1k and 4k plans (runs of 4k plans, their curves read
at 1k; the mean over ``--seeds`` seeded runs), with invalid groups split at random (the searches' baseline) or by GET's tree split guided by
the gradient explainer (with ``--oracle-searches``, also by the oracle: F_beta itself); GNNExplainer-guided searches on
EfficientNet-B3 / LBDF / 256 KiB (it is ~25x slower per explanation).  Then the fraction of invalid
groups each explainer rectifies (100 invalid groups sampled from random plans per configuration),
the validity classifiers' held-out accuracy (one per scheme, trained on groups of the three graphs),
and seconds.  Prints the tables and writes JSON.

    python bench/fusion.py [--budgets 1000,4000] [--betas 128,256,512] [--seeds 3] [--jobs 2]
                           [--json bench/results/fusion.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from core.ir import io  # noqa: E402
from core.search.fusion.explain import oracle_explainer, random_explainer  # noqa: E402
from core.search.fusion.gnn import gnn_explainer, gradient_explainer, validity_model  # noqa: E402
from core.search.fusion.problem import FusionProblem, check_plan  # noqa: E402
from core.search.fusion.search import SEARCHES, decode, run_search  # noqa: E402
from core.search.fusion.split import Splitter  # noqa: E402
from sample_graphs.store import graph_path  # noqa: E402

GRAPHS = ["efficientnet_b3", "resnet152", "mobilenet_v2"]
SCHEMES = ["lbdf", "brr"]
KIB = 1024
MB = 1e6
GNN_CONFIG = ("efficientnet_b3", "lbdf", 256)


def problems(scheme: str) -> list[FusionProblem]:
    return [FusionProblem(io.load(graph_path(n, "forward")), scheme) for n in GRAPHS]


def invalid_groups(p: FusionProblem, beta: float, count: int, seed: int) -> list[frozenset[int]]:
    """Invalid groups (two ops or more) of random plans."""
    rng = np.random.default_rng(seed)
    bad = set(p.unfusable(beta))
    out: list[frozenset[int]] = []
    seen: set[frozenset[int]] = set()
    for _ in range(200 * count):
        cuts = rng.random(p.n - 1) < rng.uniform(0.02, 0.5)
        for v in bad:
            cuts[max(v - 1, 0)] = True
            cuts[min(v, p.n - 2)] = True
        for gr in decode(p, cuts):
            if len(gr) > 1 and gr not in seen and not p.valid(gr, beta):
                seen.add(gr)
                out.append(gr)
        if len(out) >= count:
            break
    return out[:count]


def run_config(job: tuple[str, str, int, list[int], int, bool, int, bool, int]) -> dict:
    name, scheme, kib, budgets, rectify_groups, oracle_searches, top_k, rectify_only, seeds = job
    torch.set_num_threads(1)
    beta = kib * KIB
    ps = problems(scheme)
    p = ps[GRAPHS.index(name)]
    model = validity_model(ps)  # cached by the main process
    explainers = {"none": None, "grad": gradient_explainer(model)}
    if oracle_searches:
        explainers["oracle"] = oracle_explainer
    row: dict = {"graph": name, "scheme": scheme, "buffer_kib": kib, "ops": p.n,
                 "unfusable": len(p.unfusable(beta)), "trivial_dram": p.total_dram(p.trivial()), "search": {}}
    runs = [] if rectify_only else [(s, e, max(budgets)) for s in SEARCHES for e in explainers]
    if (name, scheme, kib) == GNN_CONFIG and not rectify_only:
        explainers["gnn"] = gnn_explainer(model)
        runs += [(s, "gnn", min(budgets)) for s in SEARCHES]
    for search, ex, budget in runs:
        per_seed = []
        for seed in range(seeds):
            t0 = time.perf_counter()
            sp = Splitter(p, beta, explainers[ex], seed=seed)
            r = run_search(p, beta, search, sp, budget, seed=seed)
            assert not check_plan(p, r.groups) and all(len(x) == 1 or p.valid(x, beta) for x in r.groups)
            per_seed.append({
                "best": {str(b): r.best_at(b) for b in budgets if b <= budget}, "groups": len(r.groups),
                "max_buffer": max((p.buffer(x) for x in r.groups if p.valid(x, beta)), default=0.0),
                "invalid": sp.stats.invalid, "rectify_rate": sp.stats.rectify_rate,
                "seconds": time.perf_counter() - t0})
        # the searches are seeded: the mean over seeds, so that one lucky or unlucky walk decides nothing
        row["search"][f"{search}/{ex}"] = {
            "best": {b: float(np.mean([x["best"][b] for x in per_seed])) for b in per_seed[0]["best"]},
            "best_per_seed": [x["best"] for x in per_seed],
            "groups": float(np.mean([x["groups"] for x in per_seed])),
            "max_buffer": max(x["max_buffer"] for x in per_seed),
            "invalid": int(sum(x["invalid"] for x in per_seed)),
            "rectify_rate": float(np.mean([x["rectify_rate"] for x in per_seed])),
            "seconds": float(np.mean([x["seconds"] for x in per_seed]))}
    groups = invalid_groups(p, beta, rectify_groups, seed=1)
    rect: dict = {"top_k": top_k, "groups": len(groups), "mean_size": float(np.mean([len(x) for x in groups])) if groups else 0.0}
    base = Splitter(p, beta, None, seed=0)
    rect["random_split_dram"] = sum(p.total_dram(base.repair(x)) for x in groups)
    for ex_name, ex in (("gnn", gnn_explainer(model)), ("grad", gradient_explainer(model)),
                        ("oracle", oracle_explainer), ("random", random_explainer(0))):
        sp = Splitter(p, beta, ex, seed=0, top_k=top_k)
        t0 = time.perf_counter()
        dram = sum(p.total_dram(sp.repair(x)) for x in groups)
        rect[ex_name] = {"rectify_rate": sp.stats.rectify_rate, "one_cut_rate": sp.stats.as_dict()["one_cut_rate"],
                         "dram": dram, "seconds": time.perf_counter() - t0}
    row["rectify"] = rect
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budgets", default="1000,4000")
    ap.add_argument("--betas", default="128,256,512", help="buffers in KiB")
    ap.add_argument("--graphs", default=",".join(GRAPHS))
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--rectify-groups", type=int, default=100)
    ap.add_argument("--top-k", type=int, default=6, help="explanation edges per group (default: %(default)s)")
    ap.add_argument("--rectify-only", action="store_true", help="only the rectify rates (no searches)")
    ap.add_argument("--oracle-searches", action="store_true", help="also run the searches split by the oracle")
    ap.add_argument("--seeds", type=int, default=3,
                    help="runs of every search (seeds 0 .. N-1); tables give the mean best DRAM (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", default="bench/results/fusion.json")
    a = ap.parse_args()
    budgets = [int(x) for x in a.budgets.split(",")]
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    classifiers = {}
    for scheme in a.schemes.split(","):
        m = validity_model(problems(scheme))
        classifiers[scheme] = {"accuracy": m.accuracy, "majority": m.majority, "samples": m.samples,
                               "train_seconds": m.seconds, "cached": m.cached}
        print(f"classifier {scheme}: held-out accuracy {m.accuracy:.1%} (majority class {m.majority:.1%}), "
              f"{m.samples} groups, {'cached' if m.cached else f'trained in {m.seconds:.1f} s'}", flush=True)
    jobs = [(g, s, int(b), budgets, a.rectify_groups, a.oracle_searches, a.top_k, a.rectify_only, a.seeds) for g in a.graphs.split(",") for s in a.schemes.split(",")
            for b in a.betas.split(",")]
    rows = []
    with get_context("fork").Pool(a.jobs) as pool:
        for row in pool.imap(run_config, jobs):
            rows.append(row)
            print(f"done {row['graph']} {row['scheme']} {row['buffer_kib']} KiB", flush=True)
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)  # what is done so far, if stopped
            Path(a.json).write_text(json.dumps({"budgets": budgets, "seeds": a.seeds, "classifiers": classifiers,
                                                "rows": rows, "partial": True}, indent=1))
    seconds = time.perf_counter() - t_start
    report(rows, classifiers, budgets, seconds)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"budgets": budgets, "seeds": a.seeds, "classifiers": classifiers,
                                        "rows": rows, "seconds": seconds}, indent=1))
    print(f"wrote {a.json}")


def report(rows: list[dict], classifiers: dict, budgets: list[int], seconds: float) -> None:
    if rows and rows[0]["search"]:
        report_searches(rows, budgets)
    report_rectify(rows)
    for s, c in classifiers.items():
        print(f"classifier {s}: held-out accuracy {c['accuracy']:.1%} (majority class {c['majority']:.1%})")
    print(f"total {seconds:.0f} s")


def report_searches(rows: list[dict], budgets: list[int]) -> None:
    lo, hi = str(min(budgets)), str(max(budgets))
    print(f"\nDRAM traffic of the best plan (MB, mean over the seeds), random split / gradient-guided "
          f"(/ oracle-guided), after {lo} and {hi} plans")
    head = f"{'graph':<16}{'scheme':<6}{'KiB':>5}{'unfused':>9}{'trivial':>9}"
    for s in SEARCHES:
        head += f" | {s + f' {lo}':>22} {s + f' {hi}':>22}"
    print(head)
    checks = {"never_worse": [0, 0], "guided_1k_beats_random_4k": [0, 0], "guided_1k_ties_random_4k": [0, 0]}
    for r in rows:
        line = f"{r['graph']:<16}{r['scheme']:<6}{r['buffer_kib']:>5}{r['unfusable']:>9}{r['trivial_dram'] / MB:>9.1f}"
        for s in SEARCHES:
            for b in (lo, hi):
                vals = [r["search"][f"{s}/{e}"]["best"][b] / MB for e in ("none", "grad", "oracle")
                        if f"{s}/{e}" in r["search"]]
                line += f" {'/'.join(f'{v:.1f}' for v in vals):>22}"
                checks["never_worse"][0] += vals[1] <= vals[0] + 1e-9
                checks["never_worse"][1] += 1
            g1 = r["search"][f"{s}/grad"]["best"][lo]
            checks["guided_1k_beats_random_4k"][0] += g1 < r["search"][f"{s}/none"]["best"][hi]
            checks["guided_1k_beats_random_4k"][1] += 1
            checks["guided_1k_ties_random_4k"][0] += g1 <= r["search"][f"{s}/none"]["best"][hi] + 1e-9
            checks["guided_1k_ties_random_4k"][1] += 1
        print(line)
    print("\nGNNExplainer-guided searches (EfficientNet-B3, LBDF, 256 KiB), best DRAM (MB) after "
          f"{lo} plans, against the random split and the gradient explainer:")
    for r in rows:
        if (r["graph"], r["scheme"], r["buffer_kib"]) == GNN_CONFIG:
            for s in SEARCHES:
                gnn = r["search"][f"{s}/gnn"]
                print(f"  {s:<7} gnn {gnn['best'][lo] / MB:.1f} ({gnn['seconds']:.0f} s)  grad "
                      f"{r['search'][f'{s}/grad']['best'][lo] / MB:.1f}  random split "
                      f"{r['search'][f'{s}/none']['best'][lo] / MB:.1f}")
            best = min(v["best"][hi] for k, v in r["search"].items() if hi in v["best"] and not k.endswith("none"))
            print(f"  reduction against the unfused plan (best guided, {hi} plans): "
                  f"{1 - best / r['trivial_dram']:.1%}")
    nw, gb = checks["never_worse"], checks["guided_1k_beats_random_4k"]
    print(f"gradient-guided <= random split: {nw[0]}/{nw[1]} (search x budget x configuration)")
    gt = checks["guided_1k_ties_random_4k"]
    print(f"gradient-guided at {lo} plans < random split at {hi} plans: {gb[0]}/{gb[1]} (<=: {gt[0]}/{gt[1]})")


def report_rectify(rows: list[dict]) -> None:
    print(f"\nInvalid groups rectified by the explanation cuts (at most {rows[0]['rectify'].get('top_k', 6)} explanation "
          "edges per group; rectify rate, one-cut rate, seconds per group)")
    print(f"{'graph':<16}{'scheme':<6}{'KiB':>5}{'groups':>7}{'size':>6}" + "".join(
        f"{e:>24}" for e in ("gnn", "grad", "oracle", "random")))
    rates: dict[str, list[float]] = {e: [] for e in ("gnn", "grad", "oracle", "random")}
    for r in rows:
        rc = r["rectify"]
        line = f"{r['graph']:<16}{r['scheme']:<6}{r['buffer_kib']:>5}{rc['groups']:>7}{rc['mean_size']:>6.1f}"
        for e in rates:
            if rc["groups"]:
                rates[e].append(rc[e]["rectify_rate"])
            per = rc[e]["seconds"] / max(rc["groups"], 1)
            line += f"{rc[e]['rectify_rate']:>9.0%}{rc[e]['one_cut_rate']:>6.0%}{per * 1e3:>7.1f}ms"
        print(line)
    print("  mean rectify rate: " + ", ".join(f"{e} {np.mean(v):.0%} (min {min(v):.0%})" for e, v in rates.items() if v))
    print("  DRAM of the repaired groups (MB): random split " + f"{sum(r['rectify']['random_split_dram'] for r in rows) / MB:.1f}, "
          + ", ".join(f"{e} {sum(r['rectify'][e]['dram'] for r in rows) / MB:.1f}" for e in rates))


if __name__ == "__main__":
    main()

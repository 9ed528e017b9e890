"""Precomputed memory/latency frontiers of the samples: ``sample_graphs/plans/<name>.train.plan.json.gz``.

One plan file per sample (``core.search.plan``), made on the RTX 3090 profile: the M-Optimizer's
Pareto sweep (``optimize(pareto=True)``, its frontier thinned to 32 points spread over its peaks),
then every other method's points -- the micro-batching and offloading baselines, sqrt(n), DTR, torch's
min-cut partitioner, Checkmate on the small graphs, the memory-aware schedulers where their size caps
allow -- and PyTorch's eager order.  The
app opens a sample with its frontier from here, so the memory slider works at once.  Regenerate with ``python -m sample_graphs.frontiers [NAME ...]``
(``make frontiers``): about a minute per small sample and three per paper-size one on a 2-core
machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import sample_graphs

PLAN_DIR = Path(__file__).resolve().parent / "plans"
DEVICE = "rtx3090"
PEER_METHODS = ("microbatch", "offload", "sqrt_n", "dtr", "torch_mincut", "checkmate", "rpo", "serenity", "hmcos")
CHECKMATE_MAX_NODES = 800  # Checkmate's MILP is quadratic in the ops: only the small samples (its ``max_nodes``)
MAGIS_POINTS = 32  # the M-Optimizer's frontier thinned to this many points, spread over its peaks


def plan_path(name: str, mode: str = "train") -> Path:
    return PLAN_DIR / f"{name}.{mode}.plan.json.gz"


def budgets(n_nodes: int) -> tuple[float, float]:
    """(M-Optimizer seconds, seconds per peer) for a graph of ``n_nodes``."""
    return (20.0, 8.0) if n_nodes < 1500 else (60.0, 20.0)


def frontier(name: str, *, time_budget: float | None = None, peer_budget: float | None = None,
             say=print):
    """The plan file of sample ``name``: MAGIS's frontier, the peers' points, eager last."""
    from core.cost.model import AnalyticCost
    from core.frontend.workload import build_fake
    from core.search.methods import METHODS, run_method
    from core.search.moptimizer import optimize
    from core.search.plan import thin

    from .store import load_sample_graph

    g = load_sample_graph(name)
    tb, pb = budgets(len(g))
    tb, pb = time_budget or tb, peer_budget or pb
    t0 = time.perf_counter()
    pf = optimize(g, pareto=True, time_budget=tb, device=DEVICE)
    magis, eager = thin(pf.points[:-1], MAGIS_POINTS), pf.points[-1]
    say(f"  magis: {len(pf.points) - 1} points in {time.perf_counter() - t0:.1f} s, {len(magis)} kept")
    cost = AnalyticCost(DEVICE)
    peers, failures = [], {}
    for m in PEER_METHODS:
        t1 = time.perf_counter()
        opts = {"max_nodes": CHECKMATE_MAX_NODES} if m == "checkmate" else {}
        model = build_fake(lambda: sample_graphs.build(name)) if "model" in METHODS[m].needs else None
        try:
            run = run_method(m, g, cost, time_budget=pb, model=model, **opts)
        except Exception as e:  # noqa: BLE001 -- a peer that cannot run here is a note, not a stop
            failures[m] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            say(f"  {m}: failed ({failures[m]})")
            continue
        peers += run.plans
        if run.failures:
            failures[m] = "; ".join(f"{f.label}: {f.reason}" for f in run.failures)[:400]
        say(f"  {m}: {len(run.plans)} points in {time.perf_counter() - t1:.1f} s")
    pf.points = [*magis, *peers, eager]
    pf.meta.update({"generated_by": "python -m sample_graphs.frontiers", "peer_budget": pb,
                    "peer_failures": failures})
    return pf


def main(argv: list[str] | None = None) -> int:
    from core.search.plan import save_plans

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="samples (default: all)")
    p.add_argument("--time-budget", type=float, help="M-Optimizer seconds (default: 20, 60 for paper-size)")
    p.add_argument("--peer-budget", type=float, help="seconds per peer (default: 8, 20 for paper-size)")
    a = p.parse_args(argv)
    for name in a.names or sample_graphs.NAMES:
        if name not in sample_graphs.NAMES:
            p.error(f"unknown sample {name!r}; samples: {', '.join(sample_graphs.NAMES)}")
    PLAN_DIR.mkdir(exist_ok=True)
    for name in a.names or sample_graphs.NAMES:
        t0 = time.perf_counter()
        print(f"{name} ...", flush=True)
        pf = frontier(name, time_budget=a.time_budget, peer_budget=a.peer_budget,
                      say=lambda s: print(s, flush=True))
        path = save_plans(pf, plan_path(name))
        print(f"{name}: {len(pf.points)} points in {time.perf_counter() - t0:.1f} s -> {path.name} "
              f"({path.stat().st_size // 1024} KiB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

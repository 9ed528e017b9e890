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
from typing import TYPE_CHECKING

import sample_graphs

if TYPE_CHECKING:
    from core.search.plan import PlanFile

PLAN_DIR = Path(__file__).resolve().parent / "plans"
DEVICE = "rtx3090"
def peer_methods() -> list[str]:
    """Every method but MAGIS and eager, in registry order: the peers, the baselines, the schedulers."""
    from core.search.methods import PEER_FAMILIES, methods_of

    return [m for m in methods_of(*PEER_FAMILIES, "scheduler") if m != "eager"]


CHECKMATE_MAX_NODES = 800  # Checkmate's MILP is quadratic in the ops: only the small samples (its ``max_nodes``)
MAGIS_POINTS = 32  # the M-Optimizer's frontier thinned to this many points, spread over its peaks


def plan_path(name: str, mode: str = "train") -> Path:
    return PLAN_DIR / f"{name}.{mode}.plan.json.gz"


def budgets(n_nodes: int) -> tuple[float, float]:
    """(M-Optimizer seconds, seconds per peer) for a graph of ``n_nodes``."""
    return (20.0, 8.0) if n_nodes < 1500 else (60.0, 20.0)


def frontier(name: str, *, time_budget: float | None = None, peer_budget: float | None = None,
             say=print, methods: list[str] | None = None):
    """The plan file of sample ``name``: MAGIS's frontier, the peers' points, eager last.  With
    ``methods`` (peers only, no "magis") those are run again and merged into the sample's plan file
    (``merge_plans``: MAGIS's points and the other methods' stay)."""
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
    old = None
    if methods is not None and "magis" not in methods:
        from core.search.plan import PlanFile, load_plans, merge_plans
        from core.search.wl_hash import graph_hash

        old = load_plans(plan_path(name), g) if plan_path(name).exists() else None
        eager_plan = METHODS["eager"].run(g, AnalyticCost(DEVICE)).plans[0]
        pf = PlanFile(g.name, graph_hash(g), DEVICE, [eager_plan], [], {"methods": list(methods)})
        magis, eager = [], eager_plan
    else:
        pf = optimize(g, pareto=True, time_budget=tb, device=DEVICE)
        magis, eager = thin(pf.points[:-1], MAGIS_POINTS), pf.points[-1]
        say(f"  magis: {len(pf.points) - 1} points in {time.perf_counter() - t0:.1f} s, {len(magis)} kept")
    cost = AnalyticCost(DEVICE)
    peers, failures = [], {}
    for m in [m for m in (methods or peer_methods()) if m != "magis"]:
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
    return pf if old is None else merge_plans(old, pf)


def resimulate(name: str, say=print) -> PlanFile:
    """Sample ``name``'s plan file with every point's metrics simulated again by the current cost
    model (its applications replayed, its order timed): after a change of the cost model, the
    stored numbers are what the app and ``bench/`` compute, without searching again."""
    from core.cost.model import AnalyticCost
    from core.search.plan import load_plans, replay
    from core.simulate import simulate

    from .store import load_sample_graph

    g = load_sample_graph(name)
    pf = load_plans(plan_path(name), g)
    cost = AnalyticCost(pf.device)
    moved = 0
    for p in pf.points:
        h = replay(g, p.applications)
        m = simulate(h, p.order, cost).metrics()
        moved += any(abs(m[k] - p.metrics.get(k, 0)) > 1e-12 * max(1.0, abs(m[k])) for k in m)
        p.metrics.update(m)
    say(f"  {moved} of {len(pf.points)} points changed")
    return pf


def main(argv: list[str] | None = None) -> int:
    from core.search.plan import save_plans

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="samples (default: all)")
    p.add_argument("--time-budget", type=float, help="M-Optimizer seconds (default: 20, 60 for paper-size)")
    p.add_argument("--peer-budget", type=float, help="seconds per peer (default: 8, 20 for paper-size)")
    p.add_argument("--methods", help="comma-separated peers to run again and merge into the existing plan "
                                     "files (MAGIS's points and the other methods' stay)")
    p.add_argument("--resimulate", action="store_true",
                   help="simulate every stored point again with the current cost model (no search)")
    a = p.parse_args(argv)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()] if a.methods else None
    from core.search.methods import METHODS

    for m in methods or []:
        if m not in METHODS:
            p.error(f"unknown method {m!r}; methods: {', '.join(METHODS)}")
    for name in a.names or sample_graphs.NAMES:
        if name not in sample_graphs.NAMES:
            p.error(f"unknown sample {name!r}; samples: {', '.join(sample_graphs.NAMES)}")
    PLAN_DIR.mkdir(exist_ok=True)
    for name in a.names or sample_graphs.NAMES:
        t0 = time.perf_counter()
        print(f"{name} ...", flush=True)
        if a.resimulate:
            pf = resimulate(name, say=lambda s: print(s, flush=True))
        else:
            pf = frontier(name, time_budget=a.time_budget, peer_budget=a.peer_budget,
                          say=lambda s: print(s, flush=True), methods=methods)
        path = save_plans(pf, plan_path(name))
        print(f"{name}: {len(pf.points)} points in {time.perf_counter() - t0:.1f} s -> {path.name} "
              f"({path.stat().st_size // 1024} KiB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

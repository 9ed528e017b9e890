"""Child M-States evaluated per second: the old pipeline (copy + incremental_schedule + simulate)
against delta evaluation (``core.search.delta``), side by side in one run.

    python bench/states.py [--workloads bert_base gpt_neo_1_3b btlm_3b] [--children 200] [--old 8]

Each child applies one local rule on a memory hot-spot tensor (Remat: one reader of a hot-spot gets
a recomputed copy), reschedules incrementally (MAGIS Algorithm 2) and evaluates peak and latency.
The new pipeline runs a best-first walk: evaluate every child of the working state, move to the
best one (``commit``), repeat -- moves are counted in its time.  Every delta result (peak, latency,
graph hash) is then checked against a from-scratch evaluation of the same graph and schedule
(``simulate`` + ``graph_hash``) outside the timed part.  Memory per queued state is measured with
tracemalloc (``state_bytes``).  Writes bench/results/states.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.schedule.baselines import TracedOrder  # noqa: E402
from core.schedule.incremental import incremental_schedule  # noqa: E402
from core.search.delta import DeltaEvaluator  # noqa: E402
from core.search.mstate import MState  # noqa: E402
from core.search.wl_hash import graph_hash  # noqa: E402
from core.simulate import simulate  # noqa: E402
from core.transform.registry import RULES  # noqa: E402
from core.transform.rule import Application  # noqa: E402
from sample_graphs.store import load_sample_graph  # noqa: E402


def old_pipeline(g, order, apps, limit: int) -> tuple[float, int]:
    """Seconds per child of copy + incremental_schedule + simulate, over the first ``limit`` apps."""
    done = 0
    t0 = time.perf_counter()
    for app in apps[:limit]:
        child = g.copy()
        log = RULES[app.rule].apply(child, app)
        new_order = incremental_schedule(g, order, child, log.touched())
        simulate(child, new_order)
        done += 1
    return (time.perf_counter() - t0) / max(1, done), done


def new_pipeline(ev: DeltaEvaluator, children: int) -> tuple[float, list, int, float]:
    """Best-first walk: (seconds per child incl. moves, [(state, child)], moves, bytes per state)."""
    out = []
    moves = 0
    t0 = time.perf_counter()
    while len(out) < children:
        apps = ev.applications()
        if not apps:
            break
        kids = []
        for app in apps[: children - len(out)]:
            c = ev.evaluate(app)
            s = ev.child_state(c)
            kids.append(s)
            out.append(s)
        best = min(kids, key=lambda s: (s.peak, s.latency))
        ev.commit(best)
        moves += 1
    dt = time.perf_counter() - t0
    return dt / max(1, len(out)), out, moves, state_bytes(out)


def state_bytes(states) -> float:
    """Bytes a queued state holds of its own: tracemalloc over re-creating the states (window and
    parameters copied), or ``MState.nbytes`` (which counts every id as its own int), the larger."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    again = [MState(s.parent, Application(s.app.rule, tuple(list(s.app.params))), s.lo, s.hi,
                    tuple(list(s.window)), dict(s.metrics), s.hash, s.depth) for s in states]
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del again
    est = sum(s.nbytes() for s in states)
    return max(held, est) / max(1, len(states))


def check(ev: DeltaEvaluator, states) -> tuple[int, int]:
    """(checked, mismatches): each state's peak, latency and hash vs a from-scratch evaluation."""
    bad = 0
    for s in states:
        ev.goto(s)
        sim = simulate(ev.g, ev.order)
        ok = (sim.peak == s.peak and math.isclose(sim.latency, s.latency, rel_tol=1e-9)
              and graph_hash(ev.g) == s.hash)
        if not ok:
            bad += 1
            print(f"  MISMATCH {s.app}: peak {s.peak} vs {sim.peak}, latency {s.latency} vs {sim.latency}")
    return len(states), bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", nargs="+", default=["bert_base", "gpt_neo_1_3b", "btlm_3b"])
    p.add_argument("--children", type=int, default=200, help="children evaluated by the new pipeline")
    p.add_argument("--old", type=int, default=8, help="children evaluated by the old pipeline")
    a = p.parse_args()
    rows = []
    head = (f"{'workload':<14} {'ops':>6} {'old/s':>7} {'new/s':>8} {'speedup':>8} {'moves':>6} "
            f"{'init s':>7} {'B/state':>8} {'checked':>8} {'bad':>4}")
    print(head)
    for name in a.workloads:
        g = load_sample_graph(name)
        order = TracedOrder().order(g)
        t0 = time.perf_counter()
        ev = DeltaEvaluator(g.copy(), order)
        init = time.perf_counter() - t0
        apps = ev.applications()
        old_s, old_n = old_pipeline(g, order, apps, a.old)
        new_s, states, moves, per_state = new_pipeline(ev, a.children)
        checked, bad = check(ev, states)
        row = {"workload": name, "ops": len(order), "old_states_per_s": 1 / old_s, "old_children": old_n,
               "new_states_per_s": 1 / new_s, "new_children": len(states), "moves": moves,
               "speedup": old_s / new_s, "init_seconds": init, "bytes_per_state": per_state,
               "checked": checked, "mismatches": bad}
        rows.append(row)
        print(f"{name:<14} {row['ops']:>6} {row['old_states_per_s']:>7.2f} {row['new_states_per_s']:>8.1f} "
              f"{row['speedup']:>7.0f}x {moves:>6} {init:>7.2f} {per_state:>8.0f} {checked:>8} {bad:>4}")
    out = ROOT / "bench" / "results" / "states.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    return 1 if any(r["mismatches"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

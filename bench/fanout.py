"""Every scheduler on one node with many users (a fan-out, with or without one op joining them):
seconds per strategy at 2k, 8k and 50k users, each given a time budget (default 2 s).

    python bench/fanout.py [--sizes 2000,8000,50000] [--budget 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.schedule import get_scheduler  # noqa: E402
from tests.test_schedule_large import fan_out  # noqa: E402

METHODS = ("traced", "rpo", "random", "serenity", "hmcos", "incremental")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2000,8000,50000")
    ap.add_argument("--budget", type=float, default=2.0)
    a = ap.parse_args()
    print(f"| users | shape | {' | '.join(METHODS)} |")
    print("|---:|---|" + "---:|" * len(METHODS))
    for k in map(int, a.sizes.split(",")):
        for join in (False, True):
            g = fan_out(k, join)
            cells = []
            for m in METHODS:
                kw = {} if m in ("traced", "rpo") else {"time_budget": a.budget}
                t0 = time.perf_counter()
                get_scheduler(m, **kw).run(g)
                cells.append(f"{time.perf_counter() - t0:.2f} s")
            print(f"| {k:,} | {'fan-out + join' if join else 'fan-out'} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()

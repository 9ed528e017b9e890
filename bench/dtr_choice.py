"""DTR's eviction choice, pruned against exhaustive, side by side in one run.

    python bench/dtr_choice.py [--workloads btlm_3b,gpt_neo_1_3b,sd_unet,gemma2] [--budgets 0.4,0.6,0.8]

Per workload and budget (a fraction of DTR's unbudgeted peak), one DTR run with the pruned choice
(``DTRSim``: candidates by h's lower bound, each e* search cut once it cannot beat the best h
found) and one with the exhaustive choice (``exhaustive=True``: every candidate's whole e*, as
the paper writes h_DTR), each timed; reported: seconds of each, their ratio, the evictions, and
whether the two runs made the same decisions (the same computations, the same instances read, the
same stats, or the same failure; must be "yes").  Workloads are the samples
(``sample_graphs.store``), ``sd_unet`` (``bench/results/sd_unet.train.json.gz``) or a zoo model
(``bench/zoo.py``'s cache, captured on first use).  Writes bench/results/dtr_choice.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.cost.model import AnalyticCost  # noqa: E402
from core.search.peers.dtr import DTRFailure, DTRSim  # noqa: E402


def load(name: str):
    from sample_graphs import zoo
    from sample_graphs.store import graph_path, load_sample_graph

    if name == "sd_unet":
        from core.ir import io

        return io.load(ROOT / "bench" / "results" / "sd_unet.train.json.gz")
    if graph_path(name).exists():
        return load_sample_graph(name)
    if name in zoo.BY_NAME:
        from bench.zoo import import_graph

        return import_graph(name)[0]
    raise SystemExit(f"unknown workload {name!r}: a sample, sd_unet or a zoo model")


def timed(g, cost, budget: int, exhaustive: bool):
    t0 = time.perf_counter()
    try:
        d, stats = DTRSim(g, cost, budget, exhaustive=exhaustive).run()
        out = (d.events, d.reads, stats)
    except DTRFailure as e:
        out = str(e)
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="btlm_3b,gpt_neo_1_3b,sd_unet,gemma2")
    ap.add_argument("--budgets", default="0.4,0.6,0.8")
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "dtr_choice.json"))
    a = ap.parse_args(argv)
    cost = AnalyticCost(a.device)
    rows = []
    print(f"{'workload':<14} {'ops':>6} {'budget':>6} {'exhaustive s':>12} {'pruned s':>9} {'ratio':>6} "
          f"{'evictions':>9} {'same':>5}")
    for name in a.workloads.split(","):
        g = load(name)
        _, free = DTRSim(g, cost, None).run()
        for f in (float(x) for x in a.budgets.split(",")):
            b = int(f * free["dtr_peak"])
            full, t_full = timed(g, cost, b, True)
            pruned, t_pruned = timed(g, cost, b, False)
            ev = pruned[2]["evictions"] if isinstance(pruned, tuple) else "-"
            same = pruned == full
            rows.append({"workload": name, "ops": len(list(g.ops())), "budget": f, "exhaustive_seconds": round(t_full, 3),
                         "pruned_seconds": round(t_pruned, 3), "evictions": ev, "same": same,
                         "failed": None if isinstance(pruned, tuple) else pruned})
            print(f"{name:<14} {rows[-1]['ops']:>6} {f:>6g} {t_full:>12.2f} {t_pruned:>9.2f} {t_full / t_pruned:>5.1f}x "
                  f"{ev!s:>9} {'yes' if same else 'NO':>5}", flush=True)
    Path(a.json).write_text(json.dumps({"device": a.device, "rows": rows}, indent=1))
    print(f"wrote {a.json}")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

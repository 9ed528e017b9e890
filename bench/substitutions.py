"""Graph-substitution search (OCGGS, Fang et al. PVLDB 2020) on our graphs: its Table 3 and the
block-count and K scaling of its Figures 4 and 5.

Table 3: the forward (inference, batch 1) graphs of NASNet-A, AmoebaNet-A, DARTS and RandWire (the
HMCOS samples, ImageNet mobile setting), ResNet-50 and BERT-base (the training samples in eval()),
Inception-v3, ResNeXt-50, SRU and the NAS RNN cell (``sample_graphs.ocggs_nets``).  Every search --
ENU, Pruning, DPP, MetaFlow-style, TASO-style, Sampling, and the improving-only greedy as a
reference -- runs with K = 10 under the same time budget, each in a forked process whose peak
resident memory above its start is its memory.  The cost is the analytic model's predicted latency
(sum of op times, RTX 3090 profile, weight-only ops folded as at inference): a prediction, not a
measurement.  "-" marks an exact search (ENU, Pruning, DPP) stopped by the budget: its best-so-far
is not an optimum, as the paper reports it.

Figure 4: ResNet basic blocks (2, 4, 6, 8) and InceptionE blocks (1, 2, 3, 4), K = 10.
Figure 5: K in (3, 5, 10, 15) on 4 ResNet blocks and 2 InceptionE blocks.

    python bench/substitutions.py [--budget 30] [--scale-budget 10] [--graphs a,b] [--methods a,b]
                                  [--no-scaling] [--json bench/results/substitutions.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.cost.model import AnalyticCost  # noqa: E402
from core.ir.graph import Graph  # noqa: E402
from core.search.ocggs import search  # noqa: E402

TABLE_GRAPHS = ["nasnet_imagenet", "amoebanet_imagenet", "darts_imagenet", "randwire_1", "resnet50", "bert_base",
                "inception_v3", "resnext50", "sru", "nasrnn"]
METHODS = ["enu", "pruning", "dpp", "metaflow", "taso", "sampling", "greedy"]
EXACT = ("enu", "pruning", "dpp")
SCALE_METHODS = ["pruning", "dpp", "metaflow", "taso", "sampling"]


def inference_graph(name: str) -> Graph:
    """The forward graph of ``name`` in eval() mode, batch as the sample has it."""
    if name.startswith("resnet_blocks_") or name.startswith("inception_e_blocks_"):
        from core.frontend.workload import build_fake, capture_workload
        from sample_graphs import ocggs_nets

        kind, n = name.rsplit("_", 1)
        fn = ocggs_nets.resnet_blocks if kind == "resnet_blocks" else ocggs_nets.inception_e_blocks
        s = build_fake(lambda: fn(int(n)))
        return capture_workload(s, training=False, name=name)
    from sample_graphs.nas import NAS_NAMES, nas_graph

    if name in NAS_NAMES:
        return nas_graph(name)
    import sample_graphs
    from core.frontend.workload import build_fake, capture_workload

    s = build_fake(lambda: sample_graphs.build(name))
    s.module.eval()
    return capture_workload(s, training=False, name=name)


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _child(g: Graph, method: str, k: int, budget: float, w) -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS to the current RSS
    except OSError:
        pass
    start = _rss("VmRSS")
    t0 = time.perf_counter()
    try:
        r = search(g, method, max_steps=k, time_budget=budget, cost=AnalyticCost("rtx3090"))
        row = r.summary() | {"wall": time.perf_counter() - t0, "memory_bytes": max(0, _rss("VmHWM") - start),
                             "sequence": [str(a) for a in r.sequence]}
    except Exception as e:  # reported in the table, the run goes on
        row = {"error": f"{type(e).__name__}: {e}"}
    w.send(row)
    w.close()


def run_one(g: Graph, method: str, k: int, budget: float) -> dict:
    """One search in a forked process (its own peak memory)."""
    from multiprocessing import get_context

    ctx = get_context("fork")
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(g, method, k, budget, w))
    p.start()
    w.close()
    row = r.recv() if r.poll(budget * 4 + 600) else {"error": "no result"}
    p.join()
    return row


def fmt_cell(row: dict, method: str) -> str:
    if row.get("error") == "not run":
        return "n/a"
    if "error" in row:
        return "error"
    if method in EXACT and not row["complete"]:
        return "-"
    return f"{row['cost_after_ms']:.3f}"


def table(title: str, rows: dict[str, dict[str, dict]], methods: list[str]) -> None:
    print(f"\n{title}")
    w = max(len(n) for n in rows) + 2
    head = f"{'graph':<{w}}{'ops':>6}{'before':>9}"
    print(head + "".join(f"{m:>11}" for m in methods) + "   (predicted ms; - = exact search stopped by the budget)")
    for name, per in rows.items():
        any_row = next((r for r in per.values() if "ops" in r and "error" not in r), {})
        line = f"{name:<{w}}{any_row.get('ops', 0):>6}{any_row.get('cost_before_ms', 0):>9.3f}"
        print(line + "".join(f"{fmt_cell(per[m], m):>11}" for m in methods))
    print(f"{'search seconds':<{w}}")
    for name, per in rows.items():
        print(f"{name:<{w}}{'':>15}" + "".join(
            f"{per[m]['seconds']:>10.2f}{'' if per[m].get('complete') else '*'}" if "seconds" in per[m] else f"{'n/a':>11}"
            for m in methods))
    print(f"{'memory MiB':<{w}}   (* = stopped by the time budget)")
    for name, per in rows.items():
        print(f"{name:<{w}}{'':>15}" + "".join(
            f"{per[m]['memory_bytes'] / 2**20:>11.1f}" if "memory_bytes" in per[m] else f"{'n/a':>11}" for m in methods))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=30.0, help="seconds per search (Table 3)")
    ap.add_argument("--scale-budget", type=float, default=10.0, help="seconds per search (Figures 4 and 5)")
    ap.add_argument("--graphs", default=",".join(TABLE_GRAPHS))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--long", type=float, default=0.0, metavar="S",
                    help="also give TASO-style S seconds on the two largest Table 3 graphs: when (if at all) it "
                         "reaches Sampling's cost, against Sampling's whole search")
    ap.add_argument("--only-long", action="store_true", help="run only the --long comparison")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    methods = a.methods.split(",")
    out: dict = {"budget": a.budget, "scale_budget": a.scale_budget, "k": 10, "device": "rtx3090",
                 "cpu_count": os.cpu_count(), "table3": {}, "blocks": {}, "k_scaling": {}}

    def save() -> None:
        if a.json:
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps(out, indent=1))

    if a.only_long:
        a.no_scaling = True
    for name in ([] if a.only_long else a.graphs.split(",")):
        g = inference_graph(name)
        per = {}
        for m in methods:
            per[m] = run_one(g, m, 10, a.budget) | {"ops": len(g.ops())}
            print(f"  {name} {m}: {per[m].get('cost_after_ms', float('nan')):.4f} ms, "
                  f"{per[m].get('seconds', float('nan')):.1f} s, states {per[m].get('states')}", file=sys.stderr, flush=True)
        out["table3"][name] = per
        save()
    if out["table3"]:
        table(f"Table 3: optimised cost, K = 10, {a.budget:g} s per search", out["table3"], methods)
    if a.long:
        out["long"] = {}
        for name in ("nasrnn", "nasnet_imagenet"):
            g = inference_graph(name)
            smp = run_one(g, "sampling", 10, a.budget)
            tas = run_one(g, "taso", 10, a.long)
            reached = tas["cost_after_ms"] <= smp["cost_after_ms"] * (1 + 1e-9)
            out["long"][name] = {"sampling": smp, "taso": tas, "taso_reaches_sampling": reached}
            save()
            when = f"reaches it at {tas['best_seconds']:.1f} s" if reached else f"does not reach it in {a.long:g} s"
            print(f"{name} ({len(g.ops())} ops): Sampling {smp['cost_after_ms']:.4f} ms in {smp['seconds']:.1f} s; "
                  f"TASO-style best {tas['cost_after_ms']:.4f} ms ({when}; {tas['states']} graphs, "
                  f"{tas['memory_bytes'] / 2**20:.0f} MiB)", flush=True)
    if not a.no_scaling:
        for kind, ns in (("resnet_blocks", (2, 4, 6, 8)), ("inception_e_blocks", (1, 2, 3, 4))):
            for n in ns:
                name = f"{kind}_{n}"
                g = inference_graph(name)
                meths = (["enu"] if n <= 2 else []) + SCALE_METHODS
                out["blocks"][name] = {m: run_one(g, m, 10, a.scale_budget) | {"ops": len(g.ops())} for m in meths}
                save()
        for name in ("resnet_blocks_4", "inception_e_blocks_2"):
            g = inference_graph(name)
            for k in (3, 5, 10, 15):
                out["k_scaling"][f"{name} K={k}"] = {m: run_one(g, m, k, a.scale_budget) | {"ops": len(g.ops())}
                                                      for m in SCALE_METHODS}
                save()
        allm = ["enu"] + SCALE_METHODS
        table(f"Figure 4: block count, K = 10, {a.scale_budget:g} s per search",
              {n: {m: per.get(m, {"error": "not run"}) for m in allm} for n, per in out["blocks"].items()}, allm)
        table(f"Figure 5: K, {a.scale_budget:g} s per search", out["k_scaling"], SCALE_METHODS)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())

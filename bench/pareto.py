"""MAGIS and its peers on the seven paper-size workloads (MAGIS section 7's headline numbers): the
memory/latency trade-off of every method against PyTorch's eager order of the same run, on one
device profile, each method within a fixed time budget per workload.

Methods: ``magis`` (``core.search.moptimizer.optimize(pareto=True)``, the greedy fission warm start
included in its ``--time-budget``) and the peers of ``core.search.peers`` (``eager``, ``sqrt_n``,
``dtr``, ``checkmate``, ``torch_mincut``), each within ``--peer-budget`` seconds (checked by the
peer between its budget points; Checkmate gets ``--checkmate-time-limit`` per budget point, MILP
and LP rounding together, by default an equal share of what is left of the peer budget).  All run on the same graph and
``AnalyticCost(device)``; every ratio is against the ``eager`` peer's plan of the same run.

Per (workload, method): from all the method's points, the smallest peak (fraction of eager's) at
<= 5% and <= 10% latency overhead, the least latency overhead under 80% and 40% memory limits
("-": no point of the method meets it), the number of points, the method's seconds; for MAGIS the
seconds until its best peak came within 1% of its final best (from its search records, since
``optimize`` was called).  MAGIS's points behind the four numbers are replayed from the imported
graph and simulated from scratch after its timed run; a difference from what the search reported is
a failure.  Failures (points a method did not produce, and why) are listed under the table.  Figures per workload (``bench/plots.py``): the Pareto figure of all methods and MAGIS's
convergence, as PNG and HTML.

    python bench/pareto.py [--workloads bert_base,...] [--methods magis,dtr,...] [--device rtx3090]
                           [--time-budget 60] [--peer-budget 60] [--substitute K] [--plots bench/results/pareto]
                           [--json bench/results/pareto.json]
    python bench/pareto.py --merge PART.json PART.json ... [--json bench/results/pareto.json]

``--merge``: the parts (processes side by side, a workload list each) as one table, in the paper's
order; a workload run again in a later part (a rerun after a peer changed) is taken from that part.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.search.compare import (  # noqa: E402 -- the table's functions, shared with `magis compare`
    PAPER_NUMBERS,
    MethodResult,
    compare,
    default_methods,
    failures_of,
    format_table,
    picks,
    rows_of,
    seconds_to_within,
    summarise,
)
from core.search.compare import run_peer as _run_peer  # noqa: E402
from core.search.methods import METHODS  # noqa: E402
from core.search.peers import checkmate as _checkmate  # noqa: E402

PAPER = ["bert_base", "vit_base", "gpt_neo_1_3b", "btlm_3b", "resnet50", "unet", "unetpp"]
DEFAULT_METHODS = default_methods()  # the schedulers run when named (--methods)
__all__ = ["DEFAULT_METHODS", "PAPER", "MethodResult", "format_table", "main", "model_of", "picks", "rows_of",
           "run_peer", "run_workload", "seconds_to_within", "summarise"]


def model_of(workload: str):
    """A function that builds the sample's model under fake tensors (nothing allocated), for the
    methods that trace it again (``Method.needs``); None for a name that is not a sample."""
    import sample_graphs
    from core.frontend.workload import build_fake

    return (lambda: build_fake(lambda: sample_graphs.build(workload))) if workload in sample_graphs.NAMES else None


def run_peer(method: str, workload: str, g, cost, budget: float, eager: dict, *,
             checkmate_time_limit: float | None = None, checkmate_max_vars: int = _checkmate.MAX_VARS,
             progress=None) -> MethodResult:
    """One peer on workload ``workload`` (``core.search.compare.run_peer``, the sample's model at hand
    for the methods that need it)."""
    return _run_peer(method, g, cost, budget, eager, model=model_of(workload),
                     checkmate_time_limit=checkmate_time_limit, checkmate_max_vars=checkmate_max_vars,
                     progress=progress)


def substitution_prepass(g, device: str, max_steps: int, budget: float, progress=None):
    """MAGIS section 7.1's pre-pass: the graph after the best sequence of at most ``max_steps``
    substitutions (OCGGS Sampling), which every method then starts from."""
    from core.cost.model import AnalyticCost
    from core.search.ocggs import substitute

    res, h = substitute(g, "sampling", max_steps=max_steps, time_budget=budget, cost=AnalyticCost(device))
    if progress is not None:
        progress(f"substitution pre-pass: {len(res.sequence)} substitutions "
                 f"({', '.join(t['rule'] for t in res.trace) or 'none'}), predicted latency x{1 / res.speedup:.4f}")
    return h


def run_workload(name: str, *, device: str = "rtx3090", methods: list[str] | None = None,
                 time_budget: float = 60.0, peer_budget: float = 60.0, checkmate_time_limit: float | None = None,
                 checkmate_max_vars: int = _checkmate.MAX_VARS, graph=None, progress=None,
                 substitute: int = 0, substitute_budget: float = 30.0, cost: str = "analytic") -> dict:
    """Every method of ``methods`` on workload ``name`` (its committed graph, or ``graph``):
    ``core.search.compare.compare``'s result.  ``substitute`` = K > 0: every method starts from the
    graph after the substitution pre-pass (``substitution_prepass``), as MAGIS section 7.1 gives its
    baselines TASO's rewrites first."""
    from sample_graphs.store import load_sample_graph

    g = graph if graph is not None else load_sample_graph(name)
    if substitute:
        g = substitution_prepass(g, device, substitute, substitute_budget, progress)
    return compare(g, name=name, device=device, methods=methods or DEFAULT_METHODS, time_budget=time_budget,
                   peer_budget=peer_budget, model=model_of(name), checkmate_time_limit=checkmate_time_limit,
                   checkmate_max_vars=checkmate_max_vars, progress=progress, cost=cost)


def to_json(w: dict) -> dict:
    return {"workload": w["workload"], "nodes": w["nodes"], "eager": w["eager"], "bound": w["bound"],
            "points": {m: r.points for m, r in w["results"].items()},
            "seconds": {m: round(r.seconds, 3) for m, r in w["results"].items()},
            "extra": {m: {k: v for k, v in r.extra.items() if k != "records"} for m, r in w["results"].items()},
            "records": w["results"]["magis"].extra["records"] if "magis" in w["results"] else []}


def plot_workload(out: Path, w: dict, subtitle: str = "") -> list[Path]:
    """The figures of one workload, from its ``to_json`` form."""
    from bench.plots import write_plots

    points = dict(w["points"])
    points.setdefault("eager", [{"label": "traced order", "peak_ratio": 1.0, "latency_ratio": 1.0}])
    within = w["extra"].get("magis", {}).get("seconds_to_1pct")
    return write_plots(out, w["workload"], points, w["records"], w["eager"], within, subtitle)


def replot(path: Path, out: Path) -> None:
    """Table and figures again from a JSON this script wrote (no method is run)."""
    doc = json.loads(path.read_text())
    print(_header(doc))
    print(format_table(doc["rows"], doc["failures"]))
    for w in doc["workloads"]:
        for p in plot_workload(out, w, _subtitle(doc)):
            print(f"wrote {p}")


def merge(parts: list[Path], path: Path | None) -> None:
    """One table (and JSON) of runs made in parts -- processes side by side, a workload list each;
    a workload in several parts counts as run by the last of them (a rerun of some workloads merged
    over the earlier run of all: ``part_of`` says which part each one's numbers come from) -- in
    the paper's order of the workloads; their figures were written by the parts."""
    docs = [json.loads(p.read_text()) for p in parts]
    keys = ("device", "cost", "time_budget", "peer_budget", "substitute", "checkmate_time_limit", "checkmate_max_vars")
    confs = {tuple(d.get(k) for k in keys) for d in docs}
    if len(confs) != 1:
        raise SystemExit(f"the parts were run with different settings: {sorted(map(str, confs))}")
    owner = {w["workload"]: i for i, d in enumerate(docs) for w in d["workloads"]}
    names = sorted(owner, key=lambda n: (PAPER.index(n) if n in PAPER else len(PAPER), n))

    def of(key: str, name: str) -> list:
        return [x for x in docs[owner[name]][key] if x["workload"] == name]

    doc = {**{k: docs[0].get(k) for k in keys},
           "methods": list(dict.fromkeys(m for d in docs for m in d["methods"])), "paper": docs[0].get("paper"),
           "rows": [r for n in names for r in of("rows", n)], "failures": [f for n in names for f in of("failures", n)],
           "workloads": [w for n in names for w in of("workloads", n)], "parts": [str(p) for p in parts],
           "part_of": {n: str(parts[owner[n]]) for n in names}}
    print(_header(doc))
    print(format_table(doc["rows"], doc["failures"]))
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1))
        print(f"wrote {path}")


def _header(d: dict) -> str:
    return (f"{d['device']}, {d.get('cost') or 'analytic'} cost model; MAGIS {d['time_budget']:g} s, each peer "
            f"{d['peer_budget']:g} s per workload; ratios against PyTorch eager of the same run")


def _subtitle(d: dict) -> str:
    return f"{d['device']}; MAGIS {d['time_budget']:g} s, peers {d['peer_budget']:g} s each"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(PAPER))
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS), help=f"of {','.join(METHODS)}")
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--cost", default="analytic", choices=("analytic", "compiled"),
                    help="latency model of every method: eager kernels, or torch.compile's fusion")
    ap.add_argument("--time-budget", type=float, default=60.0, help="MAGIS search seconds per workload")
    ap.add_argument("--peer-budget", type=float, default=60.0, help="seconds per peer and workload")
    ap.add_argument("--checkmate-time-limit", type=float, default=None,
                    help="seconds per Checkmate budget point, MILP and LP rounding together (default: an "
                         "equal share of what is left of the peer budget)")
    ap.add_argument("--checkmate-max-vars", type=int, default=_checkmate.MAX_VARS,
                    help="larger Checkmate MILPs (R and S variables) are not attempted")
    ap.add_argument("--substitute", type=int, default=0, metavar="K",
                    help="every method starts from the graph after an OCGGS substitution pre-pass of at most K "
                         "steps (MAGIS section 7.1; default: 0, none)")
    ap.add_argument("--substitute-budget", type=float, default=30.0, help="seconds of the pre-pass per workload")
    ap.add_argument("--plots", type=Path, default=ROOT / "bench" / "results" / "pareto")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--replot", type=Path, default=None, metavar="JSON",
                    help="print the table and write the figures of an earlier --json, running nothing")
    ap.add_argument("--merge", type=Path, nargs="+", default=None, metavar="PART",
                    help="print and write (--json) the table of runs made in parts (each a --json of this "
                         "script with the same settings, its workloads only), running nothing")
    a = ap.parse_args(argv)
    if a.replot:
        replot(a.replot, a.plots)
        return 0
    if a.merge:
        merge(a.merge, a.json)
        return 0
    methods = [m for m in a.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        ap.error(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    conf = {"device": a.device, "cost": a.cost, "time_budget": a.time_budget, "peer_budget": a.peer_budget,
            "substitute": a.substitute,
            "checkmate_time_limit": a.checkmate_time_limit, "checkmate_max_vars": a.checkmate_max_vars,
            "methods": methods, "paper": PAPER_NUMBERS}
    header = _header(conf)
    print(header, flush=True)
    rows, failures, workloads = [], [], []
    for name in [w for w in a.workloads.split(",") if w]:
        w = run_workload(name, device=a.device, methods=methods, time_budget=a.time_budget,
                         peer_budget=a.peer_budget, checkmate_time_limit=a.checkmate_time_limit,
                         checkmate_max_vars=a.checkmate_max_vars, progress=lambda s: print(s, flush=True),
                         substitute=a.substitute, substitute_budget=a.substitute_budget, cost=a.cost)
        # keep the JSON form only: a workload's plans and graph would stay on the heap (and in every
        # garbage collection) while the next workloads' time-bounded searches run
        workloads.append(to_json(w))
        rows += rows_of(w)
        failures += failures_of(w)
        del w
        gc.collect()
        if not a.no_plots:
            for p in plot_workload(a.plots, workloads[-1], _subtitle(conf)):
                print(f"wrote {p}", flush=True)
    print()
    print(header)
    print(format_table(rows, failures))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {**conf, "rows": rows, "failures": failures, "workloads": workloads}
        tmp = a.json.with_suffix(a.json.suffix + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(a.json)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MAGIS against every peer and baseline on models nobody tuned it for (``sample_graphs/zoo.py``).

Per zoo model, at its realistic training size: the training step imported as ``magis import``
does it (built on fake tensors, captured), its ops without dim links (``magis info``'s list: what
blocks fission), its resident floor (weights, gradients and optimizer state as a fraction of eager's
peak: what no activation plan removes), then MAGIS and every other method on the same graph and
device profile, each within the same time budget (``core.search.compare.compare``, the function
``bench/pareto.py`` and ``magis compare`` use).  Per (model, method): the smallest peak at <= 5% and
<= 10% latency overhead, the least overhead under 80% and 40% memory limits; then per model MAGIS
against the best other method at <= 10% overhead.  Every latency is the analytic model's prediction.

    python bench/zoo.py [--models opt,swin,...] [--methods magis,dtr,...] [--time-budget 20]
                        [--per-kop 0] [--device rtx3090] [--tiny] [--json bench/results/zoo.json]
    python bench/zoo.py --merge PART.json PART.json ... [--json bench/results/zoo.json]

Every method gets the same budget on a model: ``--time-budget`` seconds, or with ``--per-kop S``
S seconds per thousand ops of the model's graph where that is more (a search's steps cost time in
proportion to the graph: the SD-1.x UNet's 5,310 ops take 20 s for the warm start's seeds alone).

Captured graphs are cached under ``$MAGIS_CACHE/zoo`` (default ``~/.cache/magis/zoo``) by model
and size, so a second run searches again without capturing again.  ``--tiny`` runs the tiny
variants (a smoke test of the bench itself, seconds per model).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.analysis.lifetimes import resident_floor  # noqa: E402
from core.ir import io  # noqa: E402
from core.search.compare import PAPER_NUMBERS, compare, default_methods, failures_of, format_table, rows_of  # noqa: E402
from core.summary import ops_without_dim_links  # noqa: E402
from sample_graphs import zoo  # noqa: E402


def cache_dir() -> Path:
    return Path(os.environ.get("MAGIS_CACHE", Path.home() / ".cache" / "magis")) / "zoo"


def import_graph(name: str, tiny: bool = False, cache: bool = True):
    """The zoo model's training graph (captured on fake tensors; cached) and the capture's seconds
    (0 for a cache hit)."""
    from core.frontend.workload import build_fake, capture_workload

    path = cache_dir() / f"{name}{'_tiny' if tiny else ''}.train.json.gz"
    if cache and path.exists():
        return io.load(path), 0.0
    t0 = time.perf_counter()
    w = build_fake(functools.partial(zoo.build, name, tiny))
    g = capture_workload(w, name=name + ("_tiny" if tiny else ""))
    seconds = time.perf_counter() - t0
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        io.save(g, path)
    return g, seconds


def budget_of(ops: int, time_budget: float, per_kop: float = 0.0) -> float:
    """Seconds for every method on a graph of ``ops`` ops: ``time_budget``, or ``per_kop`` per
    thousand ops where that is more."""
    return max(time_budget, per_kop * ops / 1000)


def run_model(name: str, *, tiny: bool, methods: list[str], budget: float, device: str, say,
              per_kop: float = 0.0, cost: str = "analytic") -> dict:
    g, capture_s = import_graph(name, tiny)
    floor, _ = resident_floor(g)
    ops = len(g.ops())
    budget = budget_of(ops, budget, per_kop)
    say(f"{name}: {ops} ops, {budget:g} s per method")
    w = compare(g, name=name, device=device, methods=methods, time_budget=budget, peer_budget=budget,
                progress=say, cost=cost)
    return {"model": name, "family": zoo.BY_NAME[name].family, "size": zoo.BY_NAME[name].size,
            "description": g.meta.get("description", ""), "ops": ops, "time_budget": budget,
            "capture_seconds": round(capture_s, 1), "no_dim_links": ops_without_dim_links(g),
            "floor_ratio": floor / w["eager"]["peak"], "eager": w["eager"], "bound": w["bound"],
            "rows": rows_of(w), "failures": failures_of(w),
            "points": {m: r.points for m, r in w["results"].items()}}


HEADLINES = tuple(PAPER_NUMBERS)  # compare.summarise's four numbers: peaks at <= 5% and <= 10%, overheads under 80% and 40%


def versus(m: dict, key: str = "peak_at_10pct") -> dict:
    """MAGIS's number ``key`` (``compare.summarise``'s: the smallest peak at <= 10% overhead by
    default, or the least overhead under a memory limit) against the best other method's; ``ratio``
    for peaks only."""
    rows = {r["method"]: r for r in m["rows"]}
    mine = rows.get("magis", {}).get(key)
    others = [(r[key], k) for k, r in rows.items() if k not in ("magis", "eager") and r.get(key) is not None]
    best = min(others, default=(None, None))
    ratio = mine / best[0] if key.startswith("peak") and mine is not None and best[0] else None
    return {"model": m["model"], "magis": mine, "best": best[0], "best_method": best[1], "ratio": ratio}


def format_markdown(models: list[dict]) -> str:
    """The README's table: per model its size, ops, budget and resident floor, then MAGIS and the
    best other method at each of the four headline numbers (peaks x eager's at <= 5% and <= 10%
    latency overhead, overheads under 80% and 40% memory limits; "-": no point qualifies)."""

    def cell(v: dict, key: str) -> str:
        def num(x):
            return "-" if x is None else (f"{x:.3f}x" if key.startswith("peak") else f"{100 * x:+.1f}%")

        mine, best = num(v["magis"]), "-" if v["best"] is None else f"{v['best_method']} {num(v['best'])}"
        win = v["magis"] is not None and (v["best"] is None or v["magis"] <= v["best"] + 1e-12)
        return f"{'**' + mine + '**' if win else mine} / {best}"

    head = ("| model | size | ops | s per method | resident floor | <= 5%: MAGIS / best other | "
            "<= 10%: MAGIS / best other | ratio | 80%: MAGIS / best other | 40%: MAGIS / best other | "
            "ops without dim links |")
    lines = [head, "|---|---|---:|---:|---:|---|---|---:|---|---|---|"]
    for m in models:
        v = {k: versus(m, k) for k in HEADLINES}
        ratio = v["peak_at_10pct"]["ratio"]
        links = ", ".join(f"`{o}`" for o in m["no_dim_links"]) or "none"
        lines.append(f"| {m['model']} | {m['size']} | {m['ops']:,} | {m.get('time_budget', 0):.0f} | "
                     f"{m['floor_ratio']:.2f}x | " + " | ".join(cell(v[k], k) for k in HEADLINES[:2])
                     + f" | {'-' if ratio is None else f'{ratio:.2f}'} | "
                     + " | ".join(cell(v[k], k) for k in HEADLINES[2:]) + f" | {links} |")
    return "\n".join(lines)


def format_summary(models: list[dict]) -> str:
    lines = [f"{'model':14s} {'size':28s} {'ops':>6s} {'budget':>6s} {'floor':>6s} {'MAGIS@10%':>9s} {'best other @10%':>24s} "
             f"{'ratio':>6s}  ops without dim links"]
    for m in models:
        v = versus(m)
        mine = f"{v['magis']:.3f}x" if v["magis"] is not None else "-"
        best = f"{v['best_method']} {v['best']:.3f}x" if v["best"] is not None else "-"
        ratio = f"{v['ratio']:.2f}" if v["ratio"] is not None else "-"
        lines.append(f"{m['model']:14s} {m['size'][:28]:28s} {m['ops']:6d} {m.get('time_budget', 0):5.0f}s "
                     f"{m['floor_ratio']:5.2f}x {mine:>9s} "
                     f"{best:>24s} {ratio:>6s}  {', '.join(m['no_dim_links']) or 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(zoo.NAMES), help=f"of {','.join(zoo.NAMES)}")
    ap.add_argument("--methods", default=",".join(default_methods()))
    ap.add_argument("--time-budget", type=float, default=20.0, help="seconds per method and model")
    ap.add_argument("--per-kop", type=float, default=0.0,
                    help="seconds per method and thousand ops of the model where that is more than --time-budget")
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--cost", default="analytic", choices=("analytic", "compiled"),
                    help="latency model of every method: eager kernels, or torch.compile's fusion")
    ap.add_argument("--tiny", action="store_true", help="the tiny variants (a smoke test)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--markdown", action="store_true", help="also print the README's table (format_markdown)")
    ap.add_argument("--merge", type=Path, nargs="+", default=None, metavar="PART",
                    help="print and write (--json) the tables of runs made in parts (each a --json of this "
                         "bench, same device and budget, its models only) instead of running")
    a = ap.parse_args(argv)
    if a.merge:
        return merge(a.merge, a.json, a.markdown)
    names = [n for n in a.models.split(",") if n]
    unknown = [n for n in names if n not in zoo.BY_NAME]
    if unknown:
        ap.error(f"unknown zoo models: {', '.join(unknown)} (known: {', '.join(zoo.NAMES)})")
    methods = [m for m in a.methods.split(",") if m]
    say = functools.partial(print, file=sys.stderr, flush=True)
    models, failed = [], []
    for name in names:
        say(f"== {name}")
        try:
            models.append(run_model(name, tiny=a.tiny, methods=methods, budget=a.time_budget, device=a.device,
                                    say=say, per_kop=a.per_kop, cost=a.cost))
        except Exception as e:  # noqa: BLE001 -- a model that does not import is a row with its reason
            failed.append({"model": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
            say(f"{name}: failed: {failed[-1]['error']}")
    report({"device": a.device, "cost": a.cost, "time_budget": a.time_budget, "per_kop": a.per_kop, "tiny": a.tiny,
            "methods": methods, "models": models, "not_run": failed}, a.json, a.markdown)
    return 0


def report(run: dict, path: Path | None, markdown: bool = False) -> None:
    """Print a run's tables (every method per model, then MAGIS against the best other, and with
    ``markdown`` the README's table) and write it, with the summary rows, to ``path``."""
    models = run["models"]
    per_kop = run.get("per_kop") or 0
    each = f" ({per_kop:g} s per thousand ops where that is more)" if per_kop else ""
    print(f"{run['device']}; every method {run['time_budget']:g} s per model{each}; ratios against PyTorch eager "
          f"of the same run; latencies are the {run.get('cost', 'analytic')} cost model's predictions")
    print(format_table([r for m in models for r in m["rows"]], [f for m in models for f in m["failures"]]))
    print()
    print(format_summary(models))
    for f in run["not_run"]:
        print(f"{f['model']}: not run: {f['error']}")
    if markdown:
        print()
        print(format_markdown(models))
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**run, "versus": [versus(m) for m in models]}, indent=1, default=str))
        print(f"wrote {path}")


def merge(parts: list[Path], path: Path | None, markdown: bool = False) -> int:
    """One report of runs made in parts (two processes side by side, one model list each)."""
    runs = [json.loads(p.read_text()) for p in parts]
    keys = {(r["device"], r["time_budget"], r.get("per_kop") or 0, r["tiny"], r.get("cost", "analytic")) for r in runs}
    if len(keys) != 1:
        raise SystemExit(f"the parts differ in device, budget, size or cost model: {sorted(keys)}")
    models = {m["model"]: m for r in runs for m in r["models"]}
    order = [n for n in zoo.NAMES if n in models] + [n for n in models if n not in zoo.NAMES]
    methods = list(dict.fromkeys(x for r in runs for x in r["methods"]))
    device, budget, per_kop, tiny, cost = keys.pop()
    report({"device": device, "cost": cost, "time_budget": budget, "per_kop": per_kop, "tiny": tiny, "methods": methods,
            "models": [models[n] for n in order], "not_run": [f for r in runs for f in r["not_run"]],
            "parts": [str(p) for p in parts]}, path, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

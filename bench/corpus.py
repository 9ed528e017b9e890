"""The user's path on every model the project owns (``sample_graphs.corpus``): import ->
``magis optimize`` (a memory limit, and ``--pareto``) -> every method of ``magis compare`` -> each
method's plans replayed, exported and run against eager PyTorch (``magis verify``) -> ``plan_step``
for two steps.  One table, model x stage: ``ok``, ``refused: reason`` (a method that does not apply,
and says why) or ``FAILED: error`` (a crash, an exit status other than the command's documented
ones, or a script that does not reproduce eager PyTorch).  A FAILED cell is a bug.

    python bench/corpus.py                      # the whole corpus, 2 processes
    python bench/corpus.py --models hf_causal_lm,loss_hf_causal --jobs 1
    python bench/corpus.py --sources loss --json bench/results/corpus.json

The test (``tests/test_corpus.py``, slow) runs it with ``--jobs 2`` and requires no FAILED cell.
Budgets are seconds of search per command (``--time-budget``: optimize and plan_step; ``--method-budget``:
each method of compare); the table checks that nothing crashes, not how good the plans are -- that is
``bench/zoo.py``'s and ``bench/pareto.py``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import io as _io
import json
import multiprocessing as mp
import os
import re
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

STAGES = ["import", "optimize", "pareto", "compare", "verify", "plan_step"]
OK, REFUSED, FAILED = "ok", "refused", "FAILED"
STEPS = 2  # plan_step: optimizer steps compared with eager
STEP_RTOL = 1e-4


def _cell(status: str, detail: str = "") -> dict:
    return {"status": status, "detail": detail}


def _cli(argv: list[str]) -> tuple[int, str, str]:
    """``magis ARGV`` in this process: (exit status, stdout, stderr)."""
    from app.cli import main

    out, err = _io.StringIO(), _io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:300] if lines else ""


def _crash(e: BaseException) -> dict:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    return _cell(FAILED, f"{type(e).__name__}: {str(e).splitlines()[0][:250] if str(e) else ''}{where}")


def _optimize(graph_file: Path, out: Path, budget: float, pareto: bool) -> dict:
    """``magis optimize``: exit 0 (a plan file) or 3 (written, the limit not reached) are results;
    anything else (2: the input refused, 70: the optimizer failed) is a failure on a graph it imported."""
    mode = ["--pareto"] if pareto else ["--memory-limit", "0.6"]
    status, _o, err = _cli(["optimize", str(graph_file), *mode, "--time-budget", f"{budget:g}", "-o", str(out)])
    if status in (0, 3) and out.exists():
        from core.search.plan import load_plans

        pf = load_plans(out)
        return _cell(OK, f"{len(pf.points)} points, best {min(p.peak for p in pf.points) / pf.points[-1].peak:.3f}x"
                     + (" (limit not reached)" if status == 3 else ""))
    return _cell(FAILED, f"exit {status}: {_last_line(err)}")


def _verify(spec: str, g, plan, device: str) -> tuple[bool, str]:
    """The plan replayed onto the imported graph, exported and run against eager (as ``magis verify
    --plan``): (ok, one line)."""
    from app.specs import verify_spec
    from core.codegen.verify import problems
    from core.cost.model import AnalyticCost
    from core.search.plan import check_order

    h = plan.graph(g)
    check_order(h, plan.order)
    res = verify_spec(spec, graph=h, order=plan.order, schedule=f"plan {plan.method}", cost=AnalyticCost(device))
    if res["ok"]:
        return True, ""
    return False, "; ".join(problems(res, exact_steps=False)) or "the script differs from eager PyTorch"


def _plan_step(spec: str, budget: float, fix_random_reads: bool = False) -> dict:
    """``plan_step`` at 0.6 of the peak for ``STEPS`` SGD steps beside an eager copy: the losses equal."""
    import copy
    import warnings

    import torch

    from app.specs import build_workload
    from core.frontend.idioms import fixed_draws, sites_of
    from core.frontend.workload import workload_fns
    from core.train import plan_step

    w = build_workload(spec, 0)
    loss_fn, _ = workload_fns(w)
    model, reference = w.module, copy.deepcopy(w.module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = plan_step(model, loss_fn, tuple(w.inputs), memory_limit=0.6, time_budget=budget, progress=False,
                         cache=False, fix_random_reads=fix_random_reads)
        opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=1e-3) for m in (model, reference))
        worst = 0.0
        for _ in range(STEPS):
            opt.zero_grad()
            ref_opt.zero_grad()
            torch.manual_seed(0)
            loss = step(*w.inputs)
            torch.manual_seed(0)
            with fixed_draws(sites_of(step.first.graph.meta)):  # layer drop as the capture fixed it
                ref = loss_fn(reference, *w.inputs)
            ref.backward()
            opt.step()
            ref_opt.step()
            worst = max(worst, abs(float(loss) - float(ref)) / max(abs(float(ref)), 1e-12))
    detail = f"{STEPS} steps, peak {step.simulated_peak / step.first.eager_peak:.3f}x, loss rel. error {worst:.1e}"
    return _cell(OK if worst <= STEP_RTOL else FAILED, detail)


def run_entry(entry, time_budget: float, method_budget: float, methods: list[str] | None, device: str) -> dict:
    """Every stage on one corpus entry; a stage that cannot start because an earlier one failed is
    ``refused: after a failure``."""
    from app.specs import capture_spec
    from core.ir import io
    from core.search.compare import compare, default_methods

    spec = entry.spec.replace(f"{ROOT}/", "", 1)  # the results name files relative to the repository
    row: dict = {"model": entry.name, "source": entry.source, "spec": spec, "cells": {}, "methods": {}}
    cells = row["cells"]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        try:
            g = capture_spec(entry.spec, fix_random_reads=entry.fix_random_reads)
            graph_file = tmp / "graph.json.gz"
            io.save(g, graph_file)
            cells["import"] = _cell(OK, f"{len(g.ops())} ops")
        except Exception as e:  # noqa: BLE001 -- the table's cell
            cells["import"] = _crash(e)
            for s in STAGES[1:]:
                cells[s] = _cell(REFUSED, "after a failure")
            return row
        row["ops"] = len(g.ops())
        for stage, pareto in (("optimize", False), ("pareto", True)):
            try:
                cells[stage] = _optimize(graph_file, tmp / f"{stage}.json", time_budget, pareto)
            except Exception as e:  # noqa: BLE001
                cells[stage] = _crash(e)
        try:
            w = compare(g, device=device, methods=methods or default_methods(), time_budget=method_budget,
                        model=lambda: _build(entry.spec))
            crashed = {m: r.error for m, r in w["results"].items() if r.error}
            for m, r in w["results"].items():
                row["methods"][m] = (_cell(FAILED, r.error) if r.error else
                                     _cell(OK, f"{len(r.points)} points") if r.points else
                                     _cell(REFUSED, "; ".join(sorted({why for _l, why in r.failures}))[:300]))
            cells["compare"] = (_cell(FAILED, "; ".join(f"{m}: {e}" for m, e in crashed.items())) if crashed else
                                _cell(OK, f"{sum(1 for r in w['results'].values() if r.points)} of "
                                          f"{len(w['results'])} methods give points"))
        except Exception as e:  # noqa: BLE001
            cells["compare"] = _crash(e)
            w = None
        # each method's lowest-peak plan, and the optimize commands' best points, run against eager
        plans = []
        if w is not None:
            plans += [(m, min(r.plans, key=lambda p: p.peak)) for m, r in w["results"].items() if r.plans]
        for stage in ("optimize", "pareto"):
            f = tmp / f"{stage}.json"
            if cells[stage]["status"] == OK:
                from core.search.plan import load_plans

                plans.append((f"magis optimize ({stage})", load_plans(f, g).points[0]))
        bad, done = [], 0
        for label, plan in plans:
            try:
                ok, why = _verify(entry.spec, g, plan, device)
            except Exception as e:  # noqa: BLE001
                ok, why = False, _crash(e)["detail"]
            done += 1
            if not ok:
                bad.append(f"{label}: {why}")
        cells["verify"] = _cell(FAILED, "; ".join(bad)[:600]) if bad else _cell(OK, f"{done} plans")
        try:
            cells["plan_step"] = _plan_step(entry.spec, time_budget, entry.fix_random_reads)
        except Exception as e:  # noqa: BLE001
            cells["plan_step"] = _crash(e)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def _build(spec: str):
    from app.specs import build_workload

    return build_workload(spec, 0)


def _worker(args) -> dict:
    entry, time_budget, method_budget, methods, device = args
    return run_entry(entry, time_budget, method_budget, methods, device)


def _reason_key(why: str) -> str:
    """A refusal's reason with the names of nodes and sizes taken out, to count them by kind."""
    why = re.sub(r"'[^']*'", "'…'", why)
    why = re.sub(r"\d+(\.\d+)?( ?[KMG]i?B)?", "N", why)
    return why[:140]


def format_table(rows: list[dict]) -> str:
    w = max([len(r["model"]) for r in rows] + [5])
    lines = [f"{'model':{w}} {'source':8} " + " ".join(f"{s:10}" for s in STAGES) + "  seconds",
             "-" * (w + 10 + 11 * len(STAGES) + 8)]
    for r in rows:
        lines.append(f"{r['model']:{w}} {r['source']:8} "
                     + " ".join(f"{r['cells'].get(s, {}).get('status', '-'):10}" for s in STAGES)
                     + f"  {r.get('seconds', 0):7.1f}")
    return "\n".join(lines)


def summary(rows: list[dict]) -> dict:
    """Cells by status, the FAILED cells with their errors, and the refusals counted by reason
    (methods of compare included)."""
    status = Counter(c["status"] for r in rows for c in r["cells"].values())
    failed = [(r["model"], s, c["detail"]) for r in rows for s, c in r["cells"].items() if c["status"] == FAILED]
    refusals = Counter()
    for r in rows:
        for s, c in r["cells"].items():
            if c["status"] == REFUSED:
                refusals[f"{s}: {_reason_key(c['detail'])}"] += 1
        for m, c in r["methods"].items():
            if c["status"] == REFUSED:
                refusals[f"{m}: {_reason_key(c['detail'])}"] += 1
    methods = Counter((m, c["status"]) for r in rows for m, c in r["methods"].items())
    return {"cells": dict(status), "failed": failed, "refusals": refusals.most_common(),
            "methods": {f"{m} {s}": n for (m, s), n in sorted(methods.items())}}


def main(argv: list[str] | None = None) -> int:
    from sample_graphs.corpus import SOURCES, entries

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help="comma-separated corpus names (default: all)")
    ap.add_argument("--sources", default=",".join(SOURCES), help=f"of {','.join(SOURCES)}")
    ap.add_argument("--methods", help="methods of compare (default: MAGIS and every peer and baseline)")
    ap.add_argument("--time-budget", type=float, default=2.0, help="seconds: magis optimize, and plan_step's search")
    ap.add_argument("--method-budget", type=float, default=1.0, help="seconds per method of compare")
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--jobs", type=int, default=2, help="processes (one model each at a time)")
    ap.add_argument("--json", type=Path, help="write the rows and the summary here")
    a = ap.parse_args(argv)
    chosen = entries(tuple(a.sources.split(",")))
    if a.models:
        want = a.models.split(",")
        unknown = sorted(set(want) - {e.name for e in chosen})
        if unknown:
            ap.error(f"unknown corpus model(s) {', '.join(unknown)}; known: {', '.join(e.name for e in chosen)}")
        chosen = [e for e in chosen if e.name in want]
    methods = a.methods.split(",") if a.methods else None
    jobs = [(e, a.time_budget, a.method_budget, methods, a.device) for e in chosen]
    t0 = time.perf_counter()
    rows: list[dict] = []
    say = lambda r: print(f"[{time.perf_counter() - t0:6.0f} s] {r['model']}: "  # noqa: E731
                          + " ".join(f"{s} {c['status']}" for s, c in r["cells"].items()), file=sys.stderr, flush=True)
    if a.jobs > 1:
        with mp.get_context("spawn").Pool(a.jobs, maxtasksperchild=4) as pool:
            for r in pool.imap(_worker, jobs):
                rows.append(r)
                say(r)
    else:
        for j in jobs:
            rows.append(_worker(j))
            say(rows[-1])
    s = summary(rows)
    print(format_table(rows))
    print(f"\ncells: {', '.join(f'{k} {v}' for k, v in sorted(s['cells'].items()))}; "
          f"{len(rows)} models in {time.perf_counter() - t0:.0f} s")
    print("\nmethods of compare (method status: models):")
    for k, v in s["methods"].items():
        print(f"  {k}: {v}")
    print("\nrefusals by reason:")
    for why, n in s["refusals"]:
        print(f"  {n:3d}  {why}")
    if s["failed"]:
        print("\nFAILED:")
        for model, stage, detail in s["failed"]:
            print(f"  {model} {stage}: {detail}")
    for r in rows:
        for m, c in r["methods"].items():
            if c["status"] == FAILED:
                print(f"  {r['model']} compare/{m}: {c['detail']}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"time_budget": a.time_budget, "method_budget": a.method_budget,
                                      "device": a.device, "rows": rows, "summary": s}, indent=1) + "\n")
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Scheduler comparison in the form of HMCOS's Table 1 (DAC'22): peak memory of RPO, Serenity and
HMCOS, the reduction of HMCOS over RPO, scheduling times and HMCOS's speedup over Serenity.

    python bench/schedulers.py [--nas-only | --train-only] [--budget S] [--serenity-budget S]
    python bench/schedulers.py --ablation      # HMCOS Tables 2-3: configurations 1-7

Part 1 -- the nine NAS networks of the HMCOS evaluation (``sample_graphs/nas.py``; inference, batch
1, fp32, HMCOS's memory model: graph inputs freed after their last use, weights not counted).
Part 2 -- the seven MAGIS workloads' training graphs (``load_sample_graph``; the default model:
inputs and weights resident), with time budgets; the traced (PyTorch) order is printed too.

Columns:
  R   reverse post-order (``rpo``);  T  the traced order
  S   Serenity as the HMCOS paper ran it: the plain layer-by-layer DP over ops with divide and
      conquer at narrow waists, no soft budget (``Serenity(soft_budget=False, forced_moves=False,
      beam=None, max_states=None)``), stopped at ``--serenity-budget`` seconds (its best partial
      schedule is then completed in traced/RPO order; such times are marked "+", and the speedup
      over it is a lower bound ">=")
  S*  our Serenity: the same DP with exact accelerations -- forced moves, an upper bound from a
      beam then branch and bound below it, soft budget -- (``Serenity()``); "exact" when proven
  H   HMCOS (``HMCOS()``: sequences, cell + intrusion groups, iterative ungrouping, adaptive soft
      budget, RPO-or-DP per group, memoisation)

Writes bench/results/schedulers.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.analysis.lifetimes import memory_profile  # noqa: E402
from core.schedule import get_scheduler  # noqa: E402
from core.schedule.hmcos import HMCOS  # noqa: E402
from core.schedule.serenity import Serenity  # noqa: E402

MAGIS = ["resnet50", "bert_base", "vit_base", "unet", "unetpp", "gpt_neo_1_3b", "btlm_3b"]
PAPER_SERENITY = {"soft_budget": False, "forced_moves": False, "beam": None, "max_states": None}
PAPER_TABLE1 = {  # HMCOS Table 1: peak MB (R, S, H), reduction %, scheduling time (S, H) in seconds
    "nasnet_cifar": (2.25, 2.25, 1.70, 24.3, None, 40.05),
    "amoebanet_cifar": (1.75, 1.27, 1.13, 35.7, None, 1.57),
    "darts_cifar": (2.32, 1.69, 1.34, 42.4, None, 0.97),
    "nasnet_imagenet": (5.06, 4.40, 4.13, 18.3, None, 0.207),
    "amoebanet_imagenet": (4.92, 4.29, 4.22, 14.2, None, 0.065),
    "darts_imagenet": (4.91, 4.53, 3.66, 25.3, None, 0.042),
    "randwire_1": (5.37, 4.43, 4.43, 17.4, 5659, 20),
    "randwire_2": (5.37, 4.90, 4.90, 8.7, 5358, 39),
    "randwire_3": (5.83, 4.20, 4.20, 28.0, 10247, 68),
}


def run_one(g, flags: dict, serenity_budget: float, budget: float, skip_paper: bool) -> dict:
    """Every scheduler on one graph: peaks (bytes), seconds and info."""
    row: dict = {"graph": g.name, "ops": len(g.ops())}
    for name in ("traced", "rpo"):
        s = get_scheduler(name).run(g)
        row[name] = memory_profile(g, s.order, validate=False, **flags).peak
    runs = {"serenity_paper": None if skip_paper else Serenity(time_budget=serenity_budget, **PAPER_SERENITY, **flags),
            "serenity": Serenity(time_budget=budget, **flags),
            "hmcos": HMCOS(time_budget=budget, **flags)}
    for key, sch in runs.items():
        if sch is None:
            continue
        t0 = time.perf_counter()
        s = sch.run(g)
        wall = time.perf_counter() - t0
        assert s.peak == memory_profile(g, s.order, **flags).peak
        info = {k: v for k, v in s.info.items() if isinstance(v, (int, float, str, bool)) or v is None}
        row[key] = s.peak
        row[key + "_seconds"] = s.seconds
        row[key + "_wall"] = wall
        row[key + "_info"] = info
    return row


def fmt_table(rows: list[dict], unit: float, unit_name: str, title: str, paper: bool) -> str:
    head = (f"{'network':<20}{'ops':>6} | {'T':>9}{'R':>9}{'S':>9}{'S*':>9}{'H':>9}{'H vs R':>8} | "
            f"{'S s':>8}{'S* s':>8}{'H s':>7}{'S/H':>8}{'S*/H':>7}")
    if paper:
        head += " | paper R/S/H MB, red., S/H s"
    lines = [title, f"peak memory in {unit_name}; times in seconds", head, "-" * len(head)]
    def mb(r: dict, k: str) -> str:
        return f"{r[k] / unit:>9.3f}" if r.get(k) is not None else f"{'-':>9}"

    for r in rows:
        sp = r.get("serenity_paper_seconds")
        timed_out = r.get("serenity_paper_info", {}).get("timed_out") or not r.get("serenity_paper_info", {}).get("exact", True)
        h = r["hmcos_seconds"]
        red = (1 - r["hmcos"] / r["rpo"]) * 100
        s_txt = f"{sp:>7.1f}{'+' if timed_out else ' '}" if sp is not None else f"{'-':>8}"
        sph = (f"{'>=' if timed_out else ''}{sp / h:.0f}x" if sp is not None else "-")
        ssh = f"{r['serenity_seconds'] / h:.1f}x"
        exact = "" if r["serenity_info"].get("exact") else "~"
        line = (f"{r['graph']:<20}{r['ops']:>6} | {mb(r, 'traced')}{mb(r, 'rpo')}{mb(r, 'serenity_paper')}"
                f"{r['serenity'] / unit:>8.3f}{exact or ' '}{mb(r, 'hmcos')}{red:>7.1f}% | {s_txt}"
                f"{r['serenity_seconds']:>8.2f}{h:>7.2f}{sph:>8}{ssh:>7}")
        if paper and r["graph"] in PAPER_TABLE1:
            pr, ps, ph, pred, pts, pth = PAPER_TABLE1[r["graph"]]
            line += (f" | {pr:.2f}/{ps:.2f}/{ph:.2f}, {pred:.1f}%, "
                     f"{pts if pts is not None else '-'}/{pth}")
        lines.append(line)
    lines.append("S* marked ~ : not proven optimal (state cap / time budget); S time marked + : stopped at "
                 "its budget (speedup S/H is then a lower bound)")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nas-only", action="store_true")
    p.add_argument("--train-only", action="store_true")
    p.add_argument("--budget", type=float, default=60.0, help="time budget of S* and H (s)")
    p.add_argument("--serenity-budget", type=float, default=60.0,
                   help="time budget of the paper's Serenity on NASNet/AmoebaNet/DARTS (s)")
    p.add_argument("--randwire-serenity-budget", type=float, default=100.0,
                   help="time budget of the paper's Serenity on RandWire (s)")
    p.add_argument("--train-budget", type=float, default=20.0, help="time budget of every scheduler "
                   "on the training graphs (s)")
    p.add_argument("--skip-paper-serenity", action="store_true", help="leave out column S (fast run)")
    p.add_argument("--only", nargs="*", default=None, help="run only these graphs")
    p.add_argument("--ablation", action="store_true", help="HMCOS Tables 2-3: configurations 1-7 on the "
                   "NASNet / AmoebaNet / DARTS networks (instead of the main tables)")
    p.add_argument("--plain-engine", action="store_true", help="ablation with the plain layered DP "
                   "(no forced moves, no upper bound + branch and bound), as in the paper")
    a = p.parse_args()
    if a.ablation:
        return ablation(a)
    out: dict = {"config": vars(a), "nas": [], "magis": []}
    res_path = ROOT / "bench" / "results" / "schedulers.json"
    res_path.parent.mkdir(parents=True, exist_ok=True)
    if not a.train_only:
        from sample_graphs.nas import NAS_MEMORY_MODEL, NAS_NAMES, nas_graph

        for name in NAS_NAMES:
            if a.only and name not in a.only:
                continue
            t0 = time.perf_counter()
            g = nas_graph(name)
            cap = time.perf_counter() - t0
            sb = a.randwire_serenity_budget if name.startswith("randwire") else a.serenity_budget
            row = run_one(g, NAS_MEMORY_MODEL, sb, a.budget, a.skip_paper_serenity)
            row["capture_seconds"] = cap
            out["nas"].append(row)
            print(f"  {name}: H {row['hmcos'] / 1e6:.3f} MB in {row['hmcos_seconds']:.2f} s", file=sys.stderr,
                  flush=True)
            res_path.write_text(json.dumps(out, indent=1))
        print(fmt_table(out["nas"], 1e6, "MB (10^6 bytes)",
                        "Table 1 -- NAS networks (inference, batch 1, fp32; HMCOS memory model)", True))
        hm = [r for r in out["nas"] if r["hmcos"] > r["rpo"]]
        rw = [r for r in out["nas"] if r["graph"].startswith("randwire")]
        reds = [(1 - r["hmcos"] / r["rpo"]) * 100 for r in out["nas"]]
        print(f"\nHMCOS never worse than RPO: {not hm}; reduction vs RPO {min(reds):.1f}-{max(reds):.1f}% "
              f"(paper 8.7-42.4%)")
        if rw:
            eq = all(r["hmcos"] == r["serenity"] for r in rw)
            print(f"RandWire: HMCOS == Serenity* peak: {eq}; HMCOS vs the paper's Serenity: "
                  + ", ".join(f"{r['serenity_paper_seconds'] / r['hmcos_seconds']:.0f}x"
                              for r in rw if r.get("serenity_paper_seconds")) + " (paper 137-283x)")
        print()
    if not a.nas_only:
        from sample_graphs.store import graph_path, load_sample_graph

        for name in MAGIS:
            if a.only and name not in a.only:
                continue
            if not graph_path(name).exists():
                print(f"  {name}: no committed graph file, capturing (slow) ...", file=sys.stderr, flush=True)
            g = load_sample_graph(name)
            row = run_one(g, {}, a.train_budget, a.train_budget, a.skip_paper_serenity)
            out["magis"].append(row)
            print(f"  {name}: H {row['hmcos'] / 2**30:.3f} GiB in {row['hmcos_seconds']:.2f} s", file=sys.stderr,
                  flush=True)
            res_path.write_text(json.dumps(out, indent=1))
        print(fmt_table(out["magis"], 2**30, "GiB",
                        "MAGIS workloads -- training graphs (weights and inputs resident)", False))
        late = [(r["graph"], k) for r in out["magis"] for k in ("serenity_paper", "serenity", "hmcos")
                if r.get(k + "_wall") is not None and r[k + "_wall"] > a.train_budget]
        print(f"every scheduler within its {a.train_budget:.0f} s budget: {not late} {late or ''}")
    res_path.write_text(json.dumps(out, indent=1))
    print(f"\nwrote {res_path.relative_to(ROOT)}")
    return 0


ABLATION = {  # HMCOS Table 2
    "1 none": {"hierarchy": "none"},
    "2 sequence": {"hierarchy": "sequence"},
    "3 seq+cell": {"hierarchy": "cell"},
    "4 complete": {},
    "5 -soft budget": {"soft_budget": False},
    "6 -strategy sel.": {"strategy_selection": False},
    "7 -memoization": {"memoize": False},
}


def ablation(a: argparse.Namespace) -> int:
    """Each of HMCOS's hierarchy levels and scheduling optimisations switched off in turn."""
    from sample_graphs.nas import NAS_MEMORY_MODEL, NAS_NAMES, nas_graph

    names = [n for n in NAS_NAMES if not n.startswith("randwire") and (not a.only or n in a.only)]
    engine = {"forced_moves": False, "beam": None} if a.plain_engine else {}
    rows = []
    head = f"{'network':<20}" + "".join(f"{k:>18}" for k in ABLATION)
    print(f"HMCOS ablation (Table 2 configurations{', plain DP engine' if a.plain_engine else ''}): "
          "peak MB / seconds")
    print(head)
    print("-" * len(head))
    for name in names:
        g = nas_graph(name)
        row = {"graph": name}
        cells = []
        for key, kw in ABLATION.items():
            s = HMCOS(time_budget=a.budget, **kw, **engine, **NAS_MEMORY_MODEL).run(g)
            row[key] = {"peak": s.peak, "seconds": s.seconds, "timed_out": s.info.get("timed_out")}
            cells.append(f"{s.peak / 1e6:.3f}/{s.seconds:.2f}{'+' if s.info.get('timed_out') else ' '}")
        rows.append(row)
        print(f"{name:<20}" + "".join(f"{c:>18}" for c in cells), flush=True)
    out = ROOT / "bench" / "results" / f"hmcos_ablation{'_plain' if a.plain_engine else ''}.json"
    out.write_text(json.dumps(rows, indent=1))
    print(f"('+': stopped at the {a.budget:.0f} s budget)\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

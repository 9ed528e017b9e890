"""Exported-script size and generation time of the full-size workloads (training graphs), read from
the committed graph files (missing files are skipped; ``make graphs`` writes them).

    python bench/export_size.py [--schedule traced] [--keep DIR]

Generation = ``core.codegen.generate_source`` (it also simulates the schedule, whose predicted peak and
latency the script embeds); compile = CPython compiling the script to bytecode (what ``python
script.py`` pays before running).  Writes bench/results/export_size.json as well.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.codegen import generate_source  # noqa: E402
from core.codegen.verify import resolve_schedule  # noqa: E402
from sample_graphs.store import graph_path, load_sample_graph  # noqa: E402

FULL = ["resnet50", "bert_base", "vit_base", "unet", "unetpp", "gpt_neo_1_3b", "btlm_3b"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedule", default="traced", help="traced, rpo, random:<seed> or a registered scheduler")
    p.add_argument("--keep", default=None, metavar="DIR", help="also write the scripts to DIR")
    a = p.parse_args()
    head = f"{'workload':<14}{'ops':>8}{'bytes':>12}{'lines':>9}{'bytes/op':>10}{'generate s':>12}{'compile s':>11}"
    print(head)
    print("-" * len(head))
    rows = []
    for name in FULL:
        if not graph_path(name).exists():
            print(f"{name:<14} (no graph file; run `make graphs`)")
            continue
        g = load_sample_graph(name)
        order = resolve_schedule(g, a.schedule)
        t0 = time.perf_counter()
        src = generate_source(g, order, schedule_name=a.schedule)
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        compile(src, f"{name}.py", "exec")
        comp_s = time.perf_counter() - t0
        size, lines = len(src.encode()), src.count("\n")
        rows.append({"workload": name, "schedule": a.schedule, "ops": len(order), "bytes": size, "lines": lines,
                     "generate_seconds": round(gen_s, 4), "compile_seconds": round(comp_s, 4)})
        print(f"{name:<14}{len(order):>8}{size:>12,}{lines:>9,}{size / len(order):>10.0f}{gen_s:>12.2f}"
              f"{comp_s:>11.2f}", flush=True)
        if a.keep:
            Path(a.keep).mkdir(parents=True, exist_ok=True)
            (Path(a.keep) / f"{name}_{a.schedule.replace(':', '_')}.py").write_text(src)
    out = ROOT / "bench" / "results" / "export_size.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

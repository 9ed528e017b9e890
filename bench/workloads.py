"""Workload table: node count, weight bytes, baseline peak and estimated latency of the seven MAGIS
evaluation workloads (training graphs), read from the committed graph files.

    python bench/workloads.py [--device rtx3090] [--all-devices]

Writes bench/results/workloads.json as well.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.cost import DEVICES  # noqa: E402
from core.summary import graph_info  # noqa: E402
from sample_graphs.store import graph_path, load_sample_graph  # noqa: E402

FULL = ["resnet50", "bert_base", "vit_base", "unet", "unetpp", "gpt_neo_1_3b", "btlm_3b"]
GiB = 1024**3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="rtx3090", choices=sorted(DEVICES))
    p.add_argument("--all-devices", action="store_true", help="latency on every GPU profile")
    a = p.parse_args()
    devices = ["rtx3090", "a100-80gb", "h100-sxm"] if a.all_devices else [a.device]
    rows = []
    head = f"{'workload':<14}{'ops':>8}{'weights GiB':>13}{'peak GiB':>10}{'peak/weights':>14}"
    head += "".join(f"{'lat ms ' + d:>18}" for d in devices) + f"{'load s':>8}"
    print(head)
    print("-" * len(head))
    for name in FULL:
        if not graph_path(name).exists():
            print(f"{name:<14} (no graph file; run `make graphs`)")
            continue
        t0 = time.perf_counter()
        g = load_sample_graph(name)
        load_s = time.perf_counter() - t0
        infos = {d: graph_info(g, device=d, top=3) for d in devices}
        i0 = infos[devices[0]]
        rows.append({"workload": name, "description": g.meta.get("description", ""), "ops": i0["nodes"],
                     "weight_bytes": i0["weight_bytes"], "baseline_peak_bytes": i0["baseline_peak_bytes"],
                     "latency_seconds": {d: infos[d]["latency_seconds"] for d in devices},
                     "top_hotspots": i0["hotspots"], "ops_without_dim_links": i0["ops_without_dim_links"]})
        line = (f"{name:<14}{i0['nodes']:>8}{i0['weight_bytes'] / GiB:>13.2f}"
                f"{i0['baseline_peak_bytes'] / GiB:>10.2f}{i0['baseline_peak_bytes'] / max(1, i0['weight_bytes']):>14.1f}")
        line += "".join(f"{infos[d]['latency_seconds'] * 1e3:>18.1f}" for d in devices) + f"{load_s:>8.1f}"
        print(line, flush=True)
    out = ROOT / "bench" / "results" / "workloads.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"\nbaseline = traced (PyTorch eager) order, each tensor freed after its last use; weights and "
          f"inputs resident.\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

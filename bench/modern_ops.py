"""F-Tree reach on models built from what modern code calls: a tiny transformer on
``F.scaled_dot_product_attention`` and a tiny UNet-like model with group norm and nearest /
bilinear upsampling (``tests/modern_models.py``), captured as training steps.

    python bench/modern_ops.py [--json]

Per model: ops, the ops without dim links (``magis info`` lists them; they block fission), how many
F-Tree candidates the search gets (``core.analysis.ftree.build_ftree``) and the largest one in ops,
the fraction of ops that some candidate covers, the estimated step latency (rtx3090 profile) and the
FLOPs the registry gives the attention ops.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.analysis.ftree import build_ftree  # noqa: E402
from core.frontend.workload import build_fake, capture_workload  # noqa: E402
from core.ir import ops  # noqa: E402
from core.ir.graph import NodeKind  # noqa: E402
from core.summary import graph_info  # noqa: E402
from tests.modern_models import TinySDPATransformer, Workload, gn_unet, sdpa_transformer  # noqa: E402


def sdpa_mid() -> Workload:
    """The transformer at a size where attention's FLOPs matter (built on fake tensors)."""
    return Workload(TinySDPATransformer(vocab=1000, d=512, heads=8, layers=2),
                    (torch.randint(0, 1000, (4, 1024)),), "sdpa_mid")


MODELS = {"sdpa_transformer (b2, seq 8, d 16, 2 heads, 2 layers)": sdpa_transformer,
          "gn_unet (b2, 3x8x8, group norm, nearest + bilinear up)": gn_unet,
          "sdpa_transformer (b4, seq 1024, d 512, 8 heads, 2 layers, fake)": lambda: build_fake(sdpa_mid)}


def row(name: str, make) -> dict:
    g = capture_workload(make())
    info = graph_info(g)
    ft = build_ftree(g)
    sizes = sorted((len(f.split.nodes) for f in ft.nodes), reverse=True)
    covered = set().union(*(set(f.split.nodes) for f in ft.nodes)) if ft.nodes else set()
    n_ops = sum(1 for n in g if n.kind == NodeKind.OP)
    att = sum(ops.flops(ops.ctx(n, g.tensor)) for n in g if "scaled_dot_product" in n.op)
    return {"attention_gflop": round(att / 1e9, 2), "model": name, "ops": n_ops, "without_dim_links": info["ops_without_dim_links"],
            "candidates": len(ft.nodes), "largest": sizes[0] if sizes else 0, "top3": sizes[:3],
            "covered": round(len(covered) / n_ops, 3), "latency_ms": round(info["latency_seconds"] * 1e3, 4)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    rows = [row(n, m) for n, m in MODELS.items()]
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        print(f"{r['model']}: {r['ops']} ops, {r['candidates']} F-Tree candidates, largest {r['largest']} ops "
              f"(top 3: {r['top3']}), {r['covered']:.0%} of ops in a candidate, est. {r['latency_ms']} ms "
              f"(attention {r['attention_gflop']} GFLOP); "
              f"without dim links: {', '.join(r['without_dim_links']) or 'none'}")


if __name__ == "__main__":
    main()

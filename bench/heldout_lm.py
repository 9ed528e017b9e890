"""Every method within the same budget on a realistic causal LM that no part of MAGIS was tuned
on: BLOOM-1b1 or an MPT of 1.3B, bf16, at batch 4 x 1024 tokens, its training step captured on fake
tensors (nothing allocated) and cached as the zoo's are.  Per method: its seconds, points and the
smallest peak at <= 10% latency overhead (x eager's; the analytic model's prediction), then MAGIS
against the best other method.

    python bench/heldout_lm.py [--model bloom_1b1|mpt_1b] [--time-budget 30] [--methods magis,dtr,...]
                               [--device rtx3090] [--json bench/results/heldout_lm.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.long_graph import captured, every_method  # noqa: E402
from bench.zoo import cache_dir  # noqa: E402
from core.ir import io  # noqa: E402
from core.search.compare import default_methods  # noqa: E402

MODELS = {  # name -> (transformers family, config, what)
    "bloom_1b1": ("Bloom", {"hidden_size": 1536, "n_layer": 24, "n_head": 16, "vocab_size": 250880},
                  "BLOOM-1b1 (24 layers, d 1536)"),
    "mpt_1b": ("Mpt", {"d_model": 2048, "n_heads": 16, "n_layers": 24, "vocab_size": 50432, "max_seq_len": 2048},
               "MPT-1.3B (24 layers, d 2048)"),
}


def graph_of(name: str, batch: int = 4, seq: int = 1024, say=print):
    path = cache_dir() / f"{name}_b{batch}_s{seq}.train.json.gz"
    if path.exists():
        return io.load(path)
    from sample_graphs.zoo import _lm

    family, config, what = MODELS[name]
    return captured(path, _lm(family, config, {}, batch, seq, what), name, say)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bloom_1b1", choices=sorted(MODELS))
    ap.add_argument("--time-budget", type=float, default=30.0)
    ap.add_argument("--methods", default=",".join(default_methods()))
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    g = graph_of(a.model)
    rows = every_method(g, a.model, a.time_budget, a.methods.split(","), a.device)
    if a.json:
        a.json.write_text(json.dumps({"model": a.model, "description": MODELS[a.model][2], "ops": len(g.ops()),
                                      "time_budget": a.time_budget, "device": a.device, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Every method within its budget on a graph of ~100k ops: Mamba-130m's training step at batch 8 x
128 tokens, whose pure-PyTorch selective scan the capture unrolls token by token (24 layers x 128
steps).  The importer's default bound is 100k nodes (``--max-nodes``); this graph is captured past it.
Per method: its seconds against the budget it was given (the budget is kept when a method
ends within a few seconds of it), its points, and the smallest peak at <= 10% latency overhead (x
eager's; the analytic model's prediction), then MAGIS against the best other method.

    python bench/long_graph.py [--time-budget 30] [--methods magis,dtr,...] [--layers 24] [--seq 128]
                               [--device rtx3090] [--json bench/results/long_graph.json]

The captured graph is cached under ``$MAGIS_CACHE/zoo`` as the zoo's are (the capture takes minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.zoo import cache_dir  # noqa: E402
from core.ir import io  # noqa: E402
from core.search.compare import compare, default_methods, rows_of  # noqa: E402


def mamba_graph(layers: int = 24, seq: int = 128, batch: int = 8, say=print):
    """Mamba-130m (d 768, state 16, ``layers`` layers) at ``batch`` x ``seq`` tokens, bf16, its
    causal-LM training step captured on fake tensors (cached)."""
    path = cache_dir() / f"mamba_{layers}l_b{batch}_s{seq}.train.json.gz"
    if path.exists():
        return io.load(path)
    from sample_graphs.zoo import _lm

    build = _lm("Mamba", {"hidden_size": 768, "state_size": 16, "num_hidden_layers": layers, "expand": 2,
                          "conv_kernel": 4, "vocab_size": 50280, "use_mambapy": False},
                {}, batch, seq, f"Mamba-130m ({layers} layers)")
    return captured(path, build, "mamba_130m", say)


def captured(path: Path, build, name: str, say=print):
    """The training step of ``build(name, False)`` (a ``sample_graphs.zoo`` builder) captured on fake
    tensors past the importer's default bound, saved to ``path``."""
    import functools

    from core.frontend.workload import build_fake, capture_workload

    t0 = time.perf_counter()
    g = capture_workload(build_fake(functools.partial(build, name, False)), name=name, max_nodes=200_000)
    say(f"captured {len(g.ops())} ops in {time.perf_counter() - t0:.0f} s")
    path.parent.mkdir(parents=True, exist_ok=True)
    io.save(g, path)
    return g


def every_method(g, name: str, time_budget: float, methods: list[str], device: str) -> list[dict]:
    """``compare`` of ``methods`` on ``g`` with one budget each; prints the table and MAGIS against
    the best other method at <= 10%; returns the rows."""
    print(f"{name}: {len(g.ops())} ops, {time_budget:g} s per method", flush=True)
    w = compare(g, name=name, device=device, methods=methods, time_budget=time_budget, peer_budget=time_budget,
                progress=lambda s: print(" ", s, flush=True))
    rows = rows_of(w)
    print(f"\n{'method':<16} {'seconds':>8} {'budget':>7} {'points':>7} {'peak<=10%':>10}")
    for r in rows:
        p10 = r.get("peak_at_10pct")
        print(f"{r['method']:<16} {r['seconds']:8.1f} {time_budget:7.0f} {r['points']:7d} "
              f"{'-' if p10 is None else f'{p10:.3f}':>10}")
    others = [r["peak_at_10pct"] for r in rows if r["method"] not in ("magis", "eager", "ideal") and r.get("peak_at_10pct")]
    magis = next((r.get("peak_at_10pct") for r in rows if r["method"] == "magis"), None)
    if magis and others:
        print(f"MAGIS at <= 10%: {magis:.3f}x eager; best other method {min(others):.3f}x: ratio {magis / min(others):.3f}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-budget", type=float, default=30.0)
    ap.add_argument("--methods", default=",".join(default_methods()))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--device", default="rtx3090")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    g = mamba_graph(a.layers, a.seq)
    ops = len(g.ops())
    rows = every_method(g, "mamba_130m", a.time_budget, a.methods.split(","), a.device)
    if a.json:
        a.json.write_text(json.dumps({"model": "mamba_130m", "ops": ops, "time_budget": a.time_budget,
                                      "device": a.device, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

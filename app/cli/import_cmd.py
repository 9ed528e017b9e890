"""``magis import``: capture a model spec as a graph file."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from core.fmt import format_bytes
from core.ir import io

from ..specs import capture_spec
from .common import Progress, _devices_help


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds ``magis import`` to the sub-commands ``sub``."""
    from core.cost.devices import DEFAULT_PROFILE

    devices = _devices_help()

    s = sub.add_parser("import", help="capture a PyTorch model as a graph file",
                       description="Capture a model's training step (or forward pass) on fake tensors "
                                   "and write its graph file; progress goes to stderr, the summary to stdout.")
    s.add_argument("spec", metavar="SPEC",
                   help="a sample name or path/to/file.py:factory (factory() returns an object with "
                        "module, inputs and loss_fn; see the README)")
    s.add_argument("-o", "--output", required=True, type=Path, metavar="FILE",
                   help="graph file to write (.json, or .json.gz to compress)")
    s.add_argument("--forward", action="store_true", help="forward pass only (default: training step)")
    s.add_argument("--sgd", type=float, default=None, metavar="LR",
                   help="append a plain SGD update of every weight with learning rate LR")
    s.add_argument("--adam", type=float, default=None, metavar="LR",
                   help="append torch.optim.Adam's first update (learning rate LR, default betas and eps); "
                        "its two moments per weight are inputs and outputs of the graph, resident like the weights")
    s.add_argument("--device", default=DEFAULT_PROFILE, metavar="NAME", help=devices)
    s.add_argument("--target", default="cpu", choices=("cpu", "cuda"),
                   help="the torch device the plan will run on: cuda rewrites each attention call into the "
                        "fused kernel a CUDA run picks (flash / memory-efficient / math) with its real saved "
                        "tensors; cpu (default) keeps the graph as captured")
    s.add_argument("--fix-random-reads", action="store_true",
                   help="a random draw the model branches on in Python (layer drop: `torch.rand([]) < "
                        "config.layerdrop`) is fixed at 1.0 -- no layer dropped -- instead of failing; "
                        "the graph records which draws")
    s.add_argument("--max-nodes", type=int, default=None, metavar="N",
                   help="refuse, while tracing, a model file whose graph would have more than N nodes (default: "
                        "the capture's bound, sized to the 32 MiB a graph file holds; a recurrent scan unrolled "
                        "over every token passes it quickly)")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    s.set_defaults(fn=cmd_import)


def cmd_import(a: argparse.Namespace) -> dict[str, Any]:
    """``magis import``: capture a model spec, write its graph file and print its summary."""
    from core.summary import graph_info

    t0 = time.perf_counter()
    with Progress() as progress:
        progress(f"importing {a.spec} ({'forward pass' if a.forward else 'training step'})")
        g = capture_spec(a.spec, training=not a.forward, sgd_lr=a.sgd, progress=progress, adam_lr=a.adam,
                         fix_random_reads=a.fix_random_reads, max_nodes=a.max_nodes)
        from core.codegen.target import retarget

        retargeted = retarget(g, a.target)
        if a.target != "cpu":
            progress(f"retargeted to {retargeted.summary()}")
        progress(f"writing {a.output}")
        io.save(g, a.output)
        progress("summarising (traced order, analytic latency)")
        info = graph_info(g, device=a.device, top=3)
    res = {"output": str(a.output), "nodes": len(g), "seconds": round(time.perf_counter() - t0, 2),
           "traced_as": g.meta.get("traced_as", "eager"), "target": a.target,
           "attention_kernels": retargeted.counts(),
           **{k: info[k] for k in ("name", "mode", "device", "weight_bytes", "baseline_peak_bytes",
                                   "latency_seconds")}}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"wrote {a.output}: {info['name']}, {info['nodes']} ops ({info['mode']}) in {res['seconds']} s")
        print(f"  weights          {format_bytes(info['weight_bytes'])}")
        print(f"  baseline peak    {format_bytes(info['baseline_peak_bytes'])}  (traced order, free after last use)")
        print(f"  est. latency     {info['latency_seconds'] * 1e3:.2f} ms on {info['device']}")
        if retargeted.calls:
            print(f"  attention        {retargeted.summary()}")
        for h in info["hotspots"]:
            print(f"  hot-spot {format_bytes(h['bytes']):>12}  {h['kind']:<10} {h['name']}  {h['shape']}  [{h['module']}]")
    return res

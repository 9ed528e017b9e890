"""Exported plans on a GPU: the measured peak (``torch.cuda.max_memory_allocated``) against the
simulated one, the measured time against the cost model's, and every output (loss and all
gradients) against the eager-order script's on the same inputs.

    python bench/gpu_plans.py export DIR [SAMPLE:POINT ...]   # here: scripts + manifest.json
    python bench/gpu_plans.py run DIR [--device cuda]          # on the GPU machine: torch only

``export`` writes, per plan point of the samples' precomputed frontiers (default: every point with a
Swap, and their samples' eager points), the standalone script (``magis export``) and the simulator's
peak and latency on the H100 profile into ``DIR/manifest.json``.  ``run`` needs nothing but torch: it
runs every script (``--save-outputs``), compares each plan's outputs with its sample's eager point's
(rtol 1e-4 on float32; the scripts draw the same seeded inputs), and prints one table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "h100-sxm"


def export(out: Path, which: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    import sample_graphs
    from core.codegen import export_script
    from core.cost import AnalyticCost
    from core.search.plan import load_plans
    from core.simulate import simulate
    from sample_graphs.frontiers import plan_path
    from sample_graphs.store import load_sample_graph

    picks: dict[str, set[int]] = {}
    if which:
        for w in which:
            name, _, k = w.partition(":")
            picks.setdefault(name, set()).add(int(k))
    else:
        for name in sample_graphs.NAMES:
            pf = load_plans(plan_path(name))
            ks = {k for k, p in enumerate(pf.points) if any(a.rule == "swap" for a in p.applications)}
            if ks:
                picks[name] = ks
    out.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, ks in picks.items():
        g0 = load_sample_graph(name)
        pf = load_plans(plan_path(name), g0)
        eager = next(k for k, p in enumerate(pf.points) if p.method == "eager")
        for k in sorted(ks | {eager}):
            p = pf.points[k]
            g = p.graph(g0)
            cost = AnalyticCost(PROFILE)
            sim = simulate(g, p.order, cost, validate=False)
            path = out / f"{name}_p{k}.py"  # its release points and header: the profile of the manifest
            export_script(g, p.order, path, schedule_name=f"plan {p.method} {p.label}".strip(), cost=cost, sim=sim)
            manifest.append({"sample": name, "point": k, "method": p.method, "label": p.label,
                             "eager": k == eager, "script": path.name, "swaps": sum(a.rule == "swap" for a in
                                                                                   p.applications),
                             "applications": len(p.applications), "simulated_peak": int(sim.peak),
                             "simulated_latency": float(sim.latency), "copies_wait": float(sim.compute_wait)})
            print(f"{path.name}: {len(p.order)} ops, simulated peak {sim.peak / 2**30:.3f} GiB", flush=True)
    (out / "manifest.json").write_text(json.dumps({"profile": PROFILE, "plans": manifest}, indent=1))
    return 0


def torch_device(name: str):
    """``core.codegen.runtime.torch_device`` (the check every exported script makes of ``--device``),
    loaded from its file: the runtime needs only torch, the rest of ``core`` is not imported."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("magis_runtime", ROOT / "core" / "codegen" / "runtime.py")
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    return runtime.torch_device(name)


def run(d: Path, device: str) -> int:
    import torch

    try:
        device = str(torch_device(device))
    except ValueError as e:  # DeviceError: no CUDA in this torch, no such GPU, a malformed name
        print(f"gpu_plans: error: {e}", file=sys.stderr)
        return 2
    man = json.loads((d / "manifest.json").read_text())
    rows = []
    for m in man["plans"]:
        outp = d / (m["script"][:-3] + ".out.pt")
        p = subprocess.run([sys.executable, str(d / m["script"]), "--device", device, "--repeat", "5",
                            "--warmup", "2", "--save-outputs", str(outp)], capture_output=True, text=True)
        if p.returncode != 0:
            rows.append({**m, "error": (p.stderr or p.stdout).strip().splitlines()[-1:]})
            continue
        rep = json.loads(p.stdout[p.stdout.index("{"):])
        rows.append({**m, "report": rep, "outputs": str(outp)})
    for r in rows:  # outputs against the sample's eager script
        if "report" not in r or r["eager"]:
            continue
        ref = next((e for e in rows if e["sample"] == r["sample"] and e["eager"] and "report" in e), None)
        if ref is None:
            continue
        a, b = torch.load(r["outputs"]), torch.load(ref["outputs"])
        worst, n = 0.0, 0
        ok = set(a) == set(b)
        for key in sorted(set(a) & set(b)):
            x, y = a[key].double().cpu(), b[key].double().cpu()
            n += 1
            err = float(((x - y).abs() / (y.abs() + 1e-5)).max()) if x.numel() else 0.0
            worst = max(worst, err)
            ok = ok and torch.allclose(x, y, rtol=1e-4, atol=1e-5)
        r["compare"] = {"tensors": n, "max_rel_err": worst, "allclose": bool(ok)}
    print(f"\nexported plans on {torch.cuda.get_device_name() if device.startswith('cuda') else device}; "
          f"simulated on the {man['profile']} profile\n")
    head = (f"{'script':<24}{'method':>8}{'swaps':>6}{'sim peak MiB':>14}{'measured MiB':>14}{'ratio':>8}"
            f"{'sim ms':>10}{'measured ms':>13}  {'outputs vs eager (same inputs)':<36}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "report" not in r:
            print(f"{r['script']:<24} failed: {r['error']}")
            continue
        rep = r["report"]
        meas = rep.get("measured_peak_bytes", 0)
        t = rep.get("measured_seconds_min", 0.0) * 1e3
        c = r.get("compare")
        cmp = "(reference)" if r["eager"] else (f"{c['tensors']} tensors, max rel {c['max_rel_err']:.1e} "
                                                 f"{'ok' if c['allclose'] else 'DIFFER'}" if c else "-")
        print(f"{r['script']:<24}{r['method']:>8}{r['swaps']:>6}{r['simulated_peak'] / 2**20:>14.1f}"
              f"{meas / 2**20:>14.1f}{meas / r['simulated_peak']:>8.3f}{r['simulated_latency'] * 1e3:>10.2f}"
              f"{t:>13.2f}  {cmp:<36}")
    (d / "results.json").write_text(json.dumps(rows, indent=1, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="write the scripts and manifest.json into DIR")
    e.add_argument("dir", type=Path)
    e.add_argument("points", nargs="*", help="SAMPLE:POINT (default: every point with a Swap)")
    r = sub.add_parser("run", help="run the scripts of DIR (torch only)")
    r.add_argument("dir", type=Path)
    r.add_argument("--device", default="cuda", help="torch device the scripts run on (default: %(default)s)")
    a = ap.parse_args(argv)
    return export(a.dir, a.points) if a.cmd == "export" else run(a.dir, a.device)


if __name__ == "__main__":
    sys.exit(main())

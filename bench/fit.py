"""``magis fit`` on realistic training steps that do not fit a 24 GiB card eagerly: the verdict,
eager's breakdown, and each method's fastest plan that fits (or why none does, and the bound).

    python bench/fit.py                                  # the three models, 2 processes, ~15 minutes
    python bench/fit.py --models whisper_small_b16 --jobs 1

Each model is one ``magis fit SPEC --device rtx3090 --time-budget 30 --json`` in its own process
(the command line itself, so the exit status is the documented one); the models are
``bench/fit_models.py``'s factories and the stored SD UNet training graph.  Writes
``bench/results/fit.json`` (``--models`` replaces those models' entries and keeps the others);
``bench/docs.py`` renders its tables in docs/cli.md.  Every byte count and latency in it is a
prediction of the analytic cost model, the simulator and the caching allocator's model.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "fit.json"
DEVICE = "rtx3090"
TIME_BUDGET = 30.0

# model -> (what it is, the arguments of `magis fit` before the device's); paths relative to ROOT
MODELS: dict[str, tuple[str, list[str]]] = {
    "whisper_small_b16": ("Whisper-small, fp32, batch 16 x 30 s of audio, 448 label tokens",
                          ["bench/fit_models.py:whisper_small_b16"]),
    "sd_unet": ("SD-1.x-size UNet (sample_graphs/sd_unet.py), fp32, batch 16 of 4x64x64 latents, the stored graph",
                ["bench/results/sd_unet.train.json.gz"]),
    "openllama_3b_adam": ("OpenLLaMA-3B, bf16, batch 4 x 1024 tokens, with Adam's update",
                          ["bench/fit_models.py:openllama_3b_b4", "--adam", "1e-4"]),
}
EXIT = {"fits": 0, "fits_with_plan": 4, "does_not_fit": 1}  # the documented exit status of each verdict
DROPPED = ("output", "memory_from")  # no -o here; the memory is always the device's


def argv_of(model: str, device: str, time_budget: float) -> list[str]:
    return ["fit", *MODELS[model][1], "--device", device, "--time-budget", f"{time_budget:g}"]


def run_one(model: str, device: str, time_budget: float) -> dict:
    """``magis fit`` on one model, in its own process: the entry of fit.json."""
    argv = argv_of(model, device, time_budget)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "app.cli", *argv, "--json"], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    seconds = time.perf_counter() - t0
    print(f"{seconds:7.1f} s  status {r.returncode}  magis {shlex.join(argv)}", flush=True)
    if r.returncode not in EXIT.values():
        raise RuntimeError(f"magis {shlex.join(argv)}: status {r.returncode}\n{r.stderr[-4000:]}")
    report = json.loads(r.stdout)
    if EXIT[report["status"]] != r.returncode:
        raise RuntimeError(f"{model}: status {report['status']} but exit status {r.returncode}")
    for key in DROPPED:
        report.pop(key, None)
    return {"model": model, "what": MODELS[model][0], "command": f"magis {shlex.join(argv)}",
            "exit_status": r.returncode, "seconds": round(seconds, 1), "report": report}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated (default: all: %(default)s)")
    ap.add_argument("--device", default=DEVICE, help="device profile (default: %(default)s)")
    ap.add_argument("--time-budget", type=float, default=TIME_BUDGET, help="seconds per method (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=2, help="processes, one model each (default: %(default)s)")
    ap.add_argument("-o", "--output", type=Path, default=OUT, help="results JSON (default: bench/results/fit.json)")
    a = ap.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        done = dict(zip(models, pool.map(lambda m: run_one(m, a.device, a.time_budget), models), strict=True))
    old = json.loads(a.output.read_text()) if a.output.exists() else {}
    same = old.get("device") == a.device and old.get("time_budget") == a.time_budget
    kept = {e["model"]: e for e in old.get("models", [])} if same else {}
    kept.update(done)
    data = {"device": a.device, "time_budget": a.time_budget,
            "command": f"python bench/fit.py --device {a.device} --time-budget {a.time_budget:g}",
            "models": [kept[m] for m in MODELS if m in kept]}
    a.output.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {a.output}: {', '.join(e['model'] for e in data['models'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

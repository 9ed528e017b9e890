"""The fuzz corpus of malformed graph files (``tests/malformed.py``) through ``magis info``: per
category, how many files, how many rejected (exit 2, one line) or accepted, tracebacks, and the worst
wall time and peak RSS of one file (each runs in its own forked child, ``tests/fuzz_runner.py``).

    python bench/fuzz_files.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.malformed import write_corpus  # noqa: E402
from tests.test_fuzz_files import run_files  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, default=None, help="write the corpus here and keep it")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_corpus(a.keep or Path(tmp))
        files = [p for ps in corpus.values() for p in ps]
        base, rows = run_files(files)
    by_file = {r["file"]: r for r in rows}
    del base  # the runner's own peak (inherited across exec): not a per-file number
    print("| category | files | rejected (exit 2, one line) | accepted (exit 0) | tracebacks | other exits "
          "| worst time | worst peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    tot = dict(files=0, rej=0, acc=0, tb=0, other=0)
    worst_t = worst_m = 0.0
    for cat, ps in corpus.items():
        rs = [by_file[str(p)] for p in ps]
        rej = sum(r["code"] == 2 and len(r["stderr"].splitlines()) == 1 for r in rs)
        acc = sum(r["code"] == 0 for r in rs)
        tb = sum("Traceback" in r["stderr"] for r in rs)
        other = len(rs) - rej - acc
        t = max(r["seconds"] for r in rs)
        m = max(r["rss_kib"] for r in rs) / 1024
        worst_t, worst_m = max(worst_t, t), max(worst_m, m)
        for k, v in zip(tot, (len(rs), rej, acc, tb, other), strict=True):
            tot[k] += v
        print(f"| {cat} | {len(rs)} | {rej} | {acc} | {tb} | {other} | {t:.2f} s | {m:.0f} MiB |")
    print(f"| **all** | {tot['files']} | {tot['rej']} | {tot['acc']} | {tot['tb']} | {tot['other']} "
          f"| {worst_t:.2f} s | {worst_m:.0f} MiB |")
    slow = sorted(rows, key=lambda r: -r["seconds"])[:3]
    big = sorted(rows, key=lambda r: -r["rss_kib"])[:3]
    print("\nslowest:", ", ".join(f"{Path(r['file']).name} {r['seconds']:.2f} s" for r in slow))
    print("largest:", ", ".join(f"{Path(r['file']).name} {r['rss_kib'] / 1024:.0f} MiB" for r in big))
    return 1 if tot["tb"] or tot["other"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Rebuild the committed sample graph files: ``python -m sample_graphs.generate [NAME ...]``.

Training graphs for every sample (forward graphs too with ``--forward``); prints one line per graph
with node count, capture time and peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import sample_graphs
from core.ir import io

from .capture import capture_sample
from .store import graph_path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("names", nargs="*", help="samples to rebuild (default: all)")
    p.add_argument("--forward", action="store_true", help="also write forward graphs")
    a = p.parse_args(argv)
    names = a.names or sample_graphs.NAMES
    modes = ["train", "forward"] if a.forward else ["train"]
    for name in names:
        for mode in modes:
            t0 = time.perf_counter()
            g = capture_sample(name, training=(mode == "train"))
            path = io.save(g, graph_path(name, mode))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{name:>16} {mode:>7}: {len(g):6d} nodes  {time.perf_counter() - t0:6.1f} s  "
                  f"peak RSS {rss:7.0f} MiB  -> {path.name} ({path.stat().st_size // 1024} KiB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

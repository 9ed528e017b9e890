"""Run ``magis info FILE`` on every file named on the command line, each in its own forked child
under resource limits (address space, CPU seconds), and print one JSON line per file: exit status,
stdout, stderr, wall seconds and the child's peak RSS (``wait4``).

The parent imports everything first, so each child measures only the work its file causes; its
peak RSS includes the pages it inherits (``baseline_rss_kib`` in the first line says how many).

    python tests/fuzz_runner.py FILE...          (used by tests/test_fuzz_files.py, bench/fuzz_files.py)
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEM_LIMIT = int(os.environ.get("MAGIS_FUZZ_MEM_LIMIT", str(3 * 2**30)))  # bytes of address space
CPU_LIMIT = int(os.environ.get("MAGIS_FUZZ_CPU_LIMIT", "60"))  # CPU seconds per file


def _read(f) -> str:
    f.seek(0)
    return f.read().decode("utf-8", "backslashreplace")


def run_one(path: str, magis) -> dict:
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: limits, redirected output, one command
        code = 70
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            lim = MEM_LIMIT if hard == resource.RLIM_INFINITY else min(MEM_LIMIT, hard)
            resource.setrlimit(resource.RLIMIT_AS, (lim, hard))
            resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT, CPU_LIMIT + 5))
            code = magis(["info", path])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # what the suite looks for: a traceback
            traceback.print_exc()
            code = 70
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
    else:
        code = -os.WTERMSIG(status)
    return {"file": path, "code": code, "stdout": _read(out), "stderr": _read(err), "seconds": round(wall, 3),
            "rss_kib": ru.ru_maxrss}


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import core.summary  # noqa: F401  (imported once here, not in every child)
    from app.cli import main as magis
    from core.ir.schema import json_extent

    json_extent(b"[]")  # numpy imported
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"baseline_rss_kib": base}), flush=True)
    for path in argv:
        print(json.dumps(run_one(path, magis)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

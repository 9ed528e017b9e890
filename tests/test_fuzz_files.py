"""Malformed and hostile graph files: ``magis info`` rejects each with exit status 2 and one line that
names the file -- never a traceback -- within bounded CPU time and memory; a file it accepts never
raises downstream (analysis, every scheduler, simulation, export).

The corpus (``tests/malformed.py``) covers the categories of problems; every file runs in its own
forked child under an address-space and CPU limit (``tests/fuzz_runner.py``), which reports its exit
status, output, wall time and peak RSS.  Hypothesis then mutates a real graph at random places.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.ir import io
from core.ir.graph import GraphError
from tests.malformed import ACCEPTED, MIXED, _dump, base_graph, write_corpus

ROOT = Path(__file__).resolve().parents[1]
CPU_LIMIT = 20  # CPU seconds per file: the runner's RLIMIT_CPU kills a child over it (the worst measured is ~1 s)
MAX_RSS_KIB = 1024 * 1024  # per file (the worst measured is ~300 MiB; the child's limit is 3 GiB)


def run_files(files: list[Path], cpu_limit: int | None = None) -> tuple[int, list[dict]]:
    """(baseline RSS in KiB, one result per file) from ``tests/fuzz_runner.py``; ``cpu_limit``: CPU
    seconds each file may take (default the runner's)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    if cpu_limit is not None:
        env["MAGIS_FUZZ_CPU_LIMIT"] = str(cpu_limit)
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "fuzz_runner.py"), *map(str, files)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    return lines[0]["baseline_rss_kib"], lines[1:]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, list[dict]]:
    corpus = write_corpus(tmp_path_factory.mktemp("corpus"))
    files = [p for ps in corpus.values() for p in ps]
    _, rows = run_files(files, cpu_limit=CPU_LIMIT)
    cat_of = {str(p): c for c, ps in corpus.items() for p in ps}
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(cat_of[r["file"]], []).append(r)
    return out


def test_corpus_covers_every_category(results):
    assert set(results) == {"json", "types", "numbers", "aliases", "structure", "depth", "size", "names"}
    assert sum(len(v) for v in results.values()) > 300


def test_no_traceback_and_one_line_per_rejected_file(results):
    for cat, rows in results.items():
        for r in rows:
            assert "Traceback" not in r["stderr"] + r["stdout"], (cat, r["file"], r["stderr"][-1500:])
            assert r["code"] in (0, 2), (cat, r["file"], r["code"], r["stderr"][-1500:])
            if r["code"] == 2:
                lines = r["stderr"].splitlines()
                assert len(lines) == 1, (r["file"], r["stderr"])
                assert lines[0].startswith("magis: error: ") and r["file"] in lines[0], lines[0]
                assert r["stdout"] == ""


@pytest.mark.parametrize("cat", ["json", "numbers", "aliases", "structure", "depth", "size"])
def test_every_malformed_file_is_rejected(results, cat):
    accepted = [r["file"] for r in results[cat] if r["code"] != 2]
    assert not accepted


def test_wrong_types_are_mostly_rejected(results):
    # a few wrong types are still valid (a string where a string goes, a null alias); the rest not
    rows = results["types"]
    rejected = sum(r["code"] == 2 for r in rows)
    assert "types" in MIXED and rejected >= 0.9 * len(rows)
    # a keyword argument an exported script could not pass by name is never accepted
    names = [r for r in rows if "-kwarg-name=" in Path(r["file"]).name]
    assert len(names) == 6 and all(r["code"] == 2 for r in names)


def test_hostile_names_are_accepted_and_printed_escaped(results):
    assert "names" in ACCEPTED
    for r in results["names"]:
        assert r["code"] == 0, (r["file"], r["stderr"])
        assert r["stderr"] == ""
        text = r["stdout"]
        assert not any(c in text for c in "\x1b\x07\x08\x00\r\u202e\ud800"), r["file"]
        assert all(c == "\n" or c.isprintable() for c in text), r["file"]
    ansi = next(r for r in results["names"] if r["file"].endswith("names-ansi.json"))
    assert "\\x1b[31mRED" in ansi["stdout"]


def test_work_and_memory_are_bounded(results):
    """No file's check runs past ``CPU_LIMIT`` CPU seconds (the kernel kills a child there, SIGXCPU:
    CPU time, which a busy machine does not stretch as it does wall time; ``python bench/fuzz_files.py``
    prints the wall times), and each stays under ``MAX_RSS_KIB``."""
    rows = [r for rs in results.values() for r in rs]
    killed = [(r["file"], r["code"]) for r in rows if r["code"] < 0]
    assert not killed, killed
    worst_m = max(rows, key=lambda r: r["rss_kib"])
    assert worst_m["rss_kib"] < MAX_RSS_KIB, worst_m["file"]
    bomb = next(r for r in results["size"] if "bomb-200MiB" in r["file"])
    assert bomb["rss_kib"] < 256 * 1024  # refused while inflating, not after


# ---- hypothesis: random mutations of a real graph ------------------------------------------------
BASE = base_graph()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["$t", "$c", "$f", "$tuple", "$dict", "shape", "alias", "x"]), inner, max_size=2),
    max_leaves=6)


def _paths(v, path=()):
    yield path
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, (*path, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, (*path, i))


PATHS = [p for p in _paths(BASE) if p]


def _set(d, path, value):
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


def downstream(g) -> None:
    """Everything a user can run on an accepted graph; only GraphError (bad schedule, cannot
    export...) may come out."""
    from core.codegen import generate_source
    from core.schedule import get_scheduler
    from core.simulate import simulate
    from core.summary import graph_info

    graph_info(g)
    for m in ("traced", "rpo", "random", "serenity", "hmcos", "incremental"):
        kw = {} if m in ("traced", "rpo") else {"time_budget": 0.2}
        s = get_scheduler(m, **kw).run(g)
        simulate(g, s.order)
    try:
        compile(generate_source(g, s.order), "<export>", "exec")  # a script Python can parse
    except GraphError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), json_values), min_size=1, max_size=3))
def test_random_mutations_are_rejected_or_harmless(edits):
    d = copy.deepcopy(BASE)
    for path, value in edits:
        try:
            _set(d, path, value)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit replaced the container
    try:
        g = io.loads(_dump(d))
    except GraphError as e:
        assert "\n" not in str(e)
        return
    downstream(g)


def test_hostile_names_export_to_a_valid_script(tmp_path):
    """Names and modules with control characters, NULs and lone surrogates end up in comments and
    the docstring of an exported script: written escaped, the script is valid UTF-8 Python."""
    from core.codegen import export_script
    from core.schedule import get_scheduler
    from tests.malformed import _names_mutants

    for label, mut in _names_mutants(BASE):
        d = copy.deepcopy(BASE)
        mut(d)
        g = io.loads(_dump(d))
        path = export_script(g, get_scheduler("traced").run(g).order, tmp_path / f"{label}.py")
        compile(Path(path).read_text(encoding="utf-8"), str(path), "exec")

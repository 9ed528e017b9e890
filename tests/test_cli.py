"""CLI: bad files give one clear error line and no traceback; info reports what it should."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.ir import io
from core.ir.builder import GraphBuilder
from tests.model_files import MLP_FACTORY

ROOT = Path(__file__).resolve().parents[1]


def magis(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)


def _good_graph_dict() -> dict:
    b = GraphBuilder("tiny")
    x = b.input("x", 16)
    a = b.op("A", [x], 32)
    b.op("B", [a], 8, output=True)
    return io.graph_to_dict(b.graph)


def _write(tmp_path: Path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


@pytest.fixture
def bad_files(tmp_path):
    good = _good_graph_dict()
    raw = json.dumps(good).encode()
    cyc = json.loads(raw)
    cyc["nodes"][1]["args"] = [{"$t": [2, 0]}]  # A reads B, B reads A
    noshape = json.loads(raw)
    del noshape["nodes"][1]["outputs"][0]["shape"]
    badver = json.loads(raw)
    badver["version"] = 7
    return {
        "truncated": (_write(tmp_path, "t.json", raw[: len(raw) // 2]), "not valid JSON"),
        "cycle": (_write(tmp_path, "c.json", json.dumps(cyc).encode()), "cycle"),
        "missing shape": (_write(tmp_path, "s.json.gz", gzip.compress(json.dumps(noshape).encode())),
                          "has no shape"),
        "unknown version": (_write(tmp_path, "v.json", json.dumps(badver).encode()),
                            "unsupported graph schema version 7"),
        "missing file": (str(tmp_path / "nope.json"), "no such file"),
    }


@pytest.mark.parametrize("case", ["truncated", "cycle", "missing shape", "unknown version", "missing file"])
def test_bad_file_is_one_clear_line(bad_files, case):
    path, message = bad_files[case]
    r = magis("info", path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("magis: error: ") and message in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_info_json_on_a_small_graph(tmp_path):
    path = tmp_path / "g.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_good_graph_dict()).encode()))
    r = magis("info", str(path), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    # x(16) resident; A: 16+32; B: 16+32+8 = 56
    assert info["baseline_peak_bytes"] == 56
    assert info["nodes"] == 2
    assert info["ops_without_dim_links"] == ["synthetic"]
    assert info["latency_seconds"] > 0


def test_unknown_sample_is_a_clear_error(tmp_path):
    r = magis("import", "no_such_model", "-o", str(tmp_path / "x.json.gz"))
    assert r.returncode == 2 and "unknown sample" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.json.gz").exists()




def test_import_and_verify_a_factory_file(tmp_path, capsys):
    from app.cli import main

    spec = f"{tmp_path / 'mlp.py'}:build"
    (tmp_path / "mlp.py").write_text(MLP_FACTORY)
    for mode in ([], ["--forward"]):
        out = tmp_path / f"mlp{len(mode)}.json.gz"
        assert main(["import", spec, "-o", str(out), "--json", *mode]) == 0
        res = json.loads(capsys.readouterr().out)
        g = io.load(out)
        assert res["nodes"] == len(g) and g.name == "build"
        assert g.meta["mode"] == ("forward" if mode else "train")
    assert main(["verify", spec, "--schedule", "rpo", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] and res["sample"] == spec and res["schedule"] == "rpo" and res["dtype"] == "float32"


def test_info_of_a_sample_name_reads_its_graph_file(capsys):
    from app.cli import main

    assert main(["info", "fig2_skip", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "fig2_skip"


@pytest.mark.parametrize("args,message", [
    (["import", "nope.py:build"], "no such file: nope.py"),
    (["import", "tests/test_cli.py:no_such_factory"], "has no function 'no_such_factory'"),
    (["import", "nope"], "unknown sample 'nope'"),
    (["verify", "resnet50"], "resnet50 is a full-size workload"),
    (["schedule", "fig2_skip", "--method", "nope"], "unknown schedule 'nope'"),
])
def test_bad_specs_are_one_clear_line(tmp_path, capsys, args, message):
    from app.cli import main

    if args[0] == "import":
        args = [*args, "-o", str(tmp_path / "x.json.gz")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: error: ") and message in err[-1]
    assert not (tmp_path / "x.json.gz").exists()


def test_every_option_has_help_and_name_options_list_the_registry():
    import argparse

    from app.cli import build_parser
    from core.cost.devices import DEVICES
    from core.schedule.registry import SCHEDULERS

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {c.dest for c in sub._choices_actions} == set(sub.choices)
    assert all(c.help for c in sub._choices_actions)
    named = {"schedule": SCHEDULERS, "method": SCHEDULERS, "device": DEVICES}
    seen = set()
    for cmd, sp in sub.choices.items():
        text = " ".join(sp.format_help().split())
        for act in sp._actions:
            if isinstance(act, argparse._HelpAction):
                continue
            assert act.help, f"magis {cmd} {act.option_strings or act.dest} has no help"
            if act.dest in named:
                seen.add(act.dest)
                assert all(name in act.help for name in named[act.dest]), (cmd, act.dest)
                assert ", ".join(sorted(named[act.dest])) in text
    assert seen == set(named)


def test_progress_repeats_a_long_stage():
    import io as _io
    import time

    from app.cli import Progress

    out = _io.StringIO()
    with Progress(every=0.02, stream=out) as progress:
        progress("Tracing the model")
        deadline = time.monotonic() + 10
        while "still tracing the model" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("] Tracing the model") and lines[0].startswith("[")
    assert any(line.endswith("... still tracing the model") for line in lines[1:])

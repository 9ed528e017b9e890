"""``magis fuse``: a plan file for a forward graph, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from core.ir import io
from core.ir.builder import GraphBuilder


def run(capsys, *argv):
    status = main(["fuse", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_fuse_writes_a_plan_covering_every_op(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    status, out, err = run(capsys, "mobilenet_v2", "--buffer", "256KiB", "--explainer", "oracle", "--plans", "60",
                           "--search", "nsga2", "-o", str(plan), "--json")
    assert status == 0, err
    res = json.loads(out)
    saved = json.loads(plan.read_text())
    assert saved["format"] == "magis-fusion-plan" and res["dram_bytes"] == saved["dram_bytes"]
    assert saved["dram_bytes"] < saved["trivial_dram_bytes"] and saved["plans"] == 60
    ops = [op for gr in saved["groups"] for op in gr["ops"]]
    assert len(ops) == len(set(ops))
    assert all(gr["buffer_bytes"] < 256 * 1024 or len(gr["ops"]) == 1 for gr in saved["groups"])
    assert saved["max_buffer_bytes"] < 256 * 1024 and saved["latency_seconds"] < saved["trivial_latency_seconds"]


@pytest.mark.parametrize("argv, message", [
    (["--scheme", "lbdff"], "unknown fusion scheme 'lbdff'; known: lbdf, brr"),
    (["--search", "annealing"], "unknown search 'annealing'"),
    (["--explainer", "shap"], "unknown explainer 'shap'"),
    (["--buffer", "12XB"], "'12XB' is not a size"),
    (["--buffer", "64KiB", "--strict"], "a 64.0 KiB buffer is too small for 95 single ops under LBDF: convolution_1,"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, message):
    plan = tmp_path / "plan.json"
    args = ["efficientnet_b3", "--buffer", "256KiB", "--explainer", "oracle", "--plans", "5", "-o", str(plan)]
    for k in range(0, len(argv), 2):  # the case's options replace the defaults
        if argv[k] in args:
            args[args.index(argv[k]) + 1] = argv[k + 1]
        else:
            args += argv[k:k + 2] if k + 1 < len(argv) else argv[k:]
    if "--strict" in argv and "--strict" not in args:
        args.append("--strict")
    status, out, err = run(capsys, *args)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("magis: error: ") and message in lines[0]
    assert not plan.exists()


def test_nothing_to_fuse(tmp_path, capsys):
    b = GraphBuilder("lonely")
    x = b.input("x", 64)
    b.op("a", [x, b.weight("w", 4096)], 64, output=True)
    b.op("b", [x], 64, output=True)  # two ops, no edge between them
    path = tmp_path / "g.json"
    io.save(b.graph, path)
    status, _, err = run(capsys, str(path), "--buffer", "256KiB", "-o", str(tmp_path / "p.json"))
    assert status == 2 and err.strip() == ("magis: error: nothing to fuse in lonely: no two connected ops fit the "
                                           "buffer (2 ops, 0 too big for a 256.0 KiB buffer alone)")

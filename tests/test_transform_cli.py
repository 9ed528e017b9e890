"""``magis ftree``, ``magis transform`` and ``magis verify --graph`` as a user runs them: apply fission,
recomputation and a swap by name to a sample graph, then check the transformed graph's exported
script against the eager model; bad requests are one line and exit status 2."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from core.analysis.ftree import build_ftree
from core.ir import io
from core.ir.graph import NodeKind
from core.schedule import get_scheduler
from sample_graphs.store import load_sample_graph


def long_lived(g, avoid=frozenset()):
    """Names (tensor, its last reader) of the two activations idle longest before their last use
    (neither of them among the node ids ``avoid``)."""
    order = get_scheduler("traced").run(g).order
    pos = {v: i for i, v in enumerate(order)}
    gaps = []
    for n in g.ops():
        if len(n.outputs) != 1 or n.out.alias is not None or not n.out.nbytes or n.id in avoid:
            continue
        rs = sorted(g.readers(n.refs()[0]), key=pos.__getitem__)
        if len(rs) >= 2 and rs[-1] not in avoid:
            gaps.append((pos[rs[-1]] - pos[rs[-2]], n.name, g[rs[-1]].name))
    gaps.sort(reverse=True)
    return [(a, b) for _, a, b in gaps[:2]]


def test_transform_then_verify_the_transformed_graph(tmp_path, capsys):
    g = load_sample_graph("bert_tiny")
    small = min(build_ftree(g).nodes, key=lambda f: (len(f.split.nodes), f.id))  # a leaf of the F-Tree
    (t1, u1), (t2, u2) = long_lived(g, frozenset(small.split.nodes))
    assert main(["ftree", "bert_tiny", "--json"]) == 0
    tree = json.loads(capsys.readouterr().out)
    assert tree["nodes"] and all(r["n"] == 1 for r in tree["nodes"])
    out = tmp_path / "t.json.gz"
    assert main(["transform", "bert_tiny", "--enable", f"{small.id}:2", "--swap", f"{t1}:{u1}", "--remat", f"{t2}:{u2}",
                 "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [d["rule"] for d in res["applied"]] == ["fission", "swap", "remat"]
    h = io.load(out)
    kinds = {n.kind for n in h}
    assert {NodeKind.FISSION, NodeKind.STORE, NodeKind.LOAD} <= kinds
    assert any(n.recompute_of is not None for n in h)
    assert h.meta["transforms"] == [f"fission {small.id}:2", f"swap {t1}:{u1}", f"remat {t2}:{u2}"]
    assert main(["verify", "bert_tiny", "--graph", str(out), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["ok"] and v["fission_nodes"] == 1 and v["peak_ratio"] == 1.0


@pytest.mark.parametrize("args, words", [
    (["--enable", "9999"], "no F-Tree node"),
    (["--enable", "LEAF:7"], "does not divide"),
    (["--enable", "0"], "neither a leaf nor the parent of an enabled node"),
    (["--disable", "LEAF"], "is not enabled"),
    (["--enable", "LEAF", "--enable", "LEAF"], "enabled already"),
    (["--enable", "LEAF:x"], "N must be a whole number"),
    (["--swap", "nope:x"], "no node named 'nope'"),
    (["--remat", "justone"], "expected TENSOR:USER"),
    ([], "nothing to apply"),
])
def test_bad_transform_requests_are_one_line(tmp_path, capsys, args, words):
    leaf = str(_leaf(load_sample_graph("bert_tiny")).id)
    args = [a.replace("LEAF", leaf) for a in args]
    assert main(["transform", "bert_tiny", *args, "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: error:") and words in err[-1]  # after the steps that applied
    assert not any("Traceback" in line for line in err) and not (tmp_path / "x.json").exists()


def test_verify_refuses_a_graph_of_another_model(tmp_path, capsys):
    out = tmp_path / "vit.json.gz"
    io.save(load_sample_graph("vit_tiny"), out)
    assert main(["verify", "bert_tiny", "--graph", str(out)]) == 2
    assert "does not belong to this model" in capsys.readouterr().err


def _leaf(g):
    return min((f for f in build_ftree(g).nodes if not f.children), key=lambda f: (len(f.split.nodes), f.id))


def test_ftree_rules_from_the_command_line_nest_lift_mutate_and_disable(tmp_path, capsys):
    g = load_sample_graph("bert_tiny")
    ft = build_ftree(g)
    leaf = next(f for f in ft.nodes if not f.children and f.parent is not None
                and len(ft.nodes[f.parent].split.divisors()) >= 2)
    parent = ft.nodes[leaf.parent]
    out = tmp_path / "t.json.gz"
    steps = ["--enable", f"{leaf.id}", "--enable", f"{parent.id}", "--disable", f"{leaf.id}",
             "--mutate", f"{parent.id}"]
    assert main(["transform", "bert_tiny", *steps, "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [d["rule"] for d in res["applied"]] == ["fission", "fission", "disable", "mutate"]
    h = io.load(out)
    (top,) = [n for n in h if n.kind == NodeKind.FISSION]  # the parent alone, at the next divisor
    assert top.fission.members == frozenset(parent.split.nodes)
    assert top.fission.n == parent.split.divisors()[1]
    assert main(["verify", "bert_tiny", "--graph", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]


def test_swap_late_by_name_lowers_the_peak_and_verifies(tmp_path, capsys):
    """``--swap-late TENSOR``: the readers of a U-Net skip connection after the traced order's peak
    read one loaded copy; the peak falls and the script still matches eager PyTorch."""
    from core.analysis.lifetimes import memory_profile
    from core.transform.rule import Where
    from core.transform.swap import SwapLate

    g = load_sample_graph("unet_tiny")
    order = get_scheduler("traced").run(g).order
    prof = memory_profile(g, order)
    where = Where({v: i for i, v in enumerate(order)}, tuple(prof.peak_steps))
    late = [s.root for s in prof.hotspots() if SwapLate().match(g, [s.root], where)]
    assert late
    name = g[late[0].node].name
    out = tmp_path / "t.json.gz"
    assert main(["transform", "unet_tiny", "--swap-late", name, "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["applied"][0]["rule"] == "swap_late" and res["peak_bytes"][1] < res["peak_bytes"][0]
    assert main(["verify", "unet_tiny", "--graph", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    # an input has nothing to free: one line, no file
    first = next(n.name for n in g if n.kind == NodeKind.PLACEHOLDER)
    assert main(["transform", "unet_tiny", "--swap-late", first, "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: error:") and "--swap-late" in err[-1] and not (tmp_path / "x.json").exists()


def test_swap_output_by_name_keeps_the_results_and_verifies(tmp_path, capsys):
    """``--swap-output TENSOR``: a weight's gradient goes to host memory once made and comes back
    for the end of the step; the script still returns it (matching eager PyTorch).  A tensor an op
    reads is refused in one line."""
    g = load_sample_graph("unet_tiny")
    ref = max((r for r in g.output_refs() if g.nodes[r.node].kind == NodeKind.OP and not g.readers(r)
               and g.nodes[r.node].outputs[r.index].nbytes > 0),
              key=lambda r: (g.nodes[r.node].outputs[r.index].nbytes, r))
    name = g[ref.node].name + (f"#{ref.index}" if ref.index else "")
    out = tmp_path / "t.json.gz"
    assert main(["transform", "unet_tiny", "--swap-output", name, "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["applied"][0]["rule"] == "swap_output"
    assert main(["verify", "unet_tiny", "--graph", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    read = next(n.name for n in g.ops() if g.users(n.id) and len(n.outputs) == 1)
    assert main(["transform", "unet_tiny", "--swap-output", read, "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: error:") and not (tmp_path / "x.json").exists()

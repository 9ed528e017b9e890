"""``magis optimize`` / ``export --plan`` / ``verify --plan`` end to end, and every tiny workload
optimised at three memory limits with its plan verified against eager PyTorch (slow)."""

from __future__ import annotations

import json

import pytest
import torch

from app.cli import main
from core.fmt import format_bytes
from core.search.moptimizer import optimize
from core.search.plan import check_order, load_plans
from sample_graphs.store import load_sample_graph
from tests.workload_cases import TINY, Case


def test_optimize_with_another_method_at_a_memory_limit(tmp_path, capsys):
    """``--method odswap --memory-limit 0.8``: the method's point under the limit, then eager's."""
    out = tmp_path / "od.json"
    assert main(["optimize", "bert_tiny", "--method", "odswap", "--memory-limit", "0.8", "--time-budget", "5",
                 "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [p["method"] for p in res["points"]] == ["odswap", "eager"]
    assert res["points"][0]["peak_ratio"] <= 0.8 and res["points"][1]["peak_ratio"] == 1.0
    assert [p.method for p in load_plans(out).points] == ["odswap", "eager"]


def test_optimize_export_and_verify_a_plan(tmp_path, capsys):
    out = tmp_path / "p.json.gz"
    assert main(["optimize", "bert_tiny", "--latency-limit", "1.1", "--time-budget", "4", "-o", str(out),
                 "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [p["method"] for p in res["points"]] == ["magis", "eager"]
    assert res["points"][0]["latency_ratio"] <= 1.1 and res["points"][0]["peak_ratio"] <= 1.0
    assert main(["export", "bert_tiny", "--plan", str(out), "-o", str(tmp_path / "s.py"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ops"] > 0
    assert main(["verify", "bert_tiny", "--plan", str(out), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["ok"] and v["peak_ratio"] == 1.0


@pytest.mark.parametrize("args, words", [
    (["bert_tiny", "--memory-limit", "lots"], "is not a size"),
    (["bert_tiny", "--memory-limit", "1.5"],
     "--memory-limit '1.5' is not a memory limit: a fraction of the peak must be at most 1; for a size give "
     "units, e.g. 1.5GiB"),
    (["bert_tiny", "--latency-limit", "0.5"], "at least 1"),
])
def test_bad_optimize_requests_are_one_line(tmp_path, capsys, args, words):
    assert main(["optimize", *args, "--time-budget", "1", "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: error:") and words in err[-1]
    assert not any("Traceback" in line for line in err)
    if "is not" in words:  # refused before any search: nothing written
        assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("limit, resolve", [("0.5", lambda eager: int(0.5 * eager)),
                                            ("8GiB", lambda eager: 8 << 30)])
def test_the_plan_file_records_the_limit_as_given_and_the_bytes_used(tmp_path, capsys, limit, resolve):
    """A fraction resolves against the imported (eager) peak, a size is itself; the plan file's meta
    keeps both, and the command's verdict ("no plan reaches ...", exit status 3) uses those bytes."""
    out = tmp_path / "p.json"
    rc = main(["optimize", "fig2_skip", "--memory-limit", limit, "--time-budget", "1", "-o", str(out),
               "--json"])
    cap = capsys.readouterr()
    pf = load_plans(out, load_sample_graph("fig2_skip"))
    meta, eager = pf.meta, pf.points[-1].peak
    assert (meta["mode"], meta["limit"], meta["limit_bytes"]) == ("memory", limit, resolve(eager))
    assert json.loads(cap.out)["meta"] == meta
    reached = pf.points[0].peak <= meta["limit_bytes"]
    assert rc == (0 if reached else 3)
    if not reached:
        assert f"magis: warning: no plan reaches the memory limit {format_bytes(meta['limit_bytes'])}" in cap.err


def test_an_unwritable_plan_path_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert main(["optimize", "fig2_skip", "--memory-limit", "0.9", "--time-budget", "1",
                 "-o", str(tmp_path / "f" / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("magis: error:") and "File exists" in err[-1]


def test_a_plan_of_another_graph_is_one_line(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["optimize", "bert_tiny", "--pareto", "--time-budget", "2", "-o", str(out)]) == 0
    capsys.readouterr()
    for cmd in (["verify", "vit_tiny", "--plan", str(out)], ["export", "vit_tiny", "--plan", str(out), "-o",
                                                                str(tmp_path / "s.py")]):
        assert main(cmd) == 2
        assert "the plan was made for graph 'bert_tiny', not for 'vit_tiny'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_tiny_workloads_optimised_at_three_memory_limits_verify(name):
    case = Case(name, torch.float64)
    g = case.g
    got = []
    for limit in (0.95, 0.85, 0.7):
        pf = optimize(g, memory_limit=limit, time_budget=4)
        plan = pf.points[0]
        h = plan.graph(g)
        check_order(h, plan.order)
        res = case.verify_order(h, plan.order, f"{name} limit {limit}")
        got.append((limit, round(plan.peak / pf.points[-1].peak, 3), round(plan.latency / pf.points[-1].latency, 3),
                    len(plan.applications), res["peak_ratio"]))
    print(f"\n{name}: (limit, peak ratio, latency ratio, applications, measured/simulated) {got}")


SWAP_MODEL = '''
import torch
from torch import nn

N = 1024


class Workload:
    """sin(x) is read only at the end; six matmuls in between take longer on an RTX 3090 than on an
    A100, so a swap of sin(x) finishes its store after a different number of steps on each."""

    def __init__(self):
        torch.manual_seed(0)
        self.module = Model()
        self.inputs = (torch.randn(N, N),)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(N, N) / N**0.5)

    def forward(self, x):
        a = torch.sin(x)
        b = x
        for _ in range(6):
            b = torch.mm(b, self.w)
        c = torch.cat([b, b, b, b]).sum(0, keepdim=True)
        return c + a.sum()


def build():
    return Workload()
'''


def test_export_and_verify_simulate_on_the_plan_files_device(tmp_path, capsys):
    """A swap plan made for a100-80gb: ``magis export --plan`` writes a script whose header (and
    release points) are the simulation on a100-80gb -- not on the default rtx3090, whose peak and
    latency differ for this plan -- ``--device`` overrides the plan file's device, and ``magis verify
    --plan`` compares the measured peak with the a100-80gb simulation."""
    from core.codegen.verify import load_script
    from core.cost import AnalyticCost
    from core.ir import io
    from core.ir.graph import NodeKind
    from core.schedule import get_scheduler
    from core.search.plan import Plan, PlanFile, save_plans
    from core.search.wl_hash import graph_hash
    from core.simulate import simulate
    from core.transform.registry import RULES
    from core.transform.rule import Application

    (tmp_path / "swapdemo.py").write_text(SWAP_MODEL)
    spec, gfile = f"{tmp_path / 'swapdemo.py'}:build", tmp_path / "g.json.gz"
    assert main(["import", spec, "--forward", "-o", str(gfile)]) == 0
    g = io.load(gfile)
    order = get_scheduler("traced").run(g).order
    sin, read = (next(v for v in order if g[v].name == name) for name in ("sin", "sum_2"))
    app = Application("swap", (sin, 0, read))
    h = g.copy()
    added = RULES["swap"].apply(h, app).added()
    (store,), (load,) = ([v for v in added if h.nodes[v].kind == k] for k in (NodeKind.STORE, NodeKind.LOAD))
    o = list(order)
    o.insert(o.index(sin) + 1, store)
    o.insert(o.index(read), load)
    sims = {d: simulate(h, o, AnalyticCost(d)) for d in ("a100-80gb", "rtx3090")}
    a100, rtx = sims["a100-80gb"], sims["rtx3090"]
    assert a100.peak != rtx.peak and a100.latency != rtx.latency and a100.copy_done != rtx.copy_done
    base = simulate(g, order, AnalyticCost("a100-80gb"))
    plan = tmp_path / "p.json"
    save_plans(PlanFile(g.name, graph_hash(g), "a100-80gb", [
        Plan("magis", [app], o, a100.metrics(), "swap sin"),
        Plan("eager", [], order, base.metrics(), "traced order")]), plan)
    capsys.readouterr()

    for extra, want, device in (([], a100, "a100-80gb"), (["--device", "rtx3090"], rtx, "rtx3090")):
        script = tmp_path / f"s_{device}.py"
        assert main(["export", str(gfile), "--plan", str(plan), "-o", str(script), "--json", *extra]) == 0
        res = json.loads(capsys.readouterr().out)
        meta = load_script(script).META
        header = (meta["simulated_device"], meta["simulated_peak_bytes"], meta["simulated_latency_seconds"])
        assert header == (device, want.peak, want.latency)
        assert (res["device"], res["simulated_peak_bytes"], res["simulated_latency_seconds"]) == (
            device, want.peak, want.latency)
        assert f"Simulated on {device}: peak {format_bytes(want.peak)}" in script.read_text()

    assert main(["verify", spec, "--graph", str(gfile), "--plan", str(plan), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["simulated_device"] == "a100-80gb" and v["simulated_peak_bytes"] == a100.peak
    assert v["ok"] and v["measured_peak_bytes"] == a100.peak

    bad = tmp_path / "x.py"
    assert main(["export", str(gfile), "--plan", str(plan), "-o", str(bad), "--device", "v100"]) == 2
    assert "--device: unknown device 'v100'" in capsys.readouterr().err
    assert not bad.exists()

"""The model zoo (``sample_graphs/zoo.py``): every family's tiny variant imported as ``magis
import`` does it (built on fake tensors, captured), exported with no device-specific kernel, and
the script against eager PyTorch on a real build (loss, every gradient, measured peak); and the
two capture fixes the zoo needed, on small hand-written cases."""

from __future__ import annotations

import functools
import re

import pytest
import torch
from torch import nn

from core.codegen.emit import generate_source
from core.codegen.verify import problems, verify_workload
from core.frontend.workload import SCHEDULE_MAX, build_fake, capture_workload
from core.schedule import get_scheduler
from sample_graphs import zoo
from tests.test_export_device_neutral import DEVICE_KERNELS


def test_the_zoo_has_fifteen_families_beyond_the_samples():
    import sample_graphs

    assert len({m.family for m in zoo.ZOO}) >= 15 and len(zoo.NAMES) == len(set(zoo.NAMES))
    assert not set(zoo.NAMES) & set(sample_graphs.NAMES + sample_graphs.FORWARD_NAMES)
    assert {m.kind for m in zoo.ZOO} == {"causal LM", "seq2seq", "vision", "diffusion"}
    with pytest.raises(ValueError, match="unknown zoo model 'nope'; known: opt"):
        zoo.build("nope")


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.NAMES)
def test_every_zoo_family_imports_exports_device_neutral_and_matches_eager(name):
    make = functools.partial(zoo.build, name, True)
    torch.manual_seed(0)
    g = capture_workload(build_fake(make), name=name)
    body = generate_source(g, get_scheduler("traced").run(g).order)
    body = body[body.index("def _step("):]
    called = set(re.findall(r"(?:aten|torch\.ops\.\w+)\.(\w+)\.\w+\(", body))
    assert called and not [c for c in called if DEVICE_KERNELS.search(c)], called
    torch.manual_seed(0)
    res = verify_workload(make(), "traced", 0, graph=g, details=True)
    assert problems(res) == [], problems(res)
    assert res["compared"] > 1  # the loss and the gradients


class _Scheduled(nn.Module):
    """Per-layer rates computed in ``__init__`` from ``torch.linspace`` and read as Python floats,
    as ConvNeXt and Swin compute their stochastic-depth rates."""

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.rates = [x.tolist() for x in torch.linspace(0, 0.3, n).split([1, n - 1])]
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(n))
        self.big = torch.arange(SCHEDULE_MAX + 1)  # larger than a schedule: stays fake

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_schedules_of_python_numbers_are_real_on_a_fake_build_and_weights_stay_fake():
    from torch._subclasses.fake_tensor import FakeTensor

    m = build_fake(_Scheduled)
    assert m.rates[0] == [0.0] and m.rates[1] == pytest.approx([0.1, 0.2, 0.3])
    assert all(isinstance(p, FakeTensor) for p in m.parameters())
    assert isinstance(m.big, FakeTensor)
    assert not isinstance(torch.linspace(0, 1, 3), FakeTensor)  # nothing leaks out of the build


class _ShiftRight(nn.Module):
    """T5's ``_shift_right``: a new zero tensor whose slice receives the input (captured as the
    functional ``copy`` of a slice, which allocates its base's whole storage)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 4)

    def forward(self, ids):
        shifted = ids.new_zeros(ids.shape)
        shifted[:, 1:] = ids[:, :-1].clone()
        return self.emb(shifted)


class _W:
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.module = _ShiftRight()
        self.inputs = (torch.randint(0, 16, (2, 8)),)

    @staticmethod
    def loss_fn(m, ids):
        return m(ids).square().mean()


def test_the_copy_of_a_slice_is_as_large_as_its_base_in_the_graph_and_measured():
    g = capture_workload(build_fake(_W), name="shift")
    copy = next(n for n in g if n.op == "aten.copy.default")
    assert copy.outputs[0].nbytes == 2 * 8 * 8  # the base's (2, 8) int64 storage, not the (2, 7) slice
    res = verify_workload(_W(), "traced", 0, graph=g, details=True)
    assert problems(res) == [], problems(res)


def test_the_zoo_bench_gives_every_method_one_budget_per_model_scaled_by_ops(tmp_path, monkeypatch, capsys):
    import json

    import bench.zoo as bench

    assert bench.budget_of(5310, 20, 40) == pytest.approx(212.4)
    assert bench.budget_of(226, 20, 40) == 20 and bench.budget_of(5310, 20) == 20
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path))
    out = tmp_path / "part.json"
    assert bench.main(["--models", "resnet18", "--methods", "magis,eager,dtr", "--tiny", "--time-budget", "0.5",
                       "--per-kop", "6", "--json", str(out), "--markdown"]) == 0
    run = json.loads(out.read_text())
    (m,) = run["models"]
    assert run["per_kop"] == 6 and m["time_budget"] == pytest.approx(max(0.5, 6 * m["ops"] / 1000))
    assert m["time_budget"] > 0.5  # the tiny ResNet-18's ops give it more than --time-budget
    assert {r["method"] for r in m["rows"]} == {"magis", "eager", "dtr"}
    text = capsys.readouterr().out
    assert "every method 0.5 s per model (6 s per thousand ops where that is more)" in text
    row = next(x for x in text.splitlines() if x.startswith("| resnet18 | "))
    assert row.count("|") == 12 and f"| {m['ops']:,} | {m['time_budget']:.0f} |" in row
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**run, "per_kop": 0}))
    with pytest.raises(SystemExit, match="differ in device, budget"):
        bench.merge([out, other], None)


def test_the_zoo_readme_table_puts_magis_against_the_best_other_method_at_each_headline():
    import bench.zoo as bench

    def row(method, p5, p10, o80, o40):
        return {"method": method, "peak_at_5pct": p5, "peak_at_10pct": p10, "overhead_at_80pct": o80,
                "overhead_at_40pct": o40}

    m = {"model": "x", "size": "X-1B", "ops": 1234, "time_budget": 49.4, "floor_ratio": 0.25, "no_dim_links": ["topk"],
         "rows": [row("magis", 0.7, 0.4, 0.05, None), row("eager", 1.0, 1.0, None, None),
                  row("dtr", None, 0.5, 0.02, 0.3), row("checkmate", 0.8, 0.45, None, None)]}
    assert bench.versus(m) == {"model": "x", "magis": 0.4, "best": 0.45, "best_method": "checkmate",
                               "ratio": pytest.approx(0.4 / 0.45)}
    assert bench.versus(m, "overhead_at_80pct")["ratio"] is None  # overheads are not compared as ratios
    assert bench.format_markdown([m]).splitlines()[2] == (
        "| x | X-1B | 1,234 | 49 | 0.25x | **0.700x** / checkmate 0.800x | **0.400x** / checkmate 0.450x | 0.89 | "
        "+5.0% / dtr +2.0% | - / dtr +30.0% | `topk` |")

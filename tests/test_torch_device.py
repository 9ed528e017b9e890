"""A torch device a user names -- ``--device`` of an exported script and of ``bench/gpu_plans.py run``,
``plan_step(device=...)`` -- is checked first (``core.codegen.runtime.torch_device``): one line that says
why it cannot run there and names the devices there are, exit status 2 on a command line, a
``ValueError`` in Python; and the app's export panel offers only the devices this torch has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import core.train as train
from app import export_view
from core.codegen import export_script
from core.codegen.runtime import DeviceError, torch_device, torch_devices
from core.frontend.torch_import import capture
from core.schedule import get_scheduler
from core.train import plan_step

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_cuda(monkeypatch):
    """This torch without a usable GPU (as the CPU-only build is; also on a GPU machine)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def one_gpu(monkeypatch):
    """This torch as it is on a machine with one GPU (no CUDA call is made by the check)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def no_gpu_env() -> dict[str, str]:
    """The environment of a script run that sees no GPU, on any machine."""
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


# ---- the check ------------------------------------------------------------------------------------
def test_cpu_is_always_a_device():
    assert torch_device("cpu") == torch.device("cpu")
    assert torch_device("cpu:0") == torch.device("cpu:0")
    assert torch_device(torch.device("cpu")) == torch.device("cpu")
    assert torch_devices()[0] == "cpu"


def test_cuda_without_cuda_is_one_line_naming_what_there_is(no_cuda):
    assert torch_devices() == ["cpu"] or torch_devices() == ["cpu", "mps"]
    for name in ("cuda", "cuda:0", torch.device("cuda")):
        with pytest.raises(DeviceError) as e:
            torch_device(name)
        msg = str(e.value)
        assert isinstance(e.value, ValueError) and "\n" not in msg
        assert msg.startswith(f"torch device '{name}': CUDA is not available (")
        assert msg.endswith(f"available: {', '.join(torch_devices())}")


@pytest.mark.parametrize("name", ["cuda:x", "tpu", "", "CUDA", " cpu", "cuda:-1"])
def test_malformed_names_are_refused_in_one_line(name, no_cuda):
    with pytest.raises(DeviceError) as e:
        torch_device(name)
    msg = str(e.value)
    assert msg.startswith(f"bad torch device {name!r} (expected cpu, cuda, cuda:N or mps); available: cpu")
    assert "\n" not in msg


@pytest.mark.parametrize("name", ["meta", "xpu", "cpu:1"])
def test_devices_torch_knows_but_cannot_run_here_are_refused(name, no_cuda):
    with pytest.raises(DeviceError, match=rf"^torch device '{name}' is not available here; available: cpu"):
        torch_device(name)


def test_with_one_gpu_cuda_and_cuda_0_are_devices_and_cuda_1_is_not(one_gpu):
    assert torch_devices()[:2] == ["cpu", "cuda:0"]
    assert torch_device("cuda") == torch.device("cuda")
    assert torch_device("cuda:0") == torch.device("cuda", 0)
    with pytest.raises(DeviceError, match=r"^torch device 'cuda:1': no such GPU \(1 visible\); available: cpu, cuda:0"):
        torch_device("cuda:1")


# ---- exported scripts -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    g = capture(model, (torch.randn(3, 8),), lambda m, x: m(x).square().mean(), name="mlp")
    path = tmp_path_factory.mktemp("scripts") / "mlp.py"
    return export_script(g, get_scheduler("traced").run(g).order, path, schedule_name="traced")


def run_script(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, env=no_gpu_env(),
                          timeout=120)


def test_script_with_cuda_and_no_gpu_says_so_in_one_line_and_exits_2(script):
    p = run_script(script, "--device", "cuda")
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: torch device 'cuda': CUDA is not available (")
    assert lines[0].endswith("available: cpu") or lines[0].endswith("available: cpu, mps")


def test_script_with_a_malformed_device_exits_2_and_cpu_runs(script):
    p = run_script(script, "--device", "cuda:x")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    assert p.stderr.startswith("error: bad torch device 'cuda:x' (expected cpu, cuda, cuda:N or mps); available: cpu")
    p = run_script(script, "--device", "cpu", "--repeat", "0", "--warmup", "0")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["device"] == "cpu" and rep["outputs_finite"] and rep["peak_ratio"] == 1.0


def test_imported_run_refuses_a_device_it_cannot_use(script, no_cuda):
    from core.codegen.verify import load_script

    mod = load_script(script)
    tensors = mod.make_inputs(mod.INPUTS)
    with pytest.raises(mod.DeviceError, match="^torch device 'cuda': CUDA is not available"):  # the script's own
        mod.run(tensors, "cuda")
    assert issubclass(mod.DeviceError, ValueError)


# ---- bench/gpu_plans.py run ------------------------------------------------------------------------
def test_gpu_plans_run_checks_the_device_first(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"profile": "h100-sxm", "plans": []}))
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_plans.py"), "run", str(tmp_path)],
                       capture_output=True, text=True, env=no_gpu_env(), timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("gpu_plans: error: torch device 'cuda': CUDA is not available (")
    assert len(p.stderr.splitlines()) == 1
    assert not (tmp_path / "results.json").exists()


# ---- the step API ---------------------------------------------------------------------------------
def test_plan_step_refuses_cuda_before_any_capture(no_cuda, monkeypatch, tmp_path):
    def no_capture(*a, **k):
        raise AssertionError("captured before checking the device")

    monkeypatch.setattr(train, "capture_workload", no_capture)
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path))
    model = nn.Linear(4, 2)
    for device in ("cuda", "cuda:x", "tpu"):
        with pytest.raises(ValueError) as e:
            plan_step(model, lambda m, x: m(x).sum(), (torch.randn(3, 4),), memory_limit=0.5, device=device,
                      progress=False)
        assert isinstance(e.value, DeviceError) and "\n" not in str(e.value)
        assert f"'{device}'" in str(e.value) and str(e.value).endswith("available: cpu")


# ---- the app's export panel -----------------------------------------------------------------------
FRONTIER = SimpleNamespace(plans=SimpleNamespace(graph_name="fig2_skip"), points=[SimpleNamespace(method="magis")])


def test_export_panel_offers_cpu_and_names_cuda_for_a_gpu_machine(no_cuda):
    assert export_view.script_devices() == ["cpu"]
    lines = export_view.commands("sample:fig2_skip", FRONTIER, 0).splitlines()
    runs = [ln for ln in lines if ln.startswith("python ")]
    assert runs == ["python fig2_skip_magis_point0.py --device cpu    # prints measured vs simulated peak"]
    assert lines[-1] == "# this machine's torch has no CUDA: on a GPU machine the script also takes --device cuda"


def test_export_panel_offers_cuda_first_where_torch_has_it(one_gpu):
    assert export_view.script_devices() == ["cuda", "cpu"]
    lines = export_view.commands("sample:fig2_skip", FRONTIER, 0).splitlines()
    assert [ln for ln in lines if ln.startswith("python ")] == [
        "python fig2_skip_magis_point0.py --device cuda    # prints measured vs simulated peak",
        "python fig2_skip_magis_point0.py --device cpu"]
    assert not any("no CUDA" in ln for ln in lines)


def test_export_panel_offers_the_devices_this_torch_has():
    offered = export_view.script_devices()
    assert offered[-1] == "cpu"
    assert ("cuda" in offered) == any(d.startswith("cuda:") for d in torch_devices())
    for d in offered:
        assert torch_device(d).type == d

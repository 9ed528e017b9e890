"""The step API (``core.train.plan_step``): a training step run by a MAGIS plan inside the user's
own loop equals eager PyTorch's -- losses, ``.grad``, batch-norm statistics, parameters after SGD
and Adam steps -- and its measured live bytes never exceed the plan's simulated peak; a batch of
another shape is re-planned (or run eagerly, or refused) as documented; plans come from the cache
on the second construction; bad input fails with a clear error."""

from __future__ import annotations

import copy
import gzip
import json
import warnings

import pytest
import torch
from torch import nn

import core.train as train
from core.frontend.torch_import import ImportErrorMAGIS
from core.search.plan import PlanError, PlanFile, save_plans
from core.train import NewShapeWarning, plan_step

# the small models' plans rarely reach 0.5 within the tests' short searches (weights and gradients
# are a large share of their peak); the step then runs the least peak found, with a LimitWarning
# (its own test below); the other tests look at what runs, not at that notice
pytestmark = pytest.mark.filterwarnings("ignore::core.train.LimitWarning")

RTOL, ATOL = 1e-4, 1e-5
TINY = ["bert_tiny", "vit_tiny", "gpt_neo_tiny", "btlm_tiny", "resnet50_tiny", "unet_tiny", "unetpp_tiny",
        "fig2_skip", "fig6_ftree"]


def mlp_bn(width: int = 32) -> nn.Module:
    """Linear layers without bias before batch norm (as usual): such a bias's gradient is zero
    mathematically, its computed value rounding noise (~1e-9) that Adam scales up to full steps --
    a plan that sums in another order (fission) would then move it differently from eager."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, width, bias=False), nn.BatchNorm1d(width), nn.ReLU(),
                         nn.Linear(width, width, bias=False), nn.BatchNorm1d(width), nn.ReLU(),
                         nn.Linear(width, 4))


def ce(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x), y)


def batch(n: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g)


def assert_state_equal(a: nn.Module, b: nn.Module) -> None:
    for (k, u), v in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(u, v, rtol=RTOL, atol=ATOL, msg=lambda m, k=k: f"{k}: {m}")


def assert_grads_equal(a: nn.Module, b: nn.Module) -> None:
    for (k, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), k
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL, msg=lambda m, k=k: f"grad {k}: {m}")


def train_both(step, model: nn.Module, reference: nn.Module, loss_fn, batches, make_opt) -> list[dict]:
    """``len(batches)`` optimizer steps of ``model`` by ``step`` (each measured) and of
    ``reference`` eagerly; the losses must agree at every step.  Returns the memory records."""
    opt, opt_ref = make_opt(model.parameters()), make_opt(reference.parameters())
    mems = []
    for b in batches:
        opt.zero_grad()
        loss, mem = step.measure(*b)
        opt_ref.zero_grad()
        ref = loss_fn(reference, *b)
        ref.backward()
        torch.testing.assert_close(loss, ref.detach(), rtol=RTOL, atol=ATOL)
        assert loss.requires_grad is False and loss.shape == ()
        assert_grads_equal(model, reference)
        opt.step()
        opt_ref.step()
        mems.append(mem)
    assert_state_equal(model, reference)
    return mems


OPTIMIZERS = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
              "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2)}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh plan cache (through ``MAGIS_CACHE``, as a user would move it)."""
    monkeypatch.setenv("MAGIS_CACHE", str(tmp_path / "magis"))
    return tmp_path / "magis" / "plans"


@pytest.fixture
def searches(monkeypatch):
    """The number of M-Optimizer searches run (``core.train``'s calls of ``optimize``)."""
    calls = []
    real = train.optimize

    def counting(*a, **k):
        calls.append(k.get("memory_limit"))
        return real(*a, **k)

    monkeypatch.setattr(train, "optimize", counting)
    return calls


# ---- a small model with batch norm --------------------------------------------------------------
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_mlp_bn_trains_like_eager(opt, cache, searches):
    model = mlp_bn()
    reference = copy.deepcopy(model)
    step = plan_step(model, ce, batch(), memory_limit=0.5, time_budget=1.5, progress=False)
    assert len(searches) == 1 and step.searches == 1 and not step.from_cache
    assert step.simulated_peak < step.first.eager_peak  # the plan saves memory
    mems = train_both(step, model, reference, ce, [batch(seed=k) for k in range(5)], OPTIMIZERS[opt])
    for m in mems:
        assert m["measured_peak_bytes"] <= m["simulated_peak_bytes"] == step.simulated_peak
    # batch-norm statistics moved (and equal eager's, checked above)
    assert int(model[1].num_batches_tracked) == 5
    assert not torch.equal(model[1].running_mean, torch.zeros(32))


def test_unreachable_limit_runs_the_least_peak_with_a_warning(cache):
    with pytest.warns(train.LimitWarning, match=r"no plan found for sequential reaches the memory limit 1KiB \(1\.00 KiB\)"):
        step = plan_step(mlp_bn(), ce, batch(), memory_limit="1KiB", time_budget=0.5, progress=False)
    assert not step.reached and step.first.limit_bytes == 1024
    assert step.simulated_peak <= step.first.eager_peak
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = plan_step(mlp_bn(), ce, batch(), memory_limit="1GiB", time_budget=0.5, progress=False)
    assert ok.reached


def test_gradients_accumulate_like_backward(cache):
    """Without ``zero_grad`` the step adds to ``.grad`` as ``backward`` does; a parameter whose
    ``.grad`` is None gets one; a frozen parameter gets none."""
    model = mlp_bn()
    model[6].bias.requires_grad_(False)
    reference = copy.deepcopy(model)
    step = plan_step(model, ce, batch(), memory_limit=0.6, time_budget=1.0, progress=False)
    for k in range(3):
        step(*batch(seed=k))
        ce(reference, *batch(seed=k)).backward()
        assert_grads_equal(model, reference)
    assert model[6].bias.grad is None
    assert_state_equal(model, reference)  # running statistics after 3 steps


def test_capture_leaves_the_module_alone(cache):
    model = mlp_bn()
    before = copy.deepcopy(model.state_dict())
    plan_step(model, ce, batch(), memory_limit=0.8, time_budget=0.5, progress=False)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in model.parameters())


# ---- the plan cache -----------------------------------------------------------------------------
def test_second_construction_reads_the_cache(cache, searches):
    model = mlp_bn()
    first = plan_step(model, ce, batch(), memory_limit=0.5, time_budget=1.0, progress=False)
    files = sorted(cache.iterdir())
    assert len(files) == 1 and files[0].name.endswith(".json.gz") and len(searches) == 1
    second = plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, time_budget=1.0, progress=False)
    assert second.from_cache and second.searches == 0 and len(searches) == 1
    assert second.plan.to_dict() == first.plan.to_dict()
    assert second.source == first.source
    # another limit or another device profile is another key: a search
    third = plan_step(mlp_bn(), ce, batch(), memory_limit=0.7, time_budget=0.5, progress=False)
    assert not third.from_cache and len(searches) == 2
    fourth = plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, time_budget=0.5, progress=False,
                       profile="rtx3090")
    assert not fourth.from_cache and len(searches) == 3
    assert len(list(cache.iterdir())) == 3
    # cache=False neither reads nor writes it
    fifth = plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, time_budget=0.5, progress=False, cache=False)
    assert not fifth.from_cache and len(searches) == 4 and len(list(cache.iterdir())) == 3


def test_corrupt_cache_file_is_searched_again(cache, searches):
    plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, time_budget=0.5, progress=False)
    (path,) = cache.iterdir()
    path.write_bytes(gzip.compress(b"{not json"))
    with pytest.warns(UserWarning, match="ignoring the cached plan"):
        step = plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, time_budget=0.5, progress=False)
    assert not step.from_cache and len(searches) == 2
    assert json.loads(gzip.decompress(path.read_bytes()))["schema"] == "magis-plan"  # rewritten


def test_nothing_is_written_but_the_cache(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, time_budget=0.5, progress=False)
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert len(written) == 1 and written[0].startswith("magis/plans/")


def test_progress_is_reported(cache):
    messages: list[str] = []
    plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, time_budget=1.0, progress=messages.append)
    assert any(m.startswith("capturing:") for m in messages)
    assert any(m.startswith("searching") for m in messages) and messages[-1].startswith("searched")


def test_default_progress_is_one_updating_line(cache, capsys):
    plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, time_budget=1.0)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n") and err.count("\r") >= 3 and "magis: searched" in err


# ---- a batch of another shape -------------------------------------------------------------------
def test_new_batch_shape_is_replanned_once(cache, searches):
    model = mlp_bn()
    reference = copy.deepcopy(model)
    step = plan_step(model, ce, batch(64), memory_limit=0.5, time_budget=1.0, progress=False)
    with pytest.warns(NewShapeWarning, match="new batch shape"):
        loss = step(*batch(40, seed=1))  # an epoch's last batch
    ref = ce(reference, *batch(40, seed=1))
    ref.backward()
    torch.testing.assert_close(loss, ref.detach(), rtol=RTOL, atol=ATOL)
    assert_grads_equal(model, reference)
    assert len(searches) == 2 and len(step.plans()) == 2
    new = [c for c in step.plans().values() if c is not step.first][0]
    assert new.limit_bytes == step.limit.bytes(new.eager_peak) and new.eager_peak < step.first.eager_peak
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second batch of that shape: no notice, no search
        step(*batch(40, seed=2))
    ce(reference, *batch(40, seed=2)).backward()
    assert len(searches) == 2
    assert_grads_equal(model, reference)
    # a new construction finds both shapes' plans in the cache
    again = plan_step(mlp_bn(), ce, batch(64), memory_limit=0.5, time_budget=1.0, progress=False)
    with pytest.warns(NewShapeWarning):
        again(*batch(40, seed=1))
    assert again.searches == 0 and all(c.from_cache for c in again.plans().values())


def test_new_batch_shape_eager_or_error(cache):
    model = mlp_bn()
    reference = copy.deepcopy(model)
    step = plan_step(model, ce, batch(64), memory_limit=0.5, time_budget=0.5, progress=False,
                     on_new_shape="eager")
    with pytest.warns(NewShapeWarning, match="running it eagerly"):
        loss = step(*batch(40, seed=1))
    ref = ce(reference, *batch(40, seed=1))
    ref.backward()
    torch.testing.assert_close(loss, ref.detach(), rtol=RTOL, atol=ATOL)
    assert_grads_equal(model, reference)
    assert_state_equal(model, reference)
    strict = plan_step(mlp_bn(), ce, batch(64), memory_limit=0.5, progress=False, on_new_shape="error")
    with pytest.raises(ValueError, match="no plan for a batch"):
        strict(*batch(40))


def test_eval_mode_is_another_graph(cache):
    """A module switched to ``eval()`` (batch norm reads its running statistics and does not
    update them) gets its own plan; the step still equals eager's."""
    model = mlp_bn()
    reference = copy.deepcopy(model)
    step = plan_step(model, ce, batch(), memory_limit=0.6, time_budget=0.5, progress=False)
    model.eval()
    reference.eval()
    with pytest.warns(NewShapeWarning, match="eval"):
        loss = step(*batch(seed=3))
    ref = ce(reference, *batch(seed=3))
    ref.backward()
    torch.testing.assert_close(loss, ref.detach(), rtol=RTOL, atol=ATOL)
    assert_grads_equal(model, reference)
    assert int(model[1].num_batches_tracked) == 0


# ---- plan files and bad input -------------------------------------------------------------------
def _plan_file(step) -> PlanFile:
    from core.search.wl_hash import graph_hash

    c = step.first
    return PlanFile(c.graph.name, graph_hash(c.graph), step.profile, [c.plan])


def test_plan_file_of_this_model_runs_without_search(cache, tmp_path, searches):
    model = mlp_bn()
    reference = copy.deepcopy(model)
    made = plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, time_budget=1.0, progress=False, cache=False)
    path = save_plans(_plan_file(made), tmp_path / "plan.json.gz")
    step = plan_step(model, ce, batch(), plan=path, progress=False)
    assert step.searches == 0 and not step.from_cache and len(searches) == 1
    assert step.simulated_peak == made.simulated_peak
    train_both(step, model, reference, ce, [batch(seed=k) for k in range(2)], OPTIMIZERS["sgd"])


def test_plan_file_of_another_graph_is_refused(cache, tmp_path):
    made = plan_step(mlp_bn(width=32), ce, batch(), memory_limit=0.5, time_budget=0.5, progress=False)
    path = save_plans(_plan_file(made), tmp_path / "plan.json.gz")
    with pytest.raises(PlanError, match="the plan was made for graph .* not for"):
        plan_step(mlp_bn(width=24), ce, batch(), plan=path, progress=False)
    with pytest.raises(PlanError, match="the plan was made for graph"):  # same model, another batch
        plan_step(mlp_bn(width=32), ce, batch(32), plan=path, progress=False)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(PlanError, match="not a MAGIS plan file"):
        plan_step(mlp_bn(), ce, batch(), plan=tmp_path / "bad.json", progress=False)


def test_bad_input_is_a_clear_error(cache):
    with pytest.raises(TypeError, match="needs a torch.nn.Module, not function"):
        plan_step(lambda x: x, ce, batch(), memory_limit=0.5)
    with pytest.raises(ValueError, match="give a memory limit"):
        plan_step(mlp_bn(), ce, batch())
    with pytest.raises(ValueError, match="a fraction of the peak must be at most 1"):
        plan_step(mlp_bn(), ce, batch(), memory_limit=1.5)
    with pytest.raises(ValueError, match="on_new_shape"):
        plan_step(mlp_bn(), ce, batch(), memory_limit=0.5, on_new_shape="skip")
    with pytest.raises(ImportErrorMAGIS, match="inputs must be a tuple of example tensors"):
        plan_step(mlp_bn(), ce, ([1.0], 2), memory_limit=0.5, progress=False)


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 4)

    def forward(self, x):
        h = self.lin(x)
        if h.mean() > 0:  # reads a value: cannot be captured
            h = h * 2
        return h


def test_uncapturable_model_fails_with_the_importers_line(cache):
    with pytest.raises(ImportErrorMAGIS) as e:
        plan_step(Branchy(), ce, batch(), memory_limit=0.5, progress=False)
    msg = str(e.value)
    assert msg.startswith("could not capture the model") and "\n" not in msg and "h.mean() > 0" in msg


# ---- every tiny workload ------------------------------------------------------------------------
def _rolled(inputs: tuple, k: int) -> tuple:
    """Batch ``k``: the example batch rolled by ``k`` rows (labels and tokens stay valid)."""
    return tuple(t.roll(k, 0) for t in inputs)


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_tiny_workloads_train_like_eager(name, cache, searches):
    """5 SGD and 5 Adam steps of each tiny workload under a MAGIS plan at 0.5 of its peak (most
    cannot reach 0.5 -- weights and gradients alone are more -- and then run the least peak the
    search found, with a ``LimitWarning``): losses, gradients, parameters and buffers equal eager's,
    and the live bytes measured at every step are at most the simulated peak."""
    from app.specs import build_workload

    w = build_workload(name, 0)
    base = copy.deepcopy(w.module)
    batches = [_rolled(tuple(w.inputs), k) for k in range(5)]
    for k, opt in enumerate(sorted(OPTIMIZERS)):
        model, reference = copy.deepcopy(base), copy.deepcopy(base)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            step = plan_step(model, w.loss_fn, tuple(w.inputs), memory_limit=0.5, time_budget=3.0,
                             progress=False, name=name)
        assert step.from_cache == (k > 0) and len(searches) == 1  # the second optimizer's step: cached
        assert step.reached or any(r.category is train.LimitWarning for r in record)
        assert step.simulated_peak <= step.first.eager_peak
        mems = train_both(step, model, reference, w.loss_fn, batches, OPTIMIZERS[opt])
        assert max(m["measured_peak_bytes"] for m in mems) <= step.simulated_peak


# ---- causal LMs: labels shifted inside the step --------------------------------------------------
def _gpt2_shifted():
    """A tiny GPT-2 trained as most causal LMs are: ``cross_entropy(logits[:, :-1], ids[:, 1:])``."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).train()

    def loss_fn(m, ids):
        logits = m(input_ids=ids).logits
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 128), ids[:, 1:].reshape(-1))

    return model, loss_fn, (torch.randint(0, 128, (8, 32)),)


def _hf_example():
    """``examples/hf_causal_lm.py``'s Llama: transformers computes the shifted loss from ``labels``."""
    from app.specs import build_workload

    w = build_workload("examples/hf_causal_lm.py:build", 0)
    return w.module, w.loss_fn, tuple(w.inputs)


@pytest.mark.slow
@pytest.mark.parametrize("make", [_gpt2_shifted, _hf_example], ids=["gpt2_shifted_labels", "hf_causal_lm_example"])
def test_causal_lm_with_shifted_labels_trains_like_eager(make, cache, monkeypatch):
    """5 Adam steps under a plan at 0.5 of the peak equal eager's, and the live bytes measured at every
    step are at most the simulated peak: the loss's labels are shifted (and padded with -100) inside
    the step, which the plan's fission of the loss must count over the whole batch."""
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    module, loss_fn, inputs = make()
    base = copy.deepcopy(module)
    batches = [_rolled(inputs, k) for k in range(5)]
    model, reference = copy.deepcopy(base), copy.deepcopy(base)
    step = plan_step(model, loss_fn, inputs, memory_limit=0.5, time_budget=5.0, progress=False)
    assert step.simulated_peak < step.first.eager_peak
    mems = train_both(step, model, reference, loss_fn, batches, OPTIMIZERS["adam"])
    assert max(m["measured_peak_bytes"] for m in mems) <= step.simulated_peak

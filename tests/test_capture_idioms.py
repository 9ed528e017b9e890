"""Capture of losses and idioms users train with, which tracing on fake tensors cannot take as written.

* CTC loss: ``aten._ctc_loss`` is refused by torch's fake tensors ("returns a shape that depends on
  tensor values"); the capture's fake kernels (``core.frontend.fake_kernels``) give the shapes the
  CPU kernel gives, every form users write imports, and the exported script reproduces eager
  PyTorch (loss, every gradient, peak); micro-batching splits through it.
* Random draws read in Python (``transformers``' layer drop): one line naming the draw and the
  config field, or ``--fix-random-reads``, which captures the step with no layer dropped and records
  it; ``magis verify`` of that graph compares with the same eager step.
* A value-dependent shape in a backward (SpecAugment's ``x[mask] = v``): the line names the forward
  call that made it, not "inside torch".
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensorMode  # noqa: E402

from app.cli import main  # noqa: E402
from app.specs import build_workload, capture_spec  # noqa: E402
from core.codegen.verify import problems, verify_module  # noqa: E402
from core.frontend import fake_kernels  # noqa: E402
from core.frontend.torch_import import ImportErrorMAGIS, capture  # noqa: E402
from core.ir import io, ops  # noqa: E402

T, B, C, S, D = 16, 4, 8, 6, 12  # frames, batch, classes (0 = blank), padded target width, features
IN_LENGTHS = [16, 14, 16, 11]
TARGET_LENGTHS = [6, 3, 6, 5]  # row 0 (and 2) is the longest target: the batch is padded to it


class Acoustic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(D, 24)
        self.head = nn.Linear(24, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, T, C]
        return self.head(torch.tanh(self.proj(x)))


def _log_probs(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return m(x).log_softmax(-1).transpose(0, 1)  # [T, B, C], as ctc_loss wants it (not contiguous)


def _padded_labels() -> torch.Tensor:
    y = torch.randint(1, C, (B, S))
    for b, n in enumerate(TARGET_LENGTHS):
        y[b, n:] = -100  # transformers pads labels with -100
    return y


def _tensor_lengths(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(IN_LENGTHS), (y >= 0).sum(-1)


def int_lengths_mean(m, x, y):
    return F.ctc_loss(_log_probs(m, x), y.clamp_min(0), IN_LENGTHS, TARGET_LENGTHS)


def int_lengths_sum(m, x, y):
    return F.ctc_loss(_log_probs(m, x), y.clamp_min(0), tuple(IN_LENGTHS), tuple(TARGET_LENGTHS), reduction="sum")


def tensor_lengths_mean(m, x, y):
    il, tl = _tensor_lengths(y)
    return F.ctc_loss(_log_probs(m, x), y.clamp_min(0), il, tl)


def tensor_lengths_sum_zero_infinity(m, x, y):
    il, tl = _tensor_lengths(y)
    return F.ctc_loss(_log_probs(m, x), y.clamp_min(0), il, tl, reduction="sum", zero_infinity=True)


def per_sample_weighted(m, x, y):
    il, tl = _tensor_lengths(y)
    per = F.ctc_loss(_log_probs(m, x), y.clamp_min(0), il, tl, reduction="none")
    return (per * torch.linspace(0.5, 1.0, B)).sum()


def ctc_module(m, x, y):
    il, tl = _tensor_lengths(y)
    return nn.CTCLoss(blank=0, zero_infinity=True)(_log_probs(m, x), y.clamp_min(0), il, tl)


def concatenated_int_lengths(m, x, flat):
    return F.ctc_loss(_log_probs(m, x), flat, IN_LENGTHS, TARGET_LENGTHS, reduction="sum")


CTC_FORMS = [int_lengths_mean, int_lengths_sum, tensor_lengths_mean, tensor_lengths_sum_zero_infinity,
             per_sample_weighted, ctc_module, concatenated_int_lengths]


def _ctc_workload(loss):
    """(model, inputs) built from seed 0: a fake build and a real one are the same model."""
    torch.manual_seed(0)
    m, x, y = Acoustic(), torch.randn(B, T, D), _padded_labels()
    if loss is concatenated_int_lengths:
        y = torch.cat([y[b, :n] for b, n in enumerate(TARGET_LENGTHS)])
    return m, (x, y)


def _ctc_nodes(g):
    return {n.op: n for n in g.ops() if "_ctc_loss" in n.op}


# ---- the fake kernels ----------------------------------------------------------------------------
KERNEL_CASES = {  # name -> (targets, input lengths, target lengths): lists or tensors
    "padded_wider_than_longest": (torch.randint(1, C, (B, S + 3)), IN_LENGTHS, TARGET_LENGTHS),
    "concatenated": (torch.randint(1, C, (sum(TARGET_LENGTHS),)), IN_LENGTHS, TARGET_LENGTHS),
    "tensor_lengths_padded_to_longest": (torch.randint(1, C, (B, S)), torch.tensor(IN_LENGTHS),
                                         torch.tensor(TARGET_LENGTHS)),
}


@pytest.mark.parametrize("case", KERNEL_CASES, ids=str)
def test_ctc_fake_kernels_give_the_cpu_kernels_shapes(case):
    """The real CPU kernels on small tensors and the fake kernels on fake copies: the same shapes,
    dtypes and strides for the forward (loss [B], log_alpha [B, T, 2 max(target_lengths) + 1]) and
    the backward (the gradient of log_probs)."""
    targets, il, tl = KERNEL_CASES[case]
    torch.manual_seed(0)
    lp = torch.randn(B, T, C).log_softmax(-1).transpose(0, 1)
    aten = torch.ops.aten
    fwd = aten._ctc_loss.Tensor if isinstance(tl, torch.Tensor) else aten._ctc_loss.default
    bwd = aten._ctc_loss_backward.Tensor if isinstance(tl, torch.Tensor) else aten._ctc_loss_backward.default
    real = fwd(lp, targets, il, tl, 0, False)
    real_grad = bwd(torch.ones(B), lp, targets, il, tl, *real, 0, False)
    assert real[1].shape == (B, T, 2 * max(TARGET_LENGTHS) + 1)  # what the fake kernel must reproduce

    with fake_kernels.capture_kernels(), FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in (lp, targets, il, tl)]
        out = fwd(*fake, 0, False)
        grad = bwd(torch.ones(B), fake[0], fake[1], fake[2], fake[3], *out, 0, False)
    for r, f in zip((*real, real_grad), (*out, grad), strict=True):
        assert (f.shape, f.dtype, f.stride()) == (r.shape, r.dtype, r.stride())


def test_ctc_kernels_are_installed_only_while_a_capture_traces():
    """Outside a capture torch's own rule applies (the op is refused); inside, the kernels are
    installed once however deeply captures nest, and taken out when the last one ends."""

    def refused() -> bool:
        with FakeTensorMode():
            lp = torch.empty(T, B, C)
            try:
                torch.ops.aten._ctc_loss.default(lp, torch.ones(B, S, dtype=torch.long), IN_LENGTHS, TARGET_LENGTHS)
            except DynamicOutputShapeException:
                return True
        return False

    assert refused() and not fake_kernels.installed()
    seen = []

    def loss(m, x, y):
        seen.append(fake_kernels.installed())
        return int_lengths_sum(m, x, y)

    m, inputs = _ctc_workload(int_lengths_sum)
    with fake_kernels.capture_kernels():
        capture(m, inputs, loss)  # a capture inside another's installation
        assert fake_kernels.installed()
    assert seen and all(seen)
    assert refused() and not fake_kernels.installed()


# ---- every form of the loss ----------------------------------------------------------------------
@pytest.mark.parametrize("loss", CTC_FORMS, ids=lambda f: f.__name__)
def test_ctc_loss_forms_import_and_reproduce_eager(loss):
    """Built and captured on fake tensors (as ``magis import`` does), then verified against a real
    build: the loss and every gradient equal eager PyTorch's, the measured peak equals the simulated
    one, and log_alpha has the real kernel's width."""
    g = capture(*_fake_ctc(loss), loss, name=loss.__name__)
    nodes = _ctc_nodes(g)
    overload = "Tensor" if "tensor" in loss.__name__ or loss in (per_sample_weighted, ctc_module) else "default"
    assert set(nodes) == {f"aten._ctc_loss.{overload}", f"aten._ctc_loss_backward.{overload}"}
    fwd = nodes[f"aten._ctc_loss.{overload}"]
    assert [o.shape for o in fwd.outputs] == [(B,), (B, T, 2 * max(TARGET_LENGTHS) + 1)]
    assert nodes[f"aten._ctc_loss_backward.{overload}"].out.shape == (T, B, C)
    m, inputs = _ctc_workload(loss)
    res = verify_module(m, inputs, loss, graph=g)
    assert not problems(res), problems(res)
    assert res["peak_ratio"] == 1.0 and res["compared"] == 1 + len(list(m.parameters()))
    torch.manual_seed(0)
    assert res["loss"] == pytest.approx(float(loss(m, *inputs).detach()), rel=1e-6)


def _fake_ctc(loss):
    with FakeTensorMode(allow_non_fake_inputs=True):
        return _ctc_workload(loss)


def test_tensor_lengths_with_targets_padded_wider_over_estimate_memory_only():
    """Tensor lengths, targets padded 3 wider than the longest: the capture cannot see the lengths and
    sizes log_alpha by the padded width (the kernel sizes it by the longest target) -- the values are
    eager PyTorch's, and the simulated peak is at least the measured one, never below it."""

    def wide(m, x, y):
        y = F.pad(y, (0, 3), value=-100)
        il, tl = _tensor_lengths(y)
        return F.ctc_loss(_log_probs(m, x), y.clamp_min(0), il, tl, reduction="sum")

    g = capture(*_fake_ctc(tensor_lengths_mean), wide)
    assert _ctc_nodes(g)["aten._ctc_loss.Tensor"].outputs[1].shape == (B, T, 2 * (S + 3) + 1)
    m, inputs = _ctc_workload(tensor_lengths_mean)
    res = verify_module(m, inputs, wide, graph=g)
    assert res["allclose"] and res["max_abs_error"] == 0.0
    assert res["simulated_peak_bytes"] >= res["measured_peak_bytes"]


def test_concatenated_targets_with_tensor_lengths_are_refused_in_one_line():
    """Concatenated 1-D targets with tensor lengths: the longest target is bounded only by their sum,
    so the capture says so, at the user's line, and how to write the loss instead."""

    def loss(m, x, flat):
        return F.ctc_loss(_log_probs(m, x), flat, torch.tensor(IN_LENGTHS), torch.tensor(TARGET_LENGTHS))

    m, inputs = _fake_ctc(concatenated_int_lengths)
    with pytest.raises(ImportErrorMAGIS) as err:
        capture(m, inputs, loss)
    msg = str(err.value)
    assert "\n" not in msg and "aten._ctc_loss.Tensor" in msg
    assert f"{os.path.basename(__file__)}:" in msg and "padded 2-D targets" in msg


def test_ctc_registry_costs_and_links():
    """FLOPs from log_alpha's and the gradient's sizes; the batch links every batch-indexed tensor of
    the tensor-length overloads; the int-list overloads have no links (fission stops there)."""
    g = capture(*_fake_ctc(tensor_lengths_mean), tensor_lengths_mean)
    nodes = _ctc_nodes(g)
    fwd, bwd = nodes["aten._ctc_loss.Tensor"], nodes["aten._ctc_loss_backward.Tensor"]
    width = 2 * max(TARGET_LENGTHS) + 1
    assert ops.get(fwd.op).category == "loss" and ops.get(bwd.op).category == "loss"
    assert ops.flops(ops.ctx(fwd, g.tensor)) == 10 * B * T * width
    assert ops.flops(ops.ctx(bwd, g.tensor)) == 20 * B * T * width + 4 * T * B * C
    links = ops.dim_links(ops.ctx(fwd, g.tensor))
    assert {(lk.input, lk.in_dim) for lk in links} == {(0, 1), (1, 0), (2, 0), (3, 0)}
    assert {(lk.output, lk.out_dim) for lk in links} == {(0, 0), (1, 0)}
    bwd_links = ops.dim_links(ops.ctx(bwd, g.tensor))
    assert len(bwd_links) == 7 and {(lk.output, lk.out_dim) for lk in bwd_links} == {(0, 1)}
    g2 = capture(*_fake_ctc(int_lengths_mean), int_lengths_mean)
    for n in _ctc_nodes(g2).values():
        assert ops.known(n.op) and ops.dim_links(ops.ctx(n, g2.tensor)) is None


MODEL_FILE = '''
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import torch.nn.functional as F
import transformers
from torch import nn

T, B, C, S, D = 16, 4, 8, 6, 12
TARGET_LENGTHS = [6, 3, 6, 5]


class Acoustic(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, 24)
        self.head = nn.Linear(24, C)

    def forward(self, x):
        return self.head(torch.tanh(self.proj(x)))


class Workload:
    def __init__(self, module, inputs, loss_fn):
        self.module, self.inputs, self.loss_fn = module.train(), inputs, loss_fn


def padded_labels(batch, width, classes, lengths):
    y = torch.randint(1, classes, (batch, width))
    for b, n in enumerate(lengths):
        y[b, n:] = -100  # as transformers' collators pad labels
    return y


def ctc_sum(model, x, y):
    log_probs = model(x).log_softmax(-1).transpose(0, 1)
    lengths = torch.full((y.shape[0],), log_probs.shape[0], dtype=torch.long)
    return F.ctc_loss(log_probs, y.clamp_min(0), lengths, (y >= 0).sum(-1), reduction="sum")


def ctc_ints(model, x, y):
    log_probs = model(x).log_softmax(-1).transpose(0, 1)
    return F.ctc_loss(log_probs, y.clamp_min(0), [T] * B, TARGET_LENGTHS)


def acoustic_sum():
    return Workload(Acoustic(), (torch.randn(B, T, D), padded_labels(B, S, C, TARGET_LENGTHS)), ctc_sum)


def acoustic_ints():
    return Workload(Acoustic(), (torch.randn(B, T, D), padded_labels(B, S, C, TARGET_LENGTHS)), ctc_ints)


def ctc_from_logits(model, input_values, labels):
    """transformers' CTC loss written for padded labels: the targets stay [batch, longest]."""
    log_probs = model(input_values).logits.log_softmax(-1).transpose(0, 1)
    lengths = torch.full((labels.shape[0],), log_probs.shape[0], dtype=torch.long)
    return F.ctc_loss(log_probs, labels.clamp_min(0), lengths, (labels >= 0).sum(-1), reduction="sum")


def wav2vec2(**overrides):
    config = transformers.Wav2Vec2Config(
        vocab_size=12, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2, **{"mask_time_prob": 0.0, **overrides})
    labels = padded_labels(2, 6, 12, [6, 4])
    return Workload(transformers.Wav2Vec2ForCTC(config), (torch.randn(2, 400), labels), ctc_from_logits)


def wav2vec2_layerdrop():  # layerdrop at its default (0.1), dropouts at theirs
    return wav2vec2()


def wav2vec2_no_layerdrop():
    return wav2vec2(layerdrop=0.0)


def wav2vec2_specaugment():  # mask_time_prob at its default (0.05)
    return wav2vec2(layerdrop=0.0, mask_time_prob=0.05)


def mamba_scan():
    """transformers' Mamba on its pure-PyTorch path: the selective scan is a Python loop over tokens."""
    config = transformers.MambaConfig(vocab_size=64, hidden_size=32, state_size=8, num_hidden_layers=2,
                                      expand=2, conv_kernel=4, time_step_rank=4)
    return Workload(transformers.MambaForCausalLM(config), (torch.randint(0, 64, (2, 16)),),
                    lambda m, ids: m(ids, labels=ids, use_cache=False).loss)
'''


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "speech.py"
    path.write_text(textwrap.dedent(MODEL_FILE))
    return path


def test_magis_import_and_verify_a_ctc_model(model_file, tmp_path, capsys):
    """``magis import`` then ``magis verify --graph`` of the imported file, on the command line."""
    for factory in ("acoustic_ints", "acoustic_sum"):
        out = tmp_path / f"{factory}.json.gz"
        assert main(["import", f"{model_file}:{factory}", "-o", str(out)]) == 0
        capsys.readouterr()
        assert main(["verify", f"{model_file}:{factory}", "--graph", str(out), "--json"]) == 0
        res = json.loads(capsys.readouterr().out)
        assert res["ok"] and res["peak_ratio"] == 1.0 and res["max_abs_error"] == 0.0
        assert res["compared"] == 5  # the loss and the 4 gradients


def test_micro_batching_splits_through_the_ctc_loss(model_file):
    """The tensor-length CTC loss splits along the batch: gradient accumulation over 2 and 4 parts
    (F-Trans of the whole step) computes eager PyTorch's loss and gradients (float64)."""
    from core.search.peers.microbatch import batch_split
    from core.transform.fission import Fission
    from tests.workload_cases import Case

    case = Case(f"{model_file}:acoustic_sum", torch.float64)
    split, why = batch_split(case.g)
    assert split is not None, why
    assert any("_ctc_loss" in case.g.nodes[v].op for v in split.nodes)
    for k in (2, 4):
        h = case.g.copy()
        Fission().apply(h, Fission.application(k, split.comp, split.nodes))
        res = case.verify(h, f"micro-batching k={k}")
        assert res["fission_nodes"] == 1 and res["max_rel_error"] < 1e-12


# ---- random draws read in Python: layer drop -----------------------------------------------------
def test_layerdrop_is_named_in_one_line(model_file):
    with pytest.raises(ImportErrorMAGIS) as err:
        capture_spec(f"{model_file}:wav2vec2_layerdrop")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("could not capture the model: the model branches on a random draw")
    assert "transformers/models/wav2vec2/modeling_wav2vec2.py:" in msg and "skip_the_layer" in msg
    assert "the config's `layerdrop` (Wav2Vec2Config.layerdrop = 0.1) to 0" in msg
    assert "--fix-random-reads" in msg and f"{model_file}:" in msg  # the user's line that called it


def test_layerdrop_fixed_imports_and_verifies_as_the_step_without_layer_drop(model_file, tmp_path, capsys):
    """``--fix-random-reads``: the graph is the step in which no layer is dropped -- every encoder
    layer is in it, no random draw is -- its metadata says which draw was fixed and why; ``magis
    verify`` of the graph file reproduces eager PyTorch (dropouts at 0.1 included: the fixed draw
    draws no random number in either), and its loss is the loss of the same model with layerdrop 0."""
    spec = f"{model_file}:wav2vec2_layerdrop"
    out = tmp_path / "w2v.json.gz"
    assert main(["import", spec, "--fix-random-reads", "-o", str(out)]) == 0
    g = io.load(out)
    fixed = g.meta["fixed_random_reads"]
    assert fixed["value"] == 1.0 and "no layer dropped" in fixed["effect"]
    (draw,) = fixed["draws"]
    assert draw["code"] == "dropout_probability = torch.rand([])"
    assert draw["site"].startswith("transformers/models/wav2vec2/modeling_wav2vec2.py:")
    assert (draw["field"], draw["field_value"], draw["owner"]) == ("config.layerdrop", 0.1, "Wav2Vec2Config")
    assert not any("rand" in n.op for n in g.ops())
    layers = {n.module.split(".")[3] for n in g.ops() if n.module.startswith("wav2vec2.encoder.layers.")}
    assert layers == {"0", "1"}
    assert _ctc_nodes(g)["aten._ctc_loss.Tensor"].outputs[1].shape[2] == 2 * 6 + 1
    capsys.readouterr()
    assert main(["verify", spec, "--graph", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] and res["peak_ratio"] == 1.0 and res["compared"] > 40
    w = build_workload(f"{model_file}:wav2vec2_no_layerdrop", 0)  # same seed: same weights and inputs
    torch.manual_seed(0)
    assert res["loss"] == float(w.loss_fn(w.module, *w.inputs).detach())
    assert main(["verify", spec, "--fix-random-reads", "--json"]) == 0  # a fresh capture, fixed alike
    again = json.loads(capsys.readouterr().out)
    assert again["ok"] and again["loss"] == res["loss"] and again["ops"] == res["ops"]


def test_specaugment_backward_names_the_forward_line(model_file):
    """SpecAugment's ``hidden_states[mask] = v`` traces; its backward's ``nonzero`` does not, in the
    autograd engine where the traceback holds no line of the model: the line names the forward call,
    the user's line that led there, and the config field that turns it off."""
    with pytest.raises(ImportErrorMAGIS) as err:
        capture_spec(f"{model_file}:wav2vec2_specaugment")
    msg = str(err.value)
    assert "\n" not in msg and "inside torch" not in msg
    assert "aten.nonzero.default returns a shape that depends on tensor values, in the backward of " \
           "transformers/models/wav2vec2/modeling_wav2vec2.py:" in msg
    assert "in _mask_hidden_states: `hidden_states[mask_time_indices] = " in msg and f"{model_file}:" in msg
    assert "set the config's `mask_time_prob` (Wav2Vec2Config.mask_time_prob = 0.05) to 0" in msg


class StochasticDepth(nn.Module):
    """A residual block skipped with probability ``drop_prob`` while training, decided in Python."""

    def __init__(self, drop_prob: float = 0.2) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.drop_prob = drop_prob
        self.noise = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.noise(x) * torch.rand([])  # a scalar draw used as a tensor: never read, never fixed
        if self.training and torch.rand(1).item() < self.drop_prob:
            return x
        return x + self.body(x)


def _depth_loss(m, x):
    return m(x).square().mean()


def test_a_modules_own_stochastic_depth(tmp_path):
    """Without the option the line names the module's ``drop_prob``; with it, only the draw that is
    read is fixed (the one used as a tensor stays a random op of the graph), the graph keeps the
    block, and the eager step with the same draw fixed is reproduced."""
    torch.manual_seed(0)
    m, x = StochasticDepth(), torch.randn(4, 8)
    with pytest.raises(ImportErrorMAGIS) as err:
        capture(m, (x,), _depth_loss)
    assert "the module's `drop_prob` (StochasticDepth.drop_prob = 0.2) to 0" in str(err.value)
    g = capture(m, (x,), _depth_loss, fix_random_reads=True)
    (draw,) = g.meta["fixed_random_reads"]["draws"]
    assert draw["code"] == "if self.training and torch.rand(1).item() < self.drop_prob:"
    assert draw["field"] == "self.drop_prob" and draw["site"].rpartition(":")[0].endswith("test_capture_idioms.py")
    assert [n.op for n in g.ops() if "rand" in n.op] == ["aten.rand.default"]
    assert "grad:body.weight" in g.outputs  # the block ran: no layer dropped
    res = verify_module(m, (x,), _depth_loss, graph=g)
    assert not problems(res), problems(res)


# ---- a recurrent scan unrolled over every token ---------------------------------------------------
def test_an_unrolled_scan_past_the_node_bound_is_refused_while_tracing(model_file, tmp_path, capsys):
    """Mamba's scan makes ops per token and layer.  The capture says, when the traced forward ends,
    how many nodes the step will have -- within 10% of the count a full capture makes -- and refuses
    a step past ``max_nodes`` there, before tracing the backward (the larger part of the time), in
    one line that says what to change; ``magis import --max-nodes`` is the same bound."""
    import re

    from core.frontend.torch_import import MAX_NODES, GraphTooLarge

    spec = f"{model_file}:mamba_scan"
    said: list[str] = []
    g = capture_spec(spec, progress=said.append)
    assert MAX_NODES >= 100_000 > len(g)
    (estimate_line,) = [m for m in said if "will have about" in m]
    estimate = int(re.search(r"about ([\d,]+)", estimate_line).group(1).replace(",", ""))
    assert 1.0 <= estimate / g.meta["fx_nodes"] <= 1.1
    said.clear()
    with pytest.raises(GraphTooLarge) as err:
        capture_spec(spec, progress=said.append, max_nodes=1000)
    msg = str(err.value)
    assert "\n" not in msg and f"unrolls into about {estimate:,} nodes" in msg and "past the bound of 1,000" in msg
    assert "fewer tokens or layers" in msg and "--max-nodes" in msg
    assert not any(m.startswith("converting") for m in said)  # refused while tracing
    out = tmp_path / "mamba.json.gz"
    assert main(["import", spec, "-o", str(out), "--max-nodes", "1000"]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert err_lines[-1] == f"magis: error: {msg}" and not out.exists()

"""Models users bring: ``transformers`` decoder and encoder families built from their config
classes (random weights, nothing downloaded), called the way training code calls them -- token ids
or pixel values only, with or without an attention mask and labels, tied and untied embeddings,
grouped-query attention -- import on fake tensors, export, and the exported script reproduces eager
PyTorch's loss and every gradient with its measured peak equal to the simulated one.

Each case is imported as ``magis import`` does it (built under ``FakeTensorMode``, captured, the
graph file written and read back), then that graph is verified against a real build of the same
model (same seed: same weights and inputs).  A model whose Python code branches on a tensor's
value fails with one line naming the file and line.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

from core.codegen import export_script  # noqa: E402
from core.codegen.verify import problems, resolve_schedule, verify_module  # noqa: E402
from core.frontend.torch_import import ImportErrorMAGIS, capture  # noqa: E402
from core.frontend.workload import build_fake, capture_workload  # noqa: E402
from core.ir import io  # noqa: E402
from core.ir.graph import TensorKind  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hf_causal_lm.py"
BATCH, SEQ, VOCAB = 2, 8, 64


class Workload:
    """module + example inputs + loss (and forward) functions: what a user's factory returns."""

    def __init__(self, module, inputs, loss_fn, forward_fn=None):
        self.module, self.inputs, self.loss_fn = module.train(), inputs, loss_fn
        if forward_fn is not None:
            self.forward_fn = forward_fn


def _ids():
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def _padding_mask():
    """Right padding: the second sequence has 3 padding positions (values the capture never sees)."""
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, -3:] = 0
    return mask


def _labels_loss(model, input_ids):
    return model(input_ids=input_ids, labels=input_ids).loss


def _masked_labels_loss(model, input_ids, attention_mask):
    return model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids).loss


def _next_token_loss(model, input_ids):
    logits = model(input_ids=input_ids).logits
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1))


def _logits(model, input_ids):
    return model(input_ids=input_ids).logits


def _logits_no_cache(model, input_ids):
    return model(input_ids=input_ids, use_cache=False).logits


def _small(**kw):
    return {"vocab_size": VOCAB, "max_position_embeddings": 32, **kw}


def gpt2_tied():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                  bos_token_id=0, eos_token_id=0)
    return Workload(transformers.GPT2LMHeadModel(cfg), (_ids(),), _labels_loss)


def gpt2_untied_masked():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                  bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    return Workload(transformers.GPT2LMHeadModel(cfg), (_ids(), _padding_mask()), _masked_labels_loss)


def llama_gqa():
    cfg = transformers.LlamaConfig(**_small(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2))
    return Workload(transformers.LlamaForCausalLM(cfg), (_ids(),), _next_token_loss, _logits)


def llama_gqa_masked():
    cfg = transformers.LlamaConfig(**_small(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2))
    return Workload(transformers.LlamaForCausalLM(cfg), (_ids(), _padding_mask()), _masked_labels_loss)


def mistral_sliding_window():
    cfg = transformers.MistralConfig(**_small(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                              num_attention_heads=4, num_key_value_heads=1,
                                              sliding_window=4))
    return Workload(transformers.MistralForCausalLM(cfg), (_ids(),), _labels_loss)


def qwen2_gqa_eager_attention():
    cfg = transformers.Qwen2Config(**_small(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2,
                                            attn_implementation="eager"))
    return Workload(transformers.Qwen2ForCausalLM(cfg), (_ids(),), _labels_loss, _logits_no_cache)


def bert_mlm():
    cfg = transformers.BertConfig(**_small(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2))
    return Workload(transformers.BertForMaskedLM(cfg), (_ids(),), _labels_loss)


def bert_classifier_masked():
    cfg = transformers.BertConfig(**_small(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, num_labels=3))

    def loss(model, input_ids, attention_mask, labels):
        return model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    return Workload(transformers.BertForSequenceClassification(cfg),
                    (_ids(), _padding_mask(), torch.randint(0, 3, (BATCH,))), loss)


def vit_classifier():
    cfg = transformers.ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, image_size=16, patch_size=4, num_labels=5)

    def loss(model, pixel_values):
        return model(pixel_values=pixel_values).logits.logsumexp(-1).mean()

    return Workload(transformers.ViTForImageClassification(cfg), (torch.randn(BATCH, 3, 16, 16),), loss)


def _import(factory, training=True):
    """What ``magis import`` does: build on fake tensors and capture (cached: tests that inspect
    the same model share one capture; nothing mutates a captured graph)."""
    return _import_once(factory, training)


@functools.cache
def _import_once(factory, training):
    torch.manual_seed(0)
    w = build_fake(factory)
    return capture_workload(w, training=training, name=factory.__name__)


def _round_trip(tmp_path, factory, training=True, schedule="traced"):
    g = _import(factory, training=training)
    path = tmp_path / f"{factory.__name__}.json.gz"
    io.save(g, path)
    g = io.load(path)
    order = resolve_schedule(g, schedule)
    script = export_script(g, order, tmp_path / f"{factory.__name__}.py", schedule_name=schedule)
    assert script.stat().st_size > 0
    torch.manual_seed(0)
    w = factory()  # the same model for real: same seed, same weights and inputs
    res = verify_module(w.module, w.inputs, w.loss_fn, forward_fn=getattr(w, "forward_fn", None),
                        training=training, graph=g, order=order, schedule=schedule)
    assert not problems(res), problems(res)
    assert res["peak_ratio"] == 1.0
    return g, w, res


def _check_training(g, w, res):
    grads = {k for k in g.outputs if k.startswith("grad:")}
    assert grads == {f"grad:{n}" for n, p in w.module.named_parameters() if p.requires_grad}
    assert res["compared"] == len(grads) + 1 and res["loss_abs_error"] <= 1e-5


CASES = [gpt2_tied, gpt2_untied_masked, llama_gqa_masked, mistral_sliding_window, bert_mlm,
         vit_classifier]


@pytest.mark.parametrize("factory", CASES, ids=lambda f: f.__name__)
def test_import_export_verify(tmp_path, factory):
    g, w, res = _round_trip(tmp_path, factory)
    _check_training(g, w, res)


def test_tied_and_untied_embeddings_and_gqa_shapes():
    tied, untied, gqa = _import(gpt2_tied), _import(gpt2_untied_masked), _import(llama_gqa)
    params = {g.name: {n.target.split(":", 1)[1]: n.out.shape for n in g.placeholders()
                       if n.target.startswith("param:")} for g in (tied, untied, gqa)}
    assert "lm_head.weight" not in params["gpt2_tied"]  # one weight, its gradient summed over both uses
    assert params["gpt2_untied_masked"]["lm_head.weight"] == (VOCAB, 32)
    layer = "model.layers.0.self_attn."
    assert params["llama_gqa"][layer + "q_proj.weight"] == (32, 32)  # 4 heads of 8
    assert params["llama_gqa"][layer + "k_proj.weight"] == (16, 32)  # 2 key/value heads of 8
    assert params["llama_gqa"][layer + "v_proj.weight"] == (16, 32)


@pytest.mark.slow
@pytest.mark.parametrize("factory", [bert_classifier_masked], ids=lambda f: f.__name__)
def test_import_export_verify_more(tmp_path, factory):
    g, w, res = _round_trip(tmp_path, factory, schedule="rpo")
    _check_training(g, w, res)


@pytest.mark.parametrize("factory", [qwen2_gqa_eager_attention], ids=lambda f: f.__name__)
def test_forward_graph_round_trip(tmp_path, factory):
    """Eager attention, no mask and no KV cache: transformers looks for packed sequences in the
    position ids (a value check), so the capture takes the export path; the graph gives the logits."""
    g, w, res = _round_trip(tmp_path, factory, training=False)
    assert g.meta.get("traced_as") == "export" and g.meta["mode"] == "forward"
    assert list(g.outputs) == ["output_0"] and g.tensor(g.outputs["output_0"]).shape == (BATCH, SEQ, VOCAB)
    assert res["compared"] == 1 and res["max_abs_error"] <= 1e-5


def test_a_padding_mask_is_read_by_the_graph_not_by_the_capture():
    """The attention mask's values decide eager transformers' path (no padding: SDPA's causal
    flag); the capture cannot read them, so it takes the path valid for any mask, and the graph
    computes the mask from the input."""
    g = _import(llama_gqa_masked)
    assert g.meta.get("traced_as") == "export"
    mask = next(n for n in g.placeholders() if n.target == "input:1")
    assert mask.out.kind == TensorKind.INPUT and g.users(mask.id)
    assert "traced_as" not in _import(llama_gqa).meta  # no mask: traced exactly as eager runs it


# ---- the example in the README --------------------------------------------------------------------
@pytest.mark.slow
def test_readme_example_imports_exports_and_verifies(tmp_path, capsys):
    import json

    from app.cli import main

    spec = f"{EXAMPLE}:build"
    out = tmp_path / "llama.json.gz"
    assert main(["import", spec, "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "tracing forward, loss and backward" in captured.err and "baseline peak" in captured.out
    script = tmp_path / "llama_step.py"
    assert main(["export", str(out), "-o", str(script), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ops"] > 100 and script.exists()
    assert main(["verify", spec, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] and res["peak_ratio"] == 1.0 and res["compared"] == 1 + len(
        [k for k in io.load(out).outputs if k.startswith("grad:")])


# ---- a model that cannot be captured ----------------------------------------------------------------
BRANCHY = '''\
import torch
from torch import nn


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = self.proj(x)
        if h.mean() > 0:  # a Python branch on a tensor's value
            h = h * 2
        return h


class Workload:
    def __init__(self):
        self.module = Gated()
        self.inputs = (torch.randn(4, 8),)

    @staticmethod
    def loss_fn(model, x):
        return model(x).square().mean()


def build():
    return Workload()
'''


def test_data_dependent_branch_names_file_and_line(tmp_path, capsys):
    from app.cli import main

    path = tmp_path / "branchy.py"
    path.write_text(BRANCHY)
    out = tmp_path / "g.json.gz"
    assert main(["import", f"{path}:build", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert not out.exists() and not any("Traceback" in line for line in err)
    assert err[-1].startswith("magis: error: could not capture the model: ")
    assert f"{path}:12 in forward" in err[-1] and "if h.mean() > 0" in err[-1]
    assert "reads a tensor's value" in err[-1] and "hint:" in err[-1]
    assert all(line.startswith("[") for line in err[:-1])  # the rest are progress lines


def test_value_dependent_shape_names_the_op_and_line():
    class Pick(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(x[x > 0].view(-1, 4))  # boolean-mask indexing: size depends on values

    def build():
        return Workload(Pick(), (torch.randn(4, 4),), lambda m, x: m(x).sum())

    with pytest.raises(ImportErrorMAGIS) as err:
        _import(build)
    msg = str(err.value)
    assert "\n" not in msg and "depends on tensor values" in msg
    assert f"{Path(__file__).name}:" in msg and "x[x > 0]" in msg


# ---- parameters the loss never reads --------------------------------------------------------------
class _Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 4)
        self.bias = self.proj.bias  # a second name of the same parameter, listed first (as BERT's MLM head)


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.head = _Head()
        self.spare = nn.Linear(8, 3)  # never called by the loss

    def forward(self, x):
        return self.head.proj(torch.relu(self.body(x)))


def test_parameters_the_loss_never_reads_get_no_gradient():
    torch.manual_seed(0)
    model, x = _TwoHeads(), torch.randn(4, 8)
    g = capture(model, (x,), lambda m, x: m(x).square().mean(), name="two_heads")
    res = verify_module(model, (x,), lambda m, x: m(x).square().mean(), graph=g)
    assert not problems(res), problems(res)
    assert {k for k in g.outputs if k.startswith("grad:")} == {
        "grad:body.weight", "grad:body.bias", "grad:head.proj.weight", "grad:head.bias"}
    assert {n.target for n in g.placeholders() if n.target.startswith("param:")} == {
        "param:body.weight", "param:body.bias", "param:head.proj.weight", "param:head.bias"}

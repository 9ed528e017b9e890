"""F-Trans of a loss whose target the step computes itself (``sample_graphs.losses``): labels shifted
for next-token prediction, padded or masked with -100, masked-LM labels, per-pixel targets with an
ignored class.  The ops that compute the target run once more at full size before the parts and
give the total weight of the whole batch (``fission._total_weight``), so every F-Tree candidate that
contains the loss, and micro-batching (the whole step split along the batch), compute the same loss
and gradients as eager PyTorch (float64, rtol 1e-4).  A target computed from floating-point values
is refused by ``plan_split`` before the graph is touched."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from app.cli import EXIT_INTERNAL, main
from core.analysis.dgraph import SplitError
from core.analysis.ftree import build_ftree
from core.search.peers.microbatch import batch_split, split_application
from core.transform.fission import Fission
from core.transform.registry import get_rule
from tests.workload_cases import Case

LOSSES = Path(__file__).resolve().parent.parent / "sample_graphs" / "losses.py"
SPLITS_THE_BATCH = ["shifted_labels", "hf_causal", "pad_masked", "masked_lm", "segmentation", "sum_reduction", "ctc"]


def _loss_ops(g) -> set[int]:
    return {n.id for n in g.ops() if n.op.startswith(("aten.nll_loss", "aten._ctc_loss"))}


def _check(name: str) -> tuple[int, str]:
    """Every F-Tree candidate holding the loss, and the micro-batching split, verified against eager."""
    case = Case(f"{LOSSES}:{name}", torch.float64)
    g = case.g
    verified = 0
    for f in build_ftree(g).nodes:
        if not _loss_ops(g) & set(f.split.nodes):
            continue
        h = g.copy()
        n = f.split.divisors()[0]
        log = Fission().apply(h, Fission.application(n, f.split.comp, f.split.nodes))
        res = case.verify(h, f"{name}: F-Tree node {f.id} n={n}")
        assert res["fission_nodes"] == 1
        Fission().inverse(h, log)
        assert h.same_as(g)
        verified += 1
    split, why = batch_split(g, microbatching=True)
    if split is not None:
        for k in (2, 4):
            h = g.copy()
            app = split_application(split, k)
            get_rule(app.rule).apply(h, app)
            case.verify(h, f"{name}: micro-batching k={k}")
    return verified, why


def test_transformers_causal_lm_loss_splits():
    """Labels padded with -100 and shifted inside the step, as ``transformers`` computes its loss: the
    loss's F-Tree candidate and micro-batching both verify; the padded positions are not counted."""
    verified, why = _check("hf_causal")
    assert verified >= 1
    assert why == ""


@pytest.mark.parametrize("name", [n for n in SPLITS_THE_BATCH if n != "hf_causal"])
def test_loss_patterns_split(name: str):
    verified, why = _check(name)
    assert verified >= 1
    assert why == "", why


def test_label_smoothing_splits_its_loss_but_not_the_batch():
    """The loss's own F-Tree candidates verify; micro-batching is refused with its reason, naming the
    op through which the smoothing term's mean over the counted targets leaves the batch and comes
    back -- a refusal, never an exception."""
    verified, why = _check("label_smoothing")
    assert verified >= 1
    assert why.startswith("the batch does not split: the sub-graph is not convex: a path leaves it through")


def test_target_from_activations_is_refused_before_any_edit():
    """A target computed from floating-point values (pseudo-labels: the argmax of the logits) would
    mean running the forward again at full size: ``plan_split`` refuses every split holding the loss
    with that reason (the F-Tree offers none; micro-batching says why), before the graph is touched."""
    g = Case(f"{LOSSES}:pseudo_labels").g
    assert not any(_loss_ops(g) & set(f.split.nodes) for f in build_ftree(g).nodes)
    split, why = batch_split(g, microbatching=True)
    assert split is None and "floating-point values" in why


def test_optimizer_failure_is_not_reported_as_bad_input(tmp_path, monkeypatch, capsys):
    """A failure inside the search on an accepted graph exits 70 ("internal error"), not 2."""
    import core.search.moptimizer as mo

    def broken(*_a, **_k):
        raise SplitError("a refusal that escaped the search")

    monkeypatch.setattr(mo, "optimize", broken)
    status = main(["optimize", "bert_tiny", "--pareto", "--time-budget", "1", "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert status == EXIT_INTERNAL
    assert "internal error" in err and "a refusal that escaped the search" in err
    assert not (tmp_path / "p.json").exists()


def test_a_split_that_rebuilt_the_seed_of_a_divided_loss_links_its_dims():
    """``loss = sum / n``: the backward's seed ``ones_like(loss)`` reads no op of S, yet micro-batching's
    split rebuilds it input-free (it cuts the path back into S; MAGIS's exact F-Trans does not).  The fission node's dim links (nested
    fission, the D-Graph of the transformed graph) come from S alone, not from that reader."""
    from core.analysis.dgraph import DGraph, fission_links

    g = Case(f"{LOSSES}:sum_reduction").g
    split, why = batch_split(g, microbatching=True)
    assert why == ""
    seeds = [u for u in split.decouple if g.nodes[u].op == "aten.ones_like.default"]
    assert seeds and all(r.node not in split.nodes for u in seeds for r in g.nodes[u].inputs())
    h = g.copy()
    app = split_application(split, 2)
    get_rule(app.rule).apply(h, app)
    f = next(n for n in h.nodes.values() if n.op == "fission")
    links = fission_links(h, f)
    assert any(lk.in_dim == 0 for lk in links)  # the batch of the ids links to the parts' outputs
    DGraph(h)  # the whole transformed graph's D-Graph

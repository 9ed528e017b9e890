"""The resident floor (``core.analysis.lifetimes.resident_floor``): what no plan without swaps goes
below -- checked by hand on a tiny training graph, as a lower bound on every swap-free point of the
samples' precomputed frontiers, and as `magis info`, `magis optimize` and the plan bar show it."""

from __future__ import annotations

import pytest

from core.analysis.lifetimes import memory_profile, resident_floor
from core.ir import io
from core.ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef
from core.schedule import get_scheduler
from core.search.plan import load_plans
from core.summary import floor_line, floor_note
from core.transform.registry import get_rule
from sample_graphs.frontiers import plan_path
from sample_graphs.store import graph_path


def _node(g: Graph, name: str, op: str, args: list, shape, kind=TensorKind.ACTIVATION, alias=None,
          output: bool = False) -> TRef:
    n = g.add_node(name=name, op=op, args=args, outputs=[TensorMeta(shape, "float32", kind, alias)])
    if output:
        g.outputs[name] = TRef(n.id, 0)
    return TRef(n.id, 0)


def train_step() -> Graph:
    """loss = sum(relu(x @ w)), with the gradient of w and a transposed view of w as graph outputs.

    Bytes (float32): x [8, 4] 128 B (input), w [4, 16] 256 B (weight), h and r [8, 16] 512 B each
    (activations), loss 4 B (output), dr [8, 16] 512 B and dh 512 B (activations), grad_w [4, 16]
    256 B (gradient), w_t a view of w (no bytes of its own)."""
    g = Graph("hand_step", {"mode": "train"})
    x = TRef(g.add_node(name="x", op="placeholder", kind=NodeKind.PLACEHOLDER, target="input:0",
                        outputs=[TensorMeta((8, 4), "float32", TensorKind.INPUT)]).id, 0)
    w = TRef(g.add_node(name="w", op="placeholder", kind=NodeKind.PLACEHOLDER, target="param:w",
                        outputs=[TensorMeta((4, 16), "float32", TensorKind.WEIGHT)]).id, 0)
    h = _node(g, "h", "aten.mm.default", [x, w], (8, 16))
    r = _node(g, "r", "aten.relu.default", [h], (8, 16))
    _node(g, "loss", "aten.sum.default", [r], (), TensorKind.OUTPUT, output=True)
    dr = _node(g, "dr", "aten.ones_like.default", [r], (8, 16))
    dh = _node(g, "dh", "aten.threshold_backward.default", [dr, r, 0.0], (8, 16))
    xt = _node(g, "xt", "aten.t.default", [x], (4, 8), TensorKind.INPUT, alias=x)
    _node(g, "grad_w", "aten.mm.default", [xt, dh], (4, 16), TensorKind.GRADIENT, output=True)
    _node(g, "w_t", "aten.t.default", [w], (16, 4), TensorKind.WEIGHT, alias=w, output=True)
    g.validate()
    return g


def test_hand_case_weights_gradients_inputs_and_outputs_once():
    g = train_step()
    floor, by_kind = resident_floor(g)
    # the view w_t is w's storage: counted once, as the weight it is
    assert by_kind == {"weight": 256, "gradient": 256, "input": 128, "output": 4}
    assert floor == 256 + 256 + 128 + 4
    for method in ("traced", "rpo"):
        prof = memory_profile(g, get_scheduler(method).run(g).order)
        assert prof.peak >= floor
        assert int(prof.step_bytes[-1]) >= floor  # every floor storage is alive at the last step


def _swaps(plan) -> bool:
    return any(get_rule(a.rule).family == "swap" for a in plan.applications)


@pytest.mark.parametrize("name", ["bert_tiny", "unet_tiny", "resnet50_tiny"])
def test_floor_bounds_every_swap_free_frontier_point(name):
    g = io.load(graph_path(name, "train"))
    pf = load_plans(plan_path(name), g)
    floor, by_kind = resident_floor(g)
    # every weight is in it (plus, for batch norm, the updated running statistics the step returns)
    assert floor > 0 and by_kind.get("weight", 0) + by_kind.get("optimizer_state", 0) >= g.weight_bytes()
    free = [p for p in pf.points if not _swaps(p)]
    assert len(free) >= 5  # eager, the peers and MAGIS's remat/fission points
    for p in free:
        assert p.peak >= floor, (p.method, p.label, p.peak, floor)
    # and at the plan's own last step, replayed, every floor storage is alive
    low = min(free, key=lambda p: p.peak)
    prof = memory_profile(low.graph(g), low.order)
    assert int(prof.step_bytes[-1]) >= floor


def test_info_line_and_json(capsys):
    from app.cli import main

    assert main(["info", "bert_tiny"]) == 0
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if "resident floor" in s).strip()
    assert line.startswith("resident floor: 186.5 KiB (0.70x of the peak): weights 93.5 KiB, gradients 92.5 KiB")
    assert line.endswith("-- no plan without swaps goes below it")
    assert main(["info", "bert_tiny", "--json"]) == 0
    import json

    info = json.loads(capsys.readouterr().out)
    assert info["resident_floor_bytes"] == resident_floor(io.load(graph_path("bert_tiny", "train")))[0]
    assert info["resident_floor_ratio"] == pytest.approx(info["resident_floor_bytes"] / info["baseline_peak_bytes"])


def test_floor_texts():
    by_kind = {"weight": 1 << 20, "gradient": 1 << 20, "input": 64 << 10, "output": 4}
    floor = sum(by_kind.values())
    line = floor_line(floor, by_kind, int(floor / 0.97))
    assert line == ("resident floor: 2.06 MiB (0.97x of the peak): weights 1.00 MiB, gradients 1.00 MiB, "
                    "inputs 64.0 KiB -- no plan without swaps goes below it")
    # optimize's note: only when the best plan is within 5% of the floor
    assert floor_note(int(floor * 1.06), floor, by_kind, 2 * floor) is None
    note = floor_note(int(floor * 1.02), floor, by_kind, int(floor / 0.97))
    assert note.startswith("the peak is 2.10 MiB, the floor 2.06 MiB (0.97x of eager: weights, gradients and "
                           "inputs): no activation plan can go below it")
    assert "offloading" in note


def test_plan_bar_floor_card():
    from app.optimizer_view import floor_card, plan_cards
    from app.plan_store import Frontier

    by_kind = {"weight": 620, "gradient": 300, "input": 80}
    card = str(floor_card(1000, by_kind, 1613, 1400))
    assert "floor 0.62x" in card and "weights, gradients and inputs" in card
    assert "no plan without swaps goes lower" in card
    assert "only offloading them goes lower" in str(floor_card(1000, by_kind, 1613, 1040))

    g = io.load(graph_path("bert_tiny", "train"))
    f = Frontier("sample:bert_tiny", load_plans(plan_path("bert_tiny"), g), "precomputed")
    cards = str(plan_cards(f, 0, None, "rtx3090", resident_floor(g)))
    assert "plan-floor" in cards and "floor 0.70x" in cards and "weights and gradients" in cards
    assert "plan-floor" not in str(plan_cards(f, 0, None, "rtx3090"))

"""One truth for every number the app shows: each rule step's peak and latency are the plan card's
for the same state (``plan_store.state_sim``), on every step of three samples' precomputed plans;
the memory slider has a stop per frontier point named by its peak and overhead; the Pareto figure
gives each method its own colour and marker, groups a method's failures with a count, and has log
axes; the swap timeline's curves hold their last bytes after the last op."""

from __future__ import annotations

import re

import pytest

from app.figures import MIN_COLOUR_DISTANCE, _distance, failure_lines, method_styles
from app.optimizer_view import failure_notes, pareto_figure, plan_cards, slider_of, slider_stop, stop_label
from app.plan_store import Frontier, build_steps, build_view, changed_window, sample_plan_path, state_sim
from app.steps_view import step_details, step_rows
from core.fmt import format_bytes
from core.search.plan import check_order, load_plans, replay
from sample_graphs.store import load_sample_graph

SAMPLES = ["bert_tiny", "gpt_neo_tiny", "resnet50_tiny"]


@pytest.fixture(scope="module", params=SAMPLES)
def sample(request):
    g = load_sample_graph(request.param)
    f = Frontier(f"sample:{request.param}", load_plans(sample_plan_path(request.param), g), "test")
    return request.param, g, f


def _card_values(f: Frontier, key: int) -> dict[str, str]:
    """The plan card's shown values by id (plan-peak, plan-latency)."""
    out = {}
    for c in plan_cards(f, key, None, f.device):
        title, value, _sub = c.children
        out[value.id] = value.children
    return out


def test_the_card_shows_the_one_simulation_of_each_point(sample):
    """The card's numbers (the plan file's) are ``state_sim`` of the point's graph and schedule."""
    _name, g, f = sample
    for p in f.points:
        h = replay(g, p.applications)
        check_order(h, p.order)
        sim = state_sim(h, p.order, f.device, p)
        assert sim.peak == p.peak
        assert sim.latency == pytest.approx(p.latency, rel=1e-9)


def test_every_rule_step_shows_what_the_card_shows_for_its_state(sample):
    name, g, f = sample
    key = f.default()
    plan = f.points[key]
    assert len(plan.applications) >= 10, "the default point of the sample has many steps"
    steps = build_steps(g, plan, f.device, f.points[f.baseline()].order, known=f.points)
    assert len(steps) == len(plan.applications)
    base = f.points[f.baseline()]
    assert steps[0].peak[0] == base.peak  # before the first step: the imported graph as eager runs it
    by_apps = {tuple((a.rule, tuple(a.params)) for a in q.applications): (k, q) for k, q in enumerate(f.points)}
    reached = 0
    for k, s in enumerate(steps):
        h = replay(g, plan.applications[:k + 1])
        order = s.order.tolist()
        check_order(h, order)
        sim = state_sim(h, order, f.device, plan if k == len(steps) - 1 else None)
        assert (s.peak[1], s.latency[1]) == (sim.peak, pytest.approx(sim.latency, rel=1e-12)), (name, k)
        assert s.curve[1].max() == sim.peak
        if k:
            assert s.peak[0] == steps[k - 1].peak[1] and s.latency[0] == steps[k - 1].latency[1]
        hit = by_apps.get(tuple((a.rule, tuple(a.params)) for a in plan.applications[:k + 1]))
        if hit is not None:  # this state is a frontier point: the step shows that point's card
            reached += 1
            card = _card_values(f, hit[0])
            assert s.recorded and s.peak[1] == hit[1].peak
            assert f"→ {card['plan-peak']} (" in step_rows(steps)[k]["peak"], (name, k)
            assert f"→ {card['plan-latency']}" in step_rows(steps)[k]["latency"], (name, k)
    assert reached >= 1
    # the last step is the plan: its "after" is the card, in the table and in the details
    card = _card_values(f, key)
    last = steps[-1]
    assert last.peak[1] == plan.peak and last.latency[1] == pytest.approx(plan.latency, rel=1e-12)
    assert format_bytes(last.peak[1]) == card["plan-peak"]
    kv = str(step_details(last, len(steps)))
    assert f"→ {card['plan-peak']}" in kv


def test_changed_window_is_the_span_two_schedules_differ_in():
    assert changed_window([1, 2, 3, 4, 5], [1, 2, 9, 3, 4, 5]) == (2, 1, 1)  # one op inserted at 2
    assert changed_window([1, 2, 3, 4, 5], [1, 3, 2, 4, 5]) == (1, 2, 2)
    assert changed_window([1, 2, 3], [1, 2, 3]) == (3, 2, 0)
    assert changed_window([1, 2, 3, 4], [1, 4]) == (1, 2, 0)


def test_the_slider_has_a_stop_for_every_point_named_by_peak_and_overhead(sample):
    _name, _g, f = sample
    s = slider_of(f)
    assert sorted(s["keys"]) == list(range(len(f.points)))  # every point, once
    peaks = [f.points[k].peak for k in s["keys"]]
    assert peaks == sorted(peaks)
    assert s["max"] == len(f.points) - 1 and len(s["marks"]) == len(f.points)
    assert [slider_stop(f, k) for k in s["keys"]] == list(range(len(f.points)))
    shown = [m["label"] for m in s["marks"].values() if m["label"].strip()]
    assert 2 <= len(shown) <= 9 and shown[0] == s["labels"][0] and shown[-1] == s["labels"][-1]
    for k, label in zip(s["keys"], s["labels"], strict=True):
        assert re.fullmatch(r"\d+\.\d\dx · [+-]\d+(\.\d)?%", label), label
        p, b = f.points[k], f.points[f.baseline()]
        assert label.startswith(f"{p.peak / b.peak:.2f}x")
    assert stop_label(f, f.baseline()) == "1.00x · +0%"


def test_bert_tinys_slider_walks_all_30_points():
    g = load_sample_graph("bert_tiny")
    f = Frontier("sample:bert_tiny", load_plans(sample_plan_path("bert_tiny"), g), "test")
    assert len(f.points) == 30 and len(slider_of(f)["keys"]) == 30


def test_each_method_has_its_own_colour_and_marker():
    st = method_styles(["somebody_elses"])
    cols = list(st.values())
    for i, (a, _) in enumerate(cols):
        for b, _ in cols[i + 1:]:
            assert _distance(a, b) >= MIN_COLOUR_DISTANCE, (a, b)
    assert len({m for _, m in cols}) == len(cols)
    assert st["swapadvisor"][0] != st["torch_mincut"][0]
    from core.search.methods import METHODS

    assert st["magis"] == (METHODS["magis"].colour, METHODS["magis"].symbol)  # read from the registry


def test_pareto_figure_uses_the_styles_and_switches_to_log_axes(sample):
    _name, _g, f = sample
    lin = pareto_figure(f, f.default())
    log = pareto_figure(f, f.default(), scale="log")
    assert lin["layout"]["xaxis"]["type"] == "linear" and log["layout"]["xaxis"]["type"] == "log"
    assert log["layout"]["yaxis"]["type"] == "log" and lin["layout"]["uirevision"] != log["layout"]["uirevision"]
    lo, hi = log["layout"]["xaxis"]["range"]
    assert 10**lo < min(p.peak for p in f.points) and 10**hi > max(p.peak for p in f.points)
    styles = method_styles()
    traces = [t for t in lin["data"] if t.get("customdata")]
    assert sum(len(t["customdata"]) for t in traces) == len(f.points)
    colours = [t["marker"]["color"] for t in traces]
    assert len(set(colours)) == len(colours)
    for t in traces:
        method = f.points[t["customdata"][0]].method
        assert (t["marker"]["color"], t["marker"]["symbol"]) == styles[method]


def test_a_methods_failures_are_grouped_with_a_count():
    text = ("budget 0.95: not run: LP relaxation not solved in time in 1.2 s (the MILP not tried: 121517 variables "
            "> 100000); budget 0.9: not run: LP relaxation not solved in time in 0.7 s (the MILP not tried: 121517 "
            "variables > 100000); budget 0.85: infeasible; budget 0.8: infeasible (budget 0.85 already is); "
            "budget 0.75: infeasible (budget 0.85 already is)")
    lines = failure_lines("Checkmate", text)
    assert lines == ["Checkmate: 2 budgets failed: not run: LP relaxation not solved in time in 1.2 s (the MILP "
                     "not tried: 121517 variables > 100000)", "Checkmate: 3 budgets failed: infeasible"]
    assert failure_lines("Checkmate", "all: not attempted on 2163 nodes (> 800)") == \
        ["Checkmate: not attempted on 2163 nodes (> 800)"]
    g = load_sample_graph("bert_tiny")
    f = Frontier("sample:bert_tiny", load_plans(sample_plan_path("bert_tiny"), g), "test")
    notes = failure_notes(f)
    cm = [n for n in notes if n.startswith("Checkmate")]
    assert cm == [cm[0]] and re.match(r"Checkmate: \d+ budgets failed: ", cm[0]), notes


def test_the_swap_timeline_holds_its_last_bytes_after_the_last_op():
    from app.swaps_view import swap_timeline_figure

    g = load_sample_graph("bert_tiny")
    f = Frontier("sample:bert_tiny", load_plans(sample_plan_path("bert_tiny"), g), "test")
    k = next(k for k, p in enumerate(f.points) if any(a.rule.startswith("swap") for a in p.applications))
    v = build_view(g, f.points[k], k, f.device)
    b = build_view(g, f.points[f.baseline()], f.baseline(), f.device)
    curves = [t for t in swap_timeline_figure(v, b)["data"] if t.get("yaxis") == "y2"]
    assert len(curves) == 2
    for t in curves:
        assert t["y"][-1] > 0 and t["y"][-1] == t["y"][-2], t["name"]

"""The app's Fusion tab without a browser: the pure builders (cards, group rows, the colours on the op
graph, the split steps and their highlights) on a hand-made residual block whose tree split is known,
the fusion store's background run on the forward sample mobilenet_v2, and the one-line refusals
(a training graph, a buffer too small under strict, values the controls do not offer)."""

from __future__ import annotations

import time

import pytest

from app.errors import AppError
from app.fusion_view import (
    PALETTE,
    FuseOptions,
    FusionGraph,
    FusionRun,
    FusionStore,
    forward_only_text,
    fusion_cards,
    fusion_elements,
    fusion_marks,
    group_colors,
    group_highlight,
    group_rows,
    group_styles,
    job_line,
    parse_options,
    step_details,
    step_highlight,
    step_rows,
    steps_note,
)
from app.state import AppState, sample_file_exists, sample_names
from core.ir.builder import GraphBuilder
from core.search.fusion import HOW, FusionPlan, FusionProblem
from core.search.fusion.explain import oracle_explainer
from core.search.fusion.fuse import step_json
from core.search.fusion.search import plan_latency
from core.search.fusion.split import Splitter

BETA = 150  # the residual block needs 184 whole; its best cut through the skip leaves two valid parts


def residual_graph():
    """x -> f -> c1 -> r -> c2 -> add(c2, f): a residual block (tests/test_fusion.py's), plus a lone
    op ``big`` whose weight does not fit the buffer alone."""
    b = GraphBuilder("residual")
    x = b.input("x", 4)
    f = b.op("f", [x], 10)
    c1 = b.op("c1", [f, b.weight("w1", 50)], 10)
    r = b.op("r", [c1], 10)
    c2 = b.op("c2", [r, b.weight("w2", 50)], 10)
    add = b.op("add", [c2, f], 10)
    b.op("big", [add, b.weight("wbig", 400)], 10, output=True)
    return b.graph


def hand_plan() -> tuple[FusionGraph, FusionRun, FusionProblem]:
    """The plan Algorithm 1 makes of the block: one split step (oracle explainer) into {f, c1} and
    {r, c2, add}; ``big`` alone and unfused."""
    g = residual_graph()
    p = FusionProblem(g, "lbdf")
    sp = Splitter(p, BETA, oracle_explainer)
    parts, ok = sp.split_once(frozenset(range(5)))
    assert ok and len(sp.last_trace) == 1
    groups = [*parts, frozenset({5})]
    plan = FusionPlan(
        graph=g.name, scheme="lbdf", beta=BETA, search="local", explainer="oracle", plans=10, seed=0,
        groups=[[p.names[v] for v in sorted(x)] for x in groups], group_dram=[p.dram(x) for x in groups],
        group_buffer=[p.buffer(x) for x in groups], dram=p.total_dram(groups),
        trivial_dram=p.total_dram(p.trivial()), latency=plan_latency(p, groups),
        trivial_latency=plan_latency(p, p.trivial()), unfused=["big"],
        splits={"invalid": 1, "rectified": 1, "rectify_rate": 1.0}, cache={}, classifier=None, seconds=0.25,
        split_steps=[step_json(p, s, BETA) for s in sp.last_trace], split_steps_total=1)
    opts = FuseOptions(BETA, "lbdf", "local", "oracle", 200)
    return FusionGraph.of("hand", "a7", g), FusionRun(3, "hand", opts, plan), p


def texts(component) -> str:
    """Every string inside a dash component tree."""
    if isinstance(component, str | int | float):
        return str(component)
    if isinstance(component, list | tuple):
        return " ".join(texts(c) for c in component)
    kids = getattr(component, "children", None)
    return texts(kids) if kids is not None else ""


# ---- the hand-made plan ------------------------------------------------------------------------------
def test_the_split_step_records_group_explanation_cut_and_parts():
    _fg, run, p = hand_plan()
    (st,) = run.plan.split_steps
    assert st["ops"] == ["f", "c1", "r", "c2", "add"] and st["buffer_bytes"] == 184 > BETA
    assert st["how"] == "cut" and st["depth"] == 0 and st["how"] in HOW
    assert ["f", "add"] in st["explained"]  # the skip edge is among the oracle's edges
    # the cut after c1 removes the skip f -> add and the main-path edge c1 -> r
    assert sorted(map(tuple, st["cut"])) == [("c1", "r"), ("f", "add")]
    assert [x["ops"] for x in st["parts"]] == [["f", "c1"], ["r", "c2", "add"]]
    assert all(x["valid"] and x["buffer_bytes"] < BETA for x in st["parts"])


def test_group_colours_rows_and_styles():
    _fg, run, _p = hand_plan()
    plan = run.plan
    assert group_colors(plan) == [PALETTE[0], PALETTE[1], None]
    rows = group_rows(plan)
    assert [(r["id"], r["ops"], r["first"], r["last"], r["kind"]) for r in rows] == [
        (0, 2, "f", "c1", "fused"), (1, 3, "r", "add", "fused"), (2, 1, "big", "big", "too big alone")]
    assert rows[0]["dram_bytes"] == plan.group_dram[0] and rows[0]["dram"].endswith("B")
    assert "of β" in rows[0]["buffer"]
    swatches = [s for s in group_styles(plan) if s["if"].get("column_id") == "colour"]
    assert [s["backgroundColor"] for s in swatches] == [PALETTE[0], PALETTE[1]]


def test_cards_compare_with_the_unfused_plan():
    _fg, run, _p = hand_plan()
    plan = run.plan
    cards = {c.children[1].id: texts(c) for c in fusion_cards(plan)}
    assert set(cards) == {"fusion-dram", "fusion-reduction", "fusion-latency", "fusion-groups", "fusion-peak",
                          "fusion-invalid", "fusion-searched"}
    assert f"-{plan.reduction:.1%}" in cards["fusion-reduction"] and plan.reduction > 0
    assert "3 groups" in cards["fusion-groups"] and "2 fused" in cards["fusion-groups"]
    assert "1 op too big alone" in cards["fusion-groups"]
    assert "1 met" in cards["fusion-invalid"] and "1 rectified by oracle" in cards["fusion-invalid"]
    assert "unfused" in cards["fusion-latency"] and "unfused" in cards["fusion-dram"]


def test_the_op_graph_and_its_colours():
    fg, run, p = hand_plan()
    els = fusion_elements(fg)
    nodes = [e for e in els if "source" not in e["data"]]
    edges = [e for e in els if "source" in e["data"]]
    assert [n["data"]["name"] for n in nodes] == ["f", "c1", "r", "c2", "add", "big"]  # weights not drawn
    assert all(n["data"]["id"] == f"a7-f{n['data']['pos']}" for n in nodes)
    assert sorted((e["data"]["u"], e["data"]["v"]) for e in edges) == sorted(p.edges())
    marks = fusion_marks(fg, run)
    assert marks["tok"] == "a7" and marks["run"] == 3
    assert marks["colors"] == {"0": PALETTE[0], "1": PALETTE[0], "2": PALETTE[1], "3": PALETTE[1],
                               "4": PALETTE[1]}
    assert marks["group_of"] == {"0": 0, "1": 0, "2": 1, "3": 1, "4": 1, "5": 2}
    assert marks["unfused"] == [5]
    assert group_highlight(fg, run, 1)["nodes"] == [2, 3, 4]


def test_a_split_step_on_the_graph_and_in_words():
    fg, run, _p = hand_plan()
    hl = step_highlight(fg, run, 0)
    assert hl["nodes"] == [0, 1, 2, 3, 4] and hl["bad"] == [] and sorted(hl["ok"]) == [0, 1, 2, 3, 4]
    assert sorted(map(tuple, hl["cut"])) == [(0, 4), (1, 2)]
    edge_ids = {e["data"]["id"] for e in fusion_elements(fg) if "source" in e["data"]}
    assert all(f"a7-fe{u}-{v}" in edge_ids for u, v in hl["explained"] + hl["cut"])  # what MARK_FUSION looks up
    text = texts(step_details(run.plan, 0))
    assert "split step 1 of 1" in text and "184 B ≥ β = 150 B: invalid" in text
    assert HOW["cut"] in text and "the oracle explainer: " in text and "f → add" in text
    assert text.count("valid") >= 2 and "2 ops f … c1" in text
    (row,) = step_rows(run.plan)
    assert row == {"id": 0, "step": 1, "depth": 0, "ops": 5, "buffer": "184 B", "how": "one cut, all valid",
                   "parts": "2 valid"}
    assert steps_note(run.plan).startswith("1 tree-split step behind this plan's groups (1 invalid group met")


def test_a_plan_without_split_steps_says_why():
    _fg, run, _p = hand_plan()
    plan = run.plan
    plan.split_steps, plan.split_steps_total = [], 0
    assert steps_note(plan).startswith("no split steps behind this plan") and step_rows(plan) == []


# ---- input and status ---------------------------------------------------------------------------------
def test_options_the_controls_do_not_offer_are_one_line_errors():
    assert parse_options(256, "brr", "nsga2", "gnn", 4000, ["on"]) == FuseOptions(256 * 1024, "brr", "nsga2", "gnn",
                                                                                  4000, True)
    for bad in ((100, "lbdf", "local", "grad", 200), (256, "xyz", "local", "grad", 200),
                (256, "lbdf", "greedy", "grad", 200), (256, "lbdf", "local", "lime", 200),
                (256, "lbdf", "local", "grad", 7)):
        with pytest.raises(AppError) as e:
            parse_options(*bad)
        assert "\n" not in str(e.value)


def test_only_forward_graphs_are_fusion_graphs():
    g = residual_graph()
    assert forward_only_text(g) is None  # a hand graph ("synthetic") and a forward graph fuse
    g.meta["mode"] = "train"
    line = forward_only_text(g)
    assert "training graph" in line and "magis import MODEL --forward" in line and "mobilenet_v2" in line
    assert "\n" not in line


def test_job_lines():
    assert job_line({}) == ""
    assert job_line({"error": "nothing to fuse in x"}) == "fusion failed: nothing to fuse in x"
    assert job_line({"stage": "training the classifier", "seconds": 3}).startswith("fusing ... training")
    run = job_line({"stage": "search", "plans": 120, "budget": 1000, "best": 2**20, "seconds": 2})
    assert "120 of 1,000 plans" in run and "1.00 MiB" in run
    assert job_line({"done": True, "cancelled": True, "plans": 50, "budget": 1000, "seconds": 1}).startswith(
        "cancelled: the best plan so far")


# ---- the store on a forward sample ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def state():
    s = AppState(time_budget=2.0)
    yield s
    s.shutdown()


def wait_job(job, timeout: float = 120.0):
    t0 = time.time()
    while not job.done and time.time() - t0 < timeout:
        time.sleep(0.05)
    assert job.done
    return job


def test_the_app_opens_the_forward_samples(state):
    assert {"efficientnet_b3", "mobilenet_v2", "resnet152"} <= set(sample_names())
    assert sample_file_exists("mobilenet_v2")
    g = state.entry("sample:mobilenet_v2").graph
    assert g.meta["mode"] == "forward" and len(g.ops()) == 100
    labels = {o["value"]: o["label"] for o in state.model_options()}
    assert "forward" in labels["sample:mobilenet_v2"]


def test_the_store_fuses_in_the_background_and_refuses_in_one_line(state):
    store = FusionStore(state.entry)
    with pytest.raises(AppError, match="training graph"):
        store.start("sample:bert_tiny", FuseOptions(256 * 1024, "lbdf", "local", "oracle", 200))
    gid = "sample:mobilenet_v2"
    strict = wait_job(store.start(gid, FuseOptions(128 * 1024, "lbdf", "local", "oracle", 200, strict=True)))
    assert strict.error.startswith("a 128.0 KiB buffer is too small for") and "\n" not in strict.error
    assert store.result(gid) is None
    job = wait_job(store.start(gid, FuseOptions(256 * 1024, "lbdf", "local", "oracle", 200)))
    assert job.error is None and job.progress["plans"] == 200
    run = store.result(gid)
    assert run is job.result and run.plan.plans == 200 and run.plan.dram < run.plan.trivial_dram
    fg = store.graph(gid)
    assert fg.n == 99 and store.graph(gid) is fg  # the 100 ops less the view of the classifier weight
    marks = fusion_marks(fg, run)
    fused_ops = sum(len(x) for x in run.plan.groups if len(x) > 1)
    assert len(marks["colors"]) == fused_ops > 0
    assert run.plan.split_steps and len(run.plan.split_steps) <= 200
    for k in range(min(3, len(run.plan.split_steps))):  # every step's ops and edges are on the graph
        hl = step_highlight(fg, run, k)
        st = run.plan.split_steps[k]
        assert len(hl["nodes"]) == len(st["ops"]) and len(hl["cut"]) == len(st["cut"]) > 0
        assert sorted(hl["ok"] + hl["bad"]) == sorted(hl["nodes"])


def test_a_cancelled_run_keeps_its_best_plan(state, monkeypatch):
    import app.fusion_view as fv

    real = fv.fuse

    def fuse(*args, on_plan, cancel, **kw):  # cancel as the 5th plan comes in: no race with the thread
        def counted(n: int, best: float) -> None:
            on_plan(n, best)
            if n >= 5:
                cancel.set()
        return real(*args, on_plan=counted, cancel=cancel, **kw)

    monkeypatch.setattr(fv, "fuse", fuse)
    store = FusionStore(state.entry)
    gid = "sample:mobilenet_v2"
    job = store.start(gid, FuseOptions(256 * 1024, "lbdf", "random", "none", 4000))
    wait_job(job)
    assert job.error is None and job.result.plan.cancelled and job.result.plan.plans < 4000
    assert job_line(job.status()).startswith("cancelled: the best plan so far")


def ids(component) -> list[str]:
    """Every id in a dash component tree."""
    if isinstance(component, list | tuple):
        return [i for c in component for i in ids(c)]
    own = [component.id] if isinstance(getattr(component, "id", None), str) else []
    kids = getattr(component, "children", None)
    return own + (ids(kids) if kids is not None and not isinstance(kids, str) else [])


def test_the_cards_ids_are_not_the_controls_ids():
    from app.fusion_view import tab

    _fg, run, _p = hand_plan()
    controls = ids(tab())
    assert len(controls) == len(set(controls))
    assert not set(controls) & set(ids(fusion_cards(run.plan)))  # the cards are drawn inside the tab


def test_the_page_has_the_fusion_tab_and_its_callbacks():
    from app.main import create_app

    app = create_app(initial_sample="mobilenet_v2", warm=False)
    try:
        client = app.server.test_client()
        layout = client.get("/_dash-layout")
        assert layout.status_code == 200 and b'"fusion-graph"' in layout.data and b'"Fusion"' in layout.data
        deps = client.get("/_dash-dependencies").get_json()
        inputs = {f"{i['id']}.{i['property']}" for d in deps for i in d["inputs"]}
        outputs = " ".join(d["output"] for d in deps)
        assert {"fusion-run.n_clicks", "fusion-poll.n_intervals", "fusion-step-next.n_clicks",
                "fusion-groups-table.active_cell"} <= inputs
        assert "fusion-marked.data" in outputs and "fusion-hl.data" in outputs
    finally:
        app.magis_state.shutdown()

"""Every method for every graph in the app (``PlanStore.start_compare``): an uploaded graph gets the
peers and baselines, their points are merged into the frontier (so are an optimization run's and an
opened plan file's: nothing found is lost), and a method without a point says why."""

from __future__ import annotations

import time

import pytest

from app.export_view import commands, graph_file_of, verify_block
from app.optimizer_view import compare_line, missing_methods, plan_caption, plan_cards
from app.state import AppState
from core.ir import io
from core.search.methods import PEER_FAMILIES, methods_of
from core.search.pareto import dominates
from core.search.plan import PlanFile, plans_to_bytes
from sample_graphs.store import load_sample_graph


def _wait(job, limit: float = 240.0):
    t0 = time.time()
    while not job.done:
        assert time.time() - t0 < limit, job.status()
        time.sleep(0.2)
    assert job.error is None, job.error


@pytest.fixture()
def uploaded():
    st = AppState()
    g = load_sample_graph("fig2_skip")
    gid = st.add_graph(g, "skip.json.gz (uploaded)", "upload", io.dumps(g))
    return st, gid


def test_an_uploaded_graph_gets_every_peer_or_the_reason(uploaded):
    st, gid = uploaded
    f = st.plans.frontier(gid)
    assert [p.method for p in f.points] == ["eager"]
    assert "press optimize" in plan_caption(f, 0)  # one stop: the plan bar says what to do
    assert all("not run on this graph yet" in why for _, why in missing_methods(f))
    job = st.plans.start_compare(gid, 30.0, "rtx3090")
    _wait(job)
    f = st.plans.frontier(gid)
    have = {p.method for p in f.points}
    assert "torch_mincut" in have, f.plans.meta.get("peer_failures")  # from the graph alone: no model code
    assert f.points[-1].method == "eager" and f.version >= 1
    missing = dict(missing_methods(f))
    for name in methods_of(*PEER_FAMILIES):  # each peer and baseline: a point, or why not
        from core.search.methods import label_of

        assert name in have or (label_of(name) in missing and "not run" not in missing[label_of(name)]), name
    line = compare_line(job.status())
    assert line.startswith("peers finished") and "merged into the frontier" in line


def test_the_peers_run_merges_into_a_samples_frontier():
    st = AppState()
    gid = "sample:bert_tiny"
    before = st.plans.frontier(gid)
    old = list(before.points)
    job = st.plans.start_compare(gid, 3.0, before.device, methods=["sqrt_n"])
    _wait(job)
    after = st.plans.frontier(gid)
    assert "merged with" in after.source
    # every old point stays unless a new point of its method dominates it (MAGIS's are all kept)
    for p in old:
        same = [q for q in after.points if q.method == p.method]
        kept = any(q.peak == p.peak and q.latency == p.latency for q in same)
        assert kept or any(dominates((q.peak, q.latency), (p.peak, p.latency)) for q in same), p.label
    assert min(p.peak for p in after.points) == min(p.peak for p in old)


def test_an_opened_plan_file_is_merged_not_replacing():
    st = AppState()
    gid = "sample:bert_tiny"
    f = st.plans.frontier(gid)

    def front(fr):
        return sorted((fr.points[k].peak, fr.points[k].latency) for k in fr.slider())

    one = PlanFile(f.plans.graph_name, f.plans.graph_hash, f.device, [f.points[f.baseline()]])
    g = st.plans.load_upload(gid, plans_to_bytes(one), "eager.plan.json")
    assert front(g) == front(f)  # the slider's stops are all still there
    assert {p.method for p in g.points} == {p.method for p in f.points}
    assert "uploaded (eager.plan.json), merged with" in g.source
    other = PlanFile(f.plans.graph_name, f.plans.graph_hash, "a100-80gb", [f.points[f.baseline()]])
    h = st.plans.load_upload(gid, plans_to_bytes(other), "a100.plan.json")  # another device: replaced
    assert h.device == "a100-80gb" and len(h.points) == 1


def test_the_device_picked_reaches_the_plan_cards():
    st = AppState()
    f = st.plans.frontier("sample:gpt_neo_1_3b")
    k = f.baseline()
    rtx = str(plan_cards(f, k, None, "rtx3090"))
    a100 = str(plan_cards(f, k, None, "a100-80gb"))
    assert "does not fit on rtx3090" in rtx and "fits on a100-80gb" in a100 and "does not fit" not in a100
    assert "rtx3090 profile (the frontier's: optimize to re-plan for a100-80gb)" in a100


def test_export_commands_name_the_uploaded_file(uploaded):
    st, gid = uploaded
    f = st.plans.frontier(gid)
    label = st.label(gid)
    assert graph_file_of(label) == "skip.json.gz"
    text = commands(gid, f, 0, label)
    assert "GRAPH_FILE" not in text and "magis export skip.json.gz --plan" in text
    assert "--graph skip.json.gz" in verify_block(gid, label)
    assert graph_file_of("my graph (uploaded)") == "GRAPH_FILE"  # a name a shell would split stays a placeholder

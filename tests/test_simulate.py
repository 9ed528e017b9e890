"""Cost model and simulator: roofline numbers by hand, stream overlap of swaps, info on samples."""

from __future__ import annotations

import pytest

from core.cost import DEVICES, AnalyticCost
from core.cost.devices import DeviceProfile
from core.ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef
from core.simulate import simulate

DEV = DeviceProfile(name="toy", memory_bytes=1 << 30, matmul_flops={"float32": 1e12}, vector_flops=1e11,
                    mem_bandwidth=1e11, host_bandwidth=1e10, launch_overhead=1e-6,
                    compute_efficiency=0.5, memory_efficiency=0.5, half_time=2e-6)


def _mm_graph(m: int, k: int, n: int) -> Graph:
    g = Graph("mm")
    a = g.add_node(name="a", op="placeholder", kind=NodeKind.PLACEHOLDER,
                   outputs=[TensorMeta((m, k), "float32", TensorKind.INPUT)], target="input:0")
    b = g.add_node(name="b", op="placeholder", kind=NodeKind.PLACEHOLDER,
                   outputs=[TensorMeta((k, n), "float32", TensorKind.WEIGHT)], target="param:b")
    c = g.add_node(name="c", op="aten.mm.default", args=[TRef(a.id), TRef(b.id)],
                   outputs=[TensorMeta((m, n), "float32")])
    g.outputs["output_0"] = TRef(c.id)
    return g


def test_roofline_by_hand():
    g = _mm_graph(1000, 1000, 1000)
    node = g.by_name("c")
    cost = AnalyticCost(DEV).op_cost(g, node)
    assert cost.flops == 2e9
    assert cost.bytes == 3 * 4e6
    # compute bound: (F + F_half) / (P e) with F_half = P e t_half = 1e6
    t_c = (2e9 + 0.5e12 * 2e-6) / 0.5e12
    t_m = (12e6 + 0.5e11 * 2e-6) / 0.5e11
    assert t_c > t_m
    assert cost.seconds == pytest.approx(1e-6 + t_c)


def test_small_ops_run_below_peak_so_splitting_costs_time():
    """Fission's trade-off: n parts of a matmul take longer than the whole."""
    cm = AnalyticCost("rtx3090")
    whole = _mm_graph(4096, 1024, 1024)
    part = _mm_graph(4096 // 8, 1024, 1024)
    t_whole = cm.node_time(whole, whole.by_name("c"))
    t_parts = 8 * cm.node_time(part, part.by_name("c"))
    assert t_parts > t_whole * 1.05
    # while big ops get close to the best efficiency
    big = _mm_graph(8192, 8192, 8192)
    c = cm.op_cost(big, big.by_name("c"))
    achieved = c.flops / c.seconds / DEVICES["rtx3090"].matmul_peak("float32")
    assert 0.7 < achieved <= DEVICES["rtx3090"].compute_efficiency


def test_swaps_overlap_with_compute():
    """Store/Load run on the copy stream: compute only waits for a load it needs."""
    g = _mm_graph(1000, 1000, 1000)
    c = g.by_name("c")
    st = g.add_node(name="store", op="store", kind=NodeKind.STORE, args=[TRef(c.id)],
                    outputs=[TensorMeta((1000, 1000), "float32", device="host")])
    c2 = g.add_node(name="c2", op="aten.mm.default", args=[TRef(c.id), TRef(g.by_name("b").id)],
                    outputs=[TensorMeta((1000, 1000), "float32")])
    ld = g.add_node(name="load", op="load", kind=NodeKind.LOAD, args=[TRef(st.id)],
                    outputs=[TensorMeta((1000, 1000), "float32")])
    c3 = g.add_node(name="c3", op="aten.add.Tensor", args=[TRef(ld.id), TRef(c2.id)],
                    outputs=[TensorMeta((1000, 1000), "float32")])
    g.outputs = {"output_0": TRef(c3.id)}
    cm = AnalyticCost(DEV)
    r = simulate(g, [c.id, st.id, c2.id, ld.id, c3.id], cm)
    i = {nid: k for k, nid in enumerate(r.order)}
    assert r.stream[i[st.id]] == "copy" and r.stream[i[c2.id]] == "compute"
    # the store starts when c is done and runs while c2 computes
    assert r.start[i[st.id]] == pytest.approx(r.end[i[c.id]])
    assert r.start[i[c2.id]] == pytest.approx(r.end[i[c.id]])
    # the load is issued after c2 (its place in the schedule) and follows the store on the copy
    # stream; c3 waits for both the load and c2
    assert r.start[i[ld.id]] == pytest.approx(max(r.end[i[st.id]], r.end[i[c2.id]]))
    assert r.start[i[c3.id]] == pytest.approx(max(r.end[i[ld.id]], r.end[i[c2.id]]))
    t_copy = cm.transfer_time(4e6)
    assert r.end[i[st.id]] - r.start[i[st.id]] == pytest.approx(t_copy)
    # memory: the stored tensor's host copy takes no device memory
    assert all(s.root.node != st.id for s in r.memory.storages)


def test_on_a_device_without_a_copy_engine_a_copy_holds_compute():
    """The CPU profile (``async_copies=False``: the exported script copies in line): the same swap as
    above, but c2 starts after the store ends and c3 after the load; the latency is the sum of every
    step's time, copies included."""
    g = _mm_graph(256, 256, 256)
    c = g.by_name("c")
    st = g.add_node(name="store", op="store", kind=NodeKind.STORE, args=[TRef(c.id)],
                    outputs=[TensorMeta((256, 256), "float32", device="host")])
    c2 = g.add_node(name="c2", op="aten.mm.default", args=[TRef(c.id), TRef(g.by_name("b").id)],
                    outputs=[TensorMeta((256, 256), "float32")])
    ld = g.add_node(name="load", op="load", kind=NodeKind.LOAD, args=[TRef(st.id)],
                    outputs=[TensorMeta((256, 256), "float32")])
    c3 = g.add_node(name="c3", op="aten.add.Tensor", args=[TRef(ld.id), TRef(c2.id)],
                    outputs=[TensorMeta((256, 256), "float32")])
    g.outputs = {"output_0": TRef(c3.id)}
    order = [c.id, st.id, c2.id, ld.id, c3.id]
    cpu = AnalyticCost("cpu")
    assert not cpu.device.async_copies and AnalyticCost(DEV).device.async_copies
    r = simulate(g, order, cpu)
    i = {nid: k for k, nid in enumerate(r.order)}
    assert r.stream[i[st.id]] == "copy"
    assert r.start[i[c2.id]] == pytest.approx(r.end[i[st.id]])
    assert r.start[i[c3.id]] == pytest.approx(r.end[i[ld.id]])
    assert r.latency == pytest.approx(sum(cpu.node_time(g, g.nodes[v]) for v in order))
    assert r.latency > sum(cpu.node_time(g, g.nodes[v]) for v in (c.id, c2.id, c3.id))  # the copies count


def test_latency_is_the_sum_on_one_stream():
    g = _mm_graph(64, 64, 64)
    cm = AnalyticCost("a100-80gb")
    r = simulate(g, [g.by_name("c").id], cm)
    assert r.latency == pytest.approx(cm.node_time(g, g.by_name("c")))


def test_measured_cost_times_ops_and_caches_them(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from core.cost import measured
    from core.cost.measured import MeasuredCost

    g = _mm_graph(128, 128, 128)
    node = g.by_name("c")
    m1 = MeasuredCost(device="cpu", cache_dir=tmp_path, repeats=3)
    # the op runs for real; the clock it is read with steps 5 ms over the warm-up call (long enough:
    # one call per sample), then 4, 1 and 2 ms over the three repeats
    ticks = iter([0.0, 0.005, 1.0, 1.004, 2.0, 2.001, 3.0, 3.002])
    monkeypatch.setattr(measured, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    t1 = m1.node_time(g, node)
    monkeypatch.undo()
    assert t1 == pytest.approx(0.002)  # the median, in seconds
    m1.save()
    files = list(tmp_path.glob("op-times-*.json"))
    assert len(files) == 1
    m2 = MeasuredCost(device="cpu", cache_dir=tmp_path)
    assert m2.node_time(g, node) == t1  # from the cache, not re-measured
    assert m2._dirty == 0

"""Every scheduler, given a time budget, returns on a 10k-op graph (a synthetic chain of blocks with
views, weight views and two-output ops), and is never worse than the traced / RPO orders."""

from __future__ import annotations

import random
import sys

import pytest

from core.ir.builder import GraphBuilder
from core.ir.graph import Graph
from core.schedule import get_scheduler

BUDGET = 6.0


def chain_of_blocks(n_blocks: int, seed: int = 0) -> Graph:
    """stem -> n x [a = f(h, view(w)), c = g(h), d = k(view(a), c), (e, e2) = m(d), h = add(e, h)]."""
    rng = random.Random(seed)
    b = GraphBuilder("blocks")
    x = b.input("x", 64)
    w = b.weight("w", 32)
    h = b.op("stem", [x, w], 64)
    for i in range(n_blocks):
        t = b.op(f"t{i}", [w], 0, view_of=w)
        a = b.op(f"a{i}", [h, t], rng.choice([32, 64, 128]))
        c = b.op(f"c{i}", [h], rng.choice([16, 64]))
        v = b.op(f"v{i}", [a], 0, view_of=a)
        d = b.op(f"d{i}", [v, c], rng.choice([32, 64, 96]))
        e = b.op(f"e{i}", [d], [64, 8])
        h = b.op(f"h{i}", [e, h], 64)
    b.op("out", [h], 4, output=True)
    return b.graph


@pytest.fixture(scope="module")
def big() -> Graph:
    g = chain_of_blocks(1430)
    assert len(g.ops()) > 10_000
    return g


@pytest.fixture(scope="module")
def baseline(big) -> int:
    return min(get_scheduler(m).run(big).peak for m in ("traced", "rpo"))


@pytest.mark.parametrize("method", ["serenity", "hmcos", "incremental", "random"])
def test_returns_with_a_time_budget(big, baseline, method):
    s = get_scheduler(method, time_budget=BUDGET).run(big)
    assert s.peak <= baseline


# ---- huge fan-out: one tensor read by tens of thousands of ops ------------------------------------
def fan_out(k: int, join: bool) -> Graph:
    """x -> hub -> k users (each 8 bytes) [-> one op reading all of them]."""
    b = GraphBuilder("fan")
    h = b.op("hub", [b.input("x", 64)], 64)
    users = [b.op(f"u{i}", [h], 8) for i in range(k)]
    if join:
        b.op("join", users, 8, output=True)
    return b.graph


@pytest.mark.parametrize("join", [False, True])
def test_rpo_is_linear_in_fan_out(join):
    """RPO visits each edge a bounded number of times: count the predecessor-list reads."""
    from core.analysis.order import reverse_post_order

    reads = {}
    for k in (2_000, 8_000):
        g = fan_out(k, join)
        n_edges = sum(len(g.preds(n)) for n in g.nodes)

        class Counting(dict):
            def __getitem__(self, key):
                self.reads += 1
                return super().__getitem__(key)

        preds = Counting({nid: list(g.preds(nid)) for nid in g.nodes})
        preds.reads = 0
        sinks = sorted(n for n in g.nodes if not g.users(n))
        order = reverse_post_order(preds, sinks)
        assert sorted(order) == sorted(g.nodes)
        reads[k] = preds.reads
        assert preds.reads <= 3 * (len(g) + n_edges)
    assert reads[8_000] < 5 * reads[2_000]  # 4x the graph: about 4x the work, not 16x


def lines_run(fn, *args):
    """(``fn(*args)``, how many lines of Python code it ran): ``sys.settrace`` line events."""
    n = 0

    def local(frame, event, arg):
        nonlocal n
        n += event == "line"
        return local

    old = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local)
    try:
        out = fn(*args)
    finally:
        sys.settrace(old)
    return out, n


@pytest.mark.parametrize("join", [False, True])
def test_every_scheduler_does_linear_work_on_a_huge_fan_out(join):
    """Each strategy returns a complete order on a node with thousands of users, and its work --
    counted as the lines of Python it runs -- grows linearly with them: 4x the users, about 4x the
    lines, not 16x (quadratic work there once made 20,000 users take minutes; ``python
    bench/fanout.py`` times 50,000).  The searches get no time (``time_budget=0``): each returns the
    best order it has at its first deadline check, so the count does not depend on the machine."""
    work: dict[str, dict[int, int]] = {}
    for k in (2_000, 8_000):
        g = fan_out(k, join)
        for m in ("traced", "rpo", "random", "serenity", "hmcos", "incremental"):
            kw = {} if m in ("traced", "rpo") else {"time_budget": 0.0}
            s, work.setdefault(m, {})[k] = lines_run(get_scheduler(m, **kw).run, g)
            assert len(s.order) == len(g.ops()), m
    for m, lines in work.items():
        assert lines[8_000] < 5 * lines[2_000], (m, lines)

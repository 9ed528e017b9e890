"""Every scheduler, given a time budget, returns on a 10k-op graph (a synthetic chain of blocks with
views, weight views and two-output ops), and is never worse than the traced / RPO orders."""

from __future__ import annotations

import random

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

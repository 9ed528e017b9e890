"""The caching-allocator model (core.analysis.allocator) against the rules of torch's
CUDACachingAllocator on hand cases, random alloc/free sequences, and the alloc/free traces that
exported plans of a sample really perform on the CPU."""

from __future__ import annotations

import random

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from core.analysis.allocator import (
    CachingAllocator,
    alloc,
    canonical,
    free,
    is_small,
    plan_events,
    profile_events,
    replay,
    round_size,
    segment_size,
)

KiB, MiB = 1 << 10, 1 << 20


# ---- rounding, pools, segment sizes --------------------------------------------------------------
@pytest.mark.parametrize("nbytes, rounded", [(0, 512), (1, 512), (511, 512), (512, 512), (513, 1024),
                                             (MiB, MiB), (MiB + 1, MiB + 512)])
def test_round_size(nbytes, rounded):
    assert round_size(nbytes) == rounded


def test_a_zero_byte_request_takes_no_block():
    # torch's allocate() skips malloc for size 0: no segment, nothing allocated
    r = replay([alloc("z", 0), alloc("a", 1), free("z")])
    assert r.reserved_peak == 2 * MiB and r.allocated_peak == 512 and r.segments == 1


def test_pools_split_at_one_mib():
    assert is_small(round_size(MiB)) and not is_small(round_size(MiB + 1))
    assert replay([alloc("a", MiB)]).reserved_peak == 2 * MiB
    assert replay([alloc("a", MiB + 1)]).reserved_peak == 20 * MiB


def test_small_segment_holds_four_512_kib_blocks():
    a = CachingAllocator()
    for k in range(4):
        a.malloc(k, 512 * KiB)
    assert (a.reserved, a.allocated, a.segments) == (2 * MiB, 2 * MiB, 1)
    assert [b.addr for b in a.live_blocks()] == [0, 512 * KiB, MiB, 1536 * KiB]
    a.malloc(4, 512 * KiB)
    assert (a.reserved, a.segments) == (4 * MiB, 2)


@pytest.mark.parametrize("nbytes", [MiB + 1, 5 * MiB, 10 * MiB - 512])
def test_requests_between_one_and_ten_mib_get_a_20_mib_segment(nbytes):
    assert segment_size(round_size(nbytes)) == 20 * MiB
    r = replay([alloc("a", nbytes)])
    assert (r.reserved_peak, r.allocated_peak) == (20 * MiB, round_size(nbytes))


@pytest.mark.parametrize("nbytes, seg", [(10 * MiB - 1, 10 * MiB),  # rounds up to 10 MiB first
                                         (10 * MiB, 10 * MiB), (25 * MiB + 1, 26 * MiB), (26 * MiB, 26 * MiB)])
def test_large_requests_get_a_segment_of_their_own_rounded_to_2_mib(nbytes, seg):
    r = replay([alloc("a", nbytes)])
    assert r.reserved_peak == seg and r.segments == 1


# ---- splitting, best fit, coalescing -------------------------------------------------------------
def test_small_blocks_split_down_to_512_bytes():
    a = CachingAllocator()
    a.malloc("a", MiB)  # 2 MiB segment: 1 MiB remains
    a.malloc("b", MiB - 512)  # remainder 512 B >= 512: split
    a.malloc("c", 512)  # fills the segment exactly
    assert (a.segments, a.reserved, a.allocated) == (1, 2 * MiB, 2 * MiB)
    assert a.free_blocks() == []


@pytest.mark.parametrize("nbytes, handed_out", [
    (19 * MiB + 512 * KiB, 20 * MiB),  # remainder 512 KiB <= 1 MiB: not split, the whole block
    (19 * MiB, 20 * MiB),  # remainder exactly 1 MiB: not split (must be > 1 MiB)
    (19 * MiB - 512, 19 * MiB - 512),  # remainder 1 MiB + 512 B: split
])
def test_large_blocks_split_only_when_more_than_one_mib_remains(nbytes, handed_out):
    a = CachingAllocator()
    a.malloc("a", 5 * MiB)
    a.free("a")  # the 20 MiB segment is whole and cached again
    a.malloc("b", nbytes)
    assert (a.allocated, a.reserved, a.segments) == (handed_out, 20 * MiB, 1)


def _three_in_a_segment() -> CachingAllocator:
    a = CachingAllocator()
    for k in "abc":
        a.malloc(k, 4 * MiB)  # addresses 0, 4, 8 MiB of one 20 MiB segment; 8 MiB free at 12 MiB
    return a


def test_free_merges_with_free_neighbours():
    a = _three_in_a_segment()
    a.free("a")
    a.free("c")  # merges with the 8 MiB tail
    assert [(b.addr, b.size) for b in a.free_blocks()] == [(0, 4 * MiB), (8 * MiB, 12 * MiB)]
    a.free("b")  # merges with both: the segment is one free block again
    assert [(b.addr, b.size) for b in a.free_blocks()] == [(0, 20 * MiB)]
    a.malloc("d", 14 * MiB)  # fits the coalesced segment: no new one
    assert (a.reserved, a.segments) == (20 * MiB, 1)


def test_best_fit_takes_the_smallest_block_then_the_lowest_address():
    a = _three_in_a_segment()
    a.free("a")
    a.free("c")  # free: 4 MiB @0, 12 MiB @8 MiB
    b = a.malloc("d", 3 * MiB)  # the 4 MiB block fits best; its 1 MiB remainder is not split off
    assert (b.addr, b.size) == (0, 4 * MiB)
    a = CachingAllocator()
    for k in range(4):
        a.malloc(k, 512 * KiB)
    a.free(3)
    a.free(1)  # two free 512 KiB blocks (1 and 3 are not neighbours of each other's free blocks)
    assert a.malloc("x", 512 * KiB).addr == 512 * KiB


def test_fragmented_free_blocks_force_a_new_segment():
    a_events = [alloc(k, 512 * KiB) for k in range(4)] + [free(0), free(2)]
    # 1 MiB is free in the segment, but as two 512 KiB pieces: a 1 MiB request needs a new segment
    r = replay([*a_events, alloc("big", MiB)])
    assert r.reserved_peak == 4 * MiB and r.segments == 2
    assert r.peak_event == 6 and r.allocated_peak == 2 * MiB
    assert r.fragmentation_bytes == 2 * MiB and r.fragmentation == 0.5 and r.largest_free_at_peak == MiB
    # the same request after the middle block is freed too: the pieces merge and serve it
    r2 = replay([*a_events, free(1), alloc("big", MiB)])
    assert r2.reserved_peak == 2 * MiB and r2.segments == 1


def test_cached_small_blocks_never_serve_large_requests():
    r = replay([alloc(0, 512 * KiB), free(0), alloc(1, MiB + 1)])
    assert r.reserved_peak == 22 * MiB and r.segments == 2


# ---- OOM retry with a capacity ---------------------------------------------------------------------
def test_oom_retry_releases_cached_segments_and_retries():
    ev = [alloc("a", 12 * MiB), free("a"), alloc("b", 14 * MiB), free("b"), alloc("c", 16 * MiB)]
    r = replay(ev, capacity=30 * MiB)
    # 12 + 14 = 26 MiB reserved (b does not fit a's cached 12 MiB); 26 + 16 > 30: both cached
    # segments are released and the cudaMalloc retried
    assert r.ok and r.oom_retries == 1 and r.retry_events == [4]
    assert r.reserved_peak == 26 * MiB and r.reserved.tolist()[-1] == 16 * MiB and r.segments == 1
    unlimited = replay(ev)
    assert unlimited.reserved_peak == 42 * MiB and unlimited.oom_retries == 0


def test_out_of_memory_after_the_retry_stops_the_replay():
    r = replay([alloc("a", 12 * MiB), alloc("b", 14 * MiB), alloc("c", 6 * MiB)], capacity=30 * MiB)
    assert not r.ok and r.failed_event == 2 and "out of memory" in r.failure
    assert r.oom_retries == 1 and len(r.reserved) == 2 and r.reserved_peak == 26 * MiB


def test_a_split_segment_is_not_released_by_the_retry():
    # b keeps the 20 MiB segment split after a is freed (12 MiB free at its end, 4 MiB at its
    # start): a 13 MiB request fits neither and needs a 14 MiB segment; 20 + 14 > 30 and the retry
    # has nothing to release
    r = replay([alloc("a", 4 * MiB), alloc("b", 4 * MiB), free("a"), alloc("c", 13 * MiB)], capacity=30 * MiB)
    assert r.failed_event == 3 and r.oom_retries == 1 and r.segments == 1 and r.reserved_peak == 20 * MiB


def test_bad_calls_are_clear_errors():
    a = CachingAllocator()
    a.malloc("a", 1)
    with pytest.raises(ValueError, match="already live"):
        a.malloc("a", 1)
    with pytest.raises(ValueError, match="not allocated"):
        a.free("b")
    with pytest.raises(ValueError, match=">= 0 bytes"):
        a.malloc("c", -1)


# ---- properties on random sequences -------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_invariants_on_random_alloc_free_sequences(seed):
    rng = random.Random(seed)
    sizes = [0, 1, 511, 512, 4 * KiB, 300 * KiB, MiB, MiB + 1, 3 * MiB, 9 * MiB, 10 * MiB - 1, 17 * MiB + 5]
    a = CachingAllocator()
    live: dict[int, int] = {}
    segments = 0
    for k in range(400):
        if live and rng.random() < 0.45:
            key = rng.choice(sorted(live))
            a.free(key)
            del live[key]
        else:
            n = rng.choice(sizes) + rng.randrange(0, 3) * rng.choice([0, 1, 513])
            a.malloc(k, n)
            live[k] = n
        blocks = a.live_blocks()
        rounded = sum(round_size(n) for n in live.values() if n > 0)
        large = sum(1 for b in blocks if not b.small)
        assert a.reserved >= a.allocated
        assert a.allocated == sum(b.size for b in blocks)  # memory_allocated counts block sizes
        # a block is the rounded size, or (large pool, unsplit) at most 1 MiB more
        assert rounded <= a.allocated <= rounded + large * MiB
        assert all(b.size == round_size(n) for b, n in zip(blocks, [n for n in live.values() if n > 0],
                                                                 strict=True) if b.small)
        assert a.reserved == sum(b.size for b in blocks) + sum(b.size for b in a.free_blocks())
        assert a.segments >= segments  # without a capacity nothing is ever released
        segments = a.segments
    assert a.oom_retries == 0 and a.released_segments == 0


# ---- the plans of a sample: predicted events against the script's recorded ones ---------------
SCALE = 16384  # fig2_skip's batch of 4 rows x 16384: every activation 2 MiB (the large pool)
PLANS = {"microbatch": "k=4", "offload": "all saved", "sqrt_n": "cheap ops 12.5%"}  # fission, swaps, remat


def _recorder(base):
    """A subclass of the script's own LiveBytesTracker (its host_allocation() knows only that class)
    that logs every storage it sees appear (alloc) and die (free); it sweeps before each aten call
    too, so the frees of the script's ``del`` lines come before the next op's allocation."""

    class AllocRecorder(base):
        def __init__(self, device, roots):
            super().__init__(device, roots)
            self.events, self._ids, self._count = [], {}, 0

        def _add(self, t):
            if t.device.type != self.device_type or t.layout != torch.strided:
                return
            s = t.untyped_storage()
            key = s._cdata
            old = self._live.get(key)
            if old is not None:
                if not old[0].expired():
                    return
                self._drop(key)
            self._count += 1
            self._live[key] = (StorageWeakRef(s), int(s.nbytes()))
            self._ids[key] = self._count
            self.live_bytes += int(s.nbytes())
            self.events.append(alloc(self._count, int(s.nbytes())))

        def _drop(self, key):
            _ref, nbytes = self._live.pop(key)
            self.live_bytes -= nbytes
            self.events.append(free(self._ids.pop(key), nbytes))

        def _sweep(self):
            for k in [k for k, (ref, _) in self._live.items() if ref.expired()]:
                self._drop(k)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self._sweep()
            return super().__torch_dispatch__(func, types, args, kwargs)

    return AllocRecorder


@pytest.fixture(scope="module")
def big_fig2():
    import sample_graphs
    from core.frontend.torch_import import capture
    from core.search.plan import load_plans
    from sample_graphs.frontiers import plan_path

    s = sample_graphs.build("fig2_skip")
    inputs = tuple(torch.randn(x.shape[0] * SCALE, *x.shape[1:]) for x in s.inputs)
    g = capture(s.module, inputs, s.loss_fn, s.forward_fn, training=True, name="fig2_skip")
    return g, load_plans(plan_path("fig2_skip"))


@pytest.mark.parametrize("method", sorted(PLANS))
def test_recorded_script_trace_replays_like_the_predicted_events(big_fig2, method, tmp_path):
    from core.codegen import export_script
    from core.codegen.verify import load_script
    from core.cost import AnalyticCost
    from core.search.plan import replay as replay_plan
    from core.search.plan import sim_options
    from core.simulate import simulate

    g, pf = big_fig2
    (p,) = [p for p in pf.points if p.method == method and p.label == PLANS[method]]
    h = replay_plan(g, p.applications)  # the sample's plan, replayed onto the sample at a larger batch
    cost = AnalyticCost(pf.device)
    sim = simulate(h, p.order, cost, **sim_options(p))
    mod = load_script(export_script(h, p.order, tmp_path / "plan.py", cost=cost, sim=sim, **sim_options(p)))
    tensors = mod.make_inputs(mod.INPUTS, 0)
    rec = _recorder(mod.LiveBytesTracker)("cpu", [*(tensors[n] for n in mod.INPUTS), *mod.CONSTANTS.values()])
    with rec:
        out = mod.run(tensors, "cpu")
        rec._sweep()  # the frees of the last del line
    assert out and rec.peak_bytes == sim.peak
    predicted = plan_events(h, p.order, sim.copy_done)
    # the relation: the same allocation sizes in the same order, and between two allocations the
    # same multiset of freed sizes (the order of frees among themselves changes no allocator decision)
    assert canonical(rec.events) == canonical(predicted)
    measured, model = replay(rec.events), replay(predicted)
    assert measured.reserved_peak == model.reserved_peak
    assert model.live_peak == sim.peak  # live bytes of the events = the simulator's peak
    assert model.reserved_peak >= model.allocated_peak >= sim.peak
    # the residents come first, in the order the script places them
    n_res = sum(1 for s in sim.memory.storages if s.alloc < 0 and s.nbytes > 0)
    assert all(e.alloc and h.nodes[e.key[0]].kind.value == "placeholder" for e in predicted[:n_res])
    # the simulation's profile gives the same events
    assert canonical(profile_events(h, sim.memory)) == canonical(predicted)


def test_fission_parts_reuse_their_blocks(big_fig2):
    """microbatch k=4 splits the batch in 4: each part's 512 KiB activations are freed before the
    next part starts, so the parts reuse one another's blocks and the reserved peak stays put."""
    from core.search.plan import replay as replay_plan

    g, pf = big_fig2
    (p,) = [p for p in pf.points if p.method == "microbatch" and p.label == "k=4"]
    h = replay_plan(g, p.applications)
    ev = plan_events(h, p.order)
    (fission,) = [n for n in h.ops() if n.kind.value == "fission"]
    parts = {e.key[1] for e in ev if len(e.key) > 3 and e.key[0] == fission.id}
    assert parts == set(range(fission.fission.n)) == {0, 1, 2, 3}
    one_part = replay([e for e in ev if not (len(e.key) > 3 and e.key[1] > 0)])
    assert replay(ev).reserved_peak == one_part.reserved_peak


# ---- plan files and the command line --------------------------------------------------------------
def test_plan_files_store_the_reserved_peak_and_old_files_still_load(tmp_path):
    from app.specs import load_graph
    from core.search.plan import load_plans, save_plans
    from sample_graphs.frontiers import plan_path

    g = load_graph("fig2_skip")
    pf = load_plans(plan_path("fig2_skip"), g)  # written before reserved peaks were stored
    assert all(p.reserved_peak is None for p in pf.points)
    save_plans(pf, tmp_path / "p.json", graph=g)
    again = load_plans(tmp_path / "p.json", g)
    # fig2_skip's storages are all far below 1 MiB and sum to ~60 KiB of 512 B blocks: one small segment
    assert [p.reserved_peak for p in again.points] == [2 * MiB] * len(pf.points)
    bad = (tmp_path / "p.json").read_text().replace('"reserved_peak_bytes":2097152', '"reserved_peak_bytes":-1', 1)
    (tmp_path / "bad.json").write_text(bad)
    from core.search.plan import PlanError

    with pytest.raises(PlanError, match="reserved_peak_bytes"):
        load_plans(tmp_path / "bad.json")


def test_cli_info_shows_the_reserved_peak_and_limit_kind_needs_a_limit(capsys, tmp_path):
    import json

    from app.cli import main

    assert main(["info", "fig2_skip", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["baseline_reserved_peak_bytes"] == 2 * MiB and info["reserved_segments"] == 1
    assert main(["info", "fig2_skip"]) == 0
    assert "reserved peak    2.00 MiB" in capsys.readouterr().out
    assert main(["optimize", "fig2_skip", "--pareto", "--limit-kind", "reserved", "-o", str(tmp_path / "p.json")]) == 2
    assert "--limit-kind reserved: give --memory-limit" in capsys.readouterr().err


def test_optimize_with_a_reserved_limit_offers_points_within_it(capsys, tmp_path):
    import json

    from app.cli import main
    from core.search.plan import load_plans

    out = tmp_path / "p.json"
    # every fig2_skip plan reserves one 2 MiB segment: within 4 MiB, beyond 1 MiB
    assert main(["optimize", "fig2_skip", "--memory-limit", "4MiB", "--limit-kind", "reserved",
                 "--time-budget", "1", "--json", "-o", str(out)]) == 0
    res = json.loads(capsys.readouterr().out)
    pf = load_plans(out)
    assert pf.meta["limit_kind"] == "reserved" and pf.meta["limit_bytes"] == 4 * MiB
    assert pf.points[0].reserved_peak == 2 * MiB and res["points"][0]["reserved_peak_bytes"] == 2 * MiB
    assert pf.points[-1].method == "eager"
    assert main(["optimize", "fig2_skip", "--memory-limit", "1MiB", "--limit-kind", "reserved",
                 "--time-budget", "1", "-o", str(out)]) == 3
    assert "no plan reaches the reserved-memory limit 1.00 MiB" in capsys.readouterr().err

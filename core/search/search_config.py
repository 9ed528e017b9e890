"""The M-Optimizer's tuning, in one frozen value passed to it (``MOptimizer(config=...)``,
``optimize(config=...)``): the paper's own constant (``delta``) beside the project's budget split
between the warm start's phases (``warm_start.py``) and the sizes of their scans.

Each field says why it has its value.  The measurements behind them are the benches named there
(``bench/profile_search.py``, ``bench/spike_steps.py``, ``bench/peak_fission.py``, ``bench/zoo.py``);
a test that needs another value builds its own config with ``dataclasses.replace``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchConfig:
    # ---- Algorithm 3 (the paper) -------------------------------------------------------------------
    delta: float = 1.1  # relaxation of the push test: a child is queued if not worse than 1.1 x the best (paper)
    hot: int = 6  # memory hot-spot tensors the tensor rules (Remat, Swap) are matched on per state
    # ---- the Pareto sweep (``MOptimizer.pareto``) ----------------------------------------------------
    min_gap: float = 0.05  # a frontier gap narrower than 5% in peak is not searched: its points are all but equal
    min_gap_search: float = 1.0  # seconds: a shorter remainder cannot finish one search iteration on a large graph
    floor: float = 0.8  # the sweep also searches below its lowest point, at this fraction of its peak
    # ---- the warm start's share of the budget (``optimize``) ----------------------------------------
    warm: float = 0.65  # single steps rarely lower a peak made of many equal layers: most of the time goes here
    latency_warm: float = 0.4  # under a latency limit the spike steps take most of the rest (``spike_share``)
    # the seeds (DTR at a series of budgets, offloading with checkpointing) run on top of the warm
    # start's share, this fraction of it: on graphs of thousands of ops the rules alone reach their
    # low points too slowly, and seeds taken out of the warm start's own time left its steps too little
    seed_share: float = 0.45
    # the first slack's DTR bisection may take up to this share of warm start and seeds together: on
    # graphs of 10k-100k ops one DTR run takes seconds and its plan is the only point within reach
    seed_first: float = 0.8
    # Swap steps from the adopted seeds get this share first, so a short search has MAGIS's own steps
    # on its best points (the later Swap steps go on from where they end)
    quick_swap_share: float = 0.2
    # greedy fission runs where its share is at least this many evaluator constructions (about one
    # simulation each): the F-Tree and each candidate's full simulation cost several of them
    greedy_min: float = 10.0
    # ---- Remat steps (``remat_steps``) ---------------------------------------------------------------
    remat_share: float = 0.3  # at least this share of the warm start goes to Remat steps after greedy fission
    remat_candidates: int = 16  # kinds of hot-spot (producer op, shape, dtype) a full scan tries
    # a scan skips hot-spots under 1/8 of the largest that lowers the peak: as many steps for less
    remat_small: int = 8
    lazy: float = 2.0  # a scan's next kind is committed while its latency per byte is within 2x the scan's best
    # ---- Swap steps --------------------------------------------------------------------------------
    # the share for Swap steps: the lever where fission cannot split the saved activations (batch norm
    # couples a CNN's batch), after the Remat chains because a graph with copies is simulated in full
    swap_share: float = 0.25
    # Swap steps start from the lowest-peak state within each of these latency slacks
    swap_from: tuple[float, ...] = (1.05, 1.10)
    # ---- below the warm start (``low_end``, under a memory limit it misses) -------------------------
    low_end_share: float = 0.5  # of what is left; the search from the low end's states gets the rest
    # DTR's budgets (x the limit) adopted as seeds, tried down to the first that fails
    low_end_budgets: tuple[float, ...] = (1.08, 1.07, 1.06, 1.05, 1.04)
    # ---- spike steps (``spike_steps``, ``spikes_within``) -------------------------------------------
    # the spikes within 0.4% (of the imported peak) of the working peak: those that make it
    spike_tol: float = 0.004
    spike_sep: int = 100  # ... at least this many steps apart (neighbouring steps are one spike)
    spike_width: int = 30  # a child is judged by the most its curve holds within 30 steps of the spike
    spike_candidates: int = 10  # the largest tensors alive at the spike that the rules are matched on
    spike_rules: tuple[str, ...] = ("swap", "swap_late", "swap_output", "remat", "remat_chain")
    spike_share: float = 0.75  # under a latency limit, the share of what the warm start leaves
    spike_swap_share: float = 0.3  # ... each start's Swap steps first (copies that overlap compute)
    # ... from the lowest states this far below the limit (x the imported latency)
    spike_from: tuple[float, ...] = (0.05, 0.03, 0.01)
    # Swap steps that end this much before their share hand the rest to spike steps
    spike_min_seconds: float = 0.5
    # the Pareto mode spends spike steps below this latency (x the imported), where the budget is at
    # least ``pareto_spike_seconds`` per thousand ops: with less, the warm start needs all of it
    pareto_spikes: float = 1.10
    pareto_spike_seconds: float = 30.0
    # ---- micro-batch F-Trans along the Remat chain (``batch_fission``) -------------------------------
    batch_share: float = 0.2  # the warm start's share
    batch_depths: int = 24  # states of the chain split first (evenly spaced)
    # states and parts beyond this latency (x the imported) are skipped: more parts only cost more
    batch_slow: float = 1.8


DEFAULT_CONFIG = SearchConfig()

__all__ = ["DEFAULT_CONFIG", "SearchConfig"]

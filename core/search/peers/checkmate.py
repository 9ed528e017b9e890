"""Checkmate: optimal tensor rematerialisation as a MILP (Jain, Jain, Nrusimha, Gholami, Abbeel,
Keutzer, Stoica, Gonzalez: "Checkmate: Breaking the Memory Wall with Optimal Tensor
Rematerialization", MLSys 2020, section 4), solved with scipy's HiGHS (``scipy.optimize.milp``).

Linearised over the traced order as in the paper (section 4.4): stage t computes op t, and before
it any earlier op again.  Variables (binary unless said):

* ``R[t,i]`` -- op i is computed in stage t (``R[t,t] = 1``);
* ``S[t,i]`` -- op i's output is kept in memory from stage t-1 into stage t (a checkpoint);
* ``FREE[t,i,k]`` -- i's storage is freed right after op k of stage t (k reads it, or k = i);
* ``U[t,k]`` -- memory while op k of stage t runs (continuous).

Constraints: dependencies ``R[t,j] <= R[t,i] + S[t,i]`` for each input i of j; checkpoints
``S[t+1,i] <= S[t,i] + R[t,i]``; memory ``U[t,k] <= budget`` with U following the paper's
recurrence (allocate k's output, then free each storage whose last reader of the stage was k and
which is not kept into t+1 -- the ``num_hazards`` linearisation of FREE); objective: minimum
total compute time ``sum R[t,i] * c_i``.  Memory is our storage semantics: bytes of storages
(views own none; a kept view keeps its base: ``S[t,v] <= S[t,base]``; a storage's readers include
those that read it through views), graph inputs and weights resident, graph outputs kept.

Only forward activations are recompute candidates, and a variable exists only where it can
matter (``R[t,i]``, ``S[t,i]`` for stages up to the last one at which i can be needed), which is
exact (no optimum is cut off) but still O(n^2).  The model is formulated once; budgets enter only
as the memory variables' upper bound.  Budgets run from 0.95 of eager's peak down to 0.3 in steps
of 0.05; the first one proven infeasible (by HiGHS, by the LP relaxation, or by memory that no
recomputation lowers) ends the sweep, every smaller one reported infeasible unsolved.

Per budget: the MILP (HiGHS) within its share of the time; a feasible solution found by then is a
point with its gap (``stats["optimal"] = False``).  Where the MILP finds none (or is too large to
try, ``milp_max_vars``), the paper's approximation (section 5): the LP relaxation, then two-phase
rounding -- S rounded deterministically (S* >= 0.5, the paper's; also 0.75 and 0.9, which keep
fewer checkpoints) and randomly (S ~ Bernoulli(S*)), R the fewest
recomputations that make S a schedule (:func:`r_given_s`) -- keeping the fastest rounding whose
peak *our simulator* finds within the budget; where none is, the LP is solved again at smaller
budgets (``TIGHTEN``).  Its points say ``solver = "lp-rounded"`` with the LP's optimum as
``lp_bound`` (a lower bound on the optimal recomputation seconds) and the rounded solution's
``recompute_seconds`` and ``gap`` against it.  A budget where neither finishes is a failure "not
run: ..." with the reason, never a point.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...ir.graph import Graph, TRef
from .base import Peer, eager_peak
from .common import Failure, Inst, RematDecision, candidates, coarse_to_fine, make_plan, realise, traced_order

BUDGETS = tuple(round(0.95 - 0.05 * k, 2) for k in range(14))  # 0.95, 0.9, ..., 0.3 of eager's peak
TIGHTEN = (0.9, 0.8)  # the LP solved again at these fractions of a budget no rounding met
THRESHOLDS = (0.5, 0.75, 0.9)  # deterministic roundings: S = 1 where S* >= each (0.5: the paper's)
# "auto" goes straight to the LP relaxation above this many variables: HiGHS's branch and bound
# found no incumbent in its share of 30-60 s on any of the paper's workloads above ~3.7e5 (resnet50),
# and did not prove small ones (unet) optimal in 7.5 s
MILP_MAX_VARS = 100_000
# the MILP is O(n^2) in variables, built in Python: bert_base's 1.5 M R/S variables (3.2 M in all)
# took about a minute and 8.4 GB to formulate.  Larger problems are not attempted.
MAX_VARS = 2_000_000
BYTES_PER_VAR = 5.6e3


def size(p: Problem) -> int:
    """Checkmate's R and S variables of problem ``p`` (the MILP has about as many again for frees and
    memory)."""
    s = sum(p.need[(i, j)] - i for i in range(len(p.ids)) for j in range(len(p.outs[i])))
    return s + sum(p.need_op[i] - i for i in p.cand)


Val = tuple[int, int]  # (op index, output index): one output tensor


@dataclass
class Problem:
    """The graph as Checkmate sees it: ops 0..n-1 in traced order, their costs, and their outputs
    with the bytes of the storages they own (a view owns none)."""

    ids: list[int]  # op node id per index
    cost: list[float]
    outs: list[list[int]]  # per op, per output: bytes freeable (0: a view, or a graph output)
    kept: list[int]  # per op, bytes of graph outputs it allocates (never freed)
    reads: list[set[Val]]  # the outputs an op reads
    owners: list[set[Val]]  # the storages an op is a member of (read directly or through views)
    base: dict[Val, Val]  # a view output -> the storage it aliases
    cand: set[int]
    need: dict[Val, int]  # last stage at which an output can be needed
    need_op: list[int]
    resident: int

    def mem(self, i: int) -> int:
        return sum(self.outs[i])


def problem(g: Graph, cost) -> Problem:
    ids = traced_order(g)
    idx = {v: i for i, v in enumerate(ids)}
    cand = {idx[v] for v in candidates(g)}
    kept_roots = {g.storage_root(r) for r in g.outputs.values()}
    n = len(ids)
    cst, outs, kept, reads, owners = [], [], [], [], []
    base: dict[Val, Val] = {}
    for i, v in enumerate(ids):
        node = g.nodes[v]
        cst.append(cost.node_time(g, node))
        o, k = [], 0
        for j, t in enumerate(node.outputs):
            own = t.nbytes if t.alias is None and t.device == "device" else 0
            if TRef(v, j) in kept_roots:
                k += own
                own = 0
            o.append(own)
            root = g.storage_root(TRef(v, j))
            if root != TRef(v, j) and root.node in idx:
                base[(i, j)] = (idx[root.node], root.index)
        outs.append(o)
        kept.append(k)
        rd, ow = set(), set()
        for r in node.inputs():
            if r.node in idx:
                rd.add((idx[r.node], r.index))
                root = g.storage_root(r)
                if root.node in idx:
                    ow.add((idx[root.node], root.index))
        reads.append(rd)
        owners.append(ow)
    readers: dict[Val, list[int]] = {}
    for j in range(n):
        for x in reads[j]:
            readers.setdefault(x, []).append(j)
    views_of: dict[Val, list[Val]] = {}
    for x, b in base.items():
        views_of.setdefault(b, []).append(x)
    need: dict[Val, int] = {}
    need_op = list(range(n))  # a candidate reader may be recomputed up to its own need; a kept view keeps its base
    for i in reversed(range(n)):
        for j in range(len(outs[i])):
            x = (i, j)
            nd = i
            for u in readers.get(x, ()):
                nd = max(nd, need_op[u] if u in cand else u)
            need[x] = nd
        for j in range(len(outs[i])):
            for w in views_of.get((i, j), ()):
                need[(i, j)] = max(need[(i, j)], need[w])
            need_op[i] = max(need_op[i], need[(i, j)])
    resident = sum(t.nbytes for p in g.placeholders() for t in p.outputs if t.alias is None and t.device == "device")
    return Problem(ids, cst, outs, kept, reads, owners, base, cand, need, need_op, resident)


class Lin:
    """A linear expression: {variable: coefficient} + constant."""

    __slots__ = ("c", "k")

    def __init__(self, c: dict[int, float] | None = None, k: float = 0.0) -> None:
        self.c = c or {}
        self.k = k

    def add(self, other: Lin, a: float = 1.0) -> Lin:
        for v, x in other.c.items():
            self.c[v] = self.c.get(v, 0.0) + a * x
        self.k += a * other.k
        return self


ZERO, ONE = Lin(), Lin(k=1.0)


class Model:
    """Variables (binary or continuous) and rows ``lb <= expr <= ub``."""

    def __init__(self) -> None:
        self.integer: list[int] = []
        self.upper: list[float] = []
        self.rows: list[tuple[Lin, float, float]] = []

    def var(self, integer: bool = True, upper: float = 1.0) -> Lin:
        self.integer.append(int(integer))
        self.upper.append(upper)
        return Lin({len(self.integer) - 1: 1.0})

    def le(self, e: Lin, ub: float) -> None:
        """e <= ub."""
        if e.c:
            self.rows.append((e, -np.inf, ub - e.k))
        elif e.k > ub + 1e-9:
            raise Infeasible(f"constant constraint {e.k} <= {ub}")

    def ge(self, e: Lin, lb: float) -> None:
        if e.c:
            self.rows.append((e, lb - e.k, np.inf))
        elif e.k < lb - 1e-9:
            raise Infeasible(f"constant constraint {e.k} >= {lb}")

    def eq(self, e: Lin, v: float) -> None:
        if e.c:
            self.rows.append((e, v - e.k, v - e.k))
        elif abs(e.k - v) > 1e-6:
            raise Infeasible(f"constant constraint {e.k} == {v}")

    def matrix(self, deadline: float | None = None):
        """The rows as a sparse matrix and their bounds; OutOfTime once ``time.perf_counter()`` passes
        ``deadline``."""
        from scipy.sparse import coo_matrix

        rows, cols, vals, lb, ub = [], [], [], [], []
        for k, (e, lo, hi) in enumerate(self.rows):
            if deadline is not None and not k % 20000 and time.perf_counter() > deadline:
                raise OutOfTime(f"matrix stopped at row {k} of {len(self.rows)}")
            for v, x in e.c.items():
                if x:
                    rows.append(k)
                    cols.append(v)
                    vals.append(x)
            lb.append(lo)
            ub.append(hi)
        a = coo_matrix((vals, (rows, cols)), shape=(len(self.rows), len(self.integer))).tocsr()
        return a, np.array(lb), np.array(ub)


class Infeasible(Exception):
    pass


@dataclass
class Formulation:
    """The MILP of one problem for every budget: the budget enters only as the upper bound of the
    memory variables ``u_vars`` (and ``const_peak``, the largest memory that no variable can lower:
    a budget under it is infeasible without solving anything)."""

    model: Model
    R: dict[tuple[int, int], Lin]  # (stage, op) -> variable, for the candidates that may be recomputed
    S: dict[tuple[int, Val], Lin]  # (stage, output) -> variable
    objective: Lin
    stages: list[list[int]]  # per stage, the ops it may compute, in order (the stage's op last)
    u_vars: list[int] = field(default_factory=list)
    const_peak: float = 0.0

    def upper(self, budget: float) -> np.ndarray:
        up = np.array(self.model.upper)
        up[self.u_vars] = float(budget)
        return up


def formulate(p: Problem, deadline: float | None = None) -> Formulation:
    """The MILP of the module docstring, its budget left open (``Formulation.upper``); OutOfTime
    once ``time.perf_counter()`` passes ``deadline``."""
    n = len(p.ids)
    m = Model()
    R: dict[tuple[int, int], Lin] = {}
    S: dict[tuple[int, Val], Lin] = {}
    for i in range(n):
        for j in range(len(p.outs[i])):
            for t in range(i + 1, p.need[(i, j)] + 1):
                S[(t, (i, j))] = m.var()
        if i in p.cand:
            for t in range(i + 1, p.need_op[i] + 1):
                R[(t, i)] = m.var()

    def r(t: int, i: int) -> Lin:
        return ONE if t == i else R.get((t, i), ZERO)

    def s(t: int, x: Val) -> Lin:
        return S.get((t, x), ZERO)

    stages: list[list[int]] = [[] for _ in range(n)]
    for (t, i) in R:
        stages[t].append(i)
    for t in range(n):
        stages[t] = sorted(stages[t]) + [t]
    # dependencies: an op computed in stage t finds each output it reads computed or kept in stage t
    for t in range(n):
        for j in stages[t]:
            for x in p.reads[j]:
                m.le(Lin().add(r(t, j)).add(r(t, x[0]), -1).add(s(t, x), -1), 0.0)
    # checkpoints: kept into t only if computed or kept in t-1; a kept view keeps its storage
    by_stage: list[list[Val]] = [[] for _ in range(n + 1)]
    for (t, x), v in S.items():
        by_stage[t].append(x)
        if t - 1 > x[0]:
            m.le(Lin().add(v).add(s(t - 1, x), -1).add(r(t - 1, x[0]), -1), 0.0)
        if x in p.base:
            m.le(Lin().add(v).add(s(t, p.base[x]), -1), 0.0)
    # memory, stage by stage: U while each op runs, then the storages it was the last member of
    members: dict[Val, set[int]] = {}
    for j in range(n):
        for x in p.owners[j]:
            members.setdefault(x, set()).add(j)
    kept_before = 0
    u_vars: list[int] = []
    const_peak = 0.0
    for t in range(n):
        if deadline is not None and time.perf_counter() > deadline:
            raise OutOfTime(f"formulation stopped at stage {t} of {n}")
        seq = stages[t]
        pos = {j: k for k, j in enumerate(seq)}
        u = Lin(k=float(p.resident + kept_before))
        for x in by_stage[t]:
            if p.outs[x[0]][x[1]]:
                u.add(S[(t, x)], float(p.outs[x[0]][x[1]]))
        freed: Lin | None = None
        for k, j in enumerate(seq):
            u = Lin(dict(u.c), u.k)
            if freed is not None:
                u.add(freed, -1.0)
            u.add(r(t, j), float(p.mem(j) + p.kept[j]))  # a copy's graph outputs die right after it
            if u.c:
                uv = m.var(integer=False, upper=np.inf)
                u_vars.append(len(m.integer) - 1)
                m.eq(Lin(dict(u.c), u.k).add(uv, -1), 0.0)
                u = Lin().add(uv)
            else:
                const_peak = max(const_peak, u.k)
            if j != t and p.kept[j]:
                u.add(r(t, j), -float(p.kept[j]))
            freed = Lin()
            for x in p.owners[j] | {(j, o) for o in range(len(p.outs[j]))}:
                nb = p.outs[x[0]][x[1]]
                if not nb or (x[0] not in pos and (t, x) not in S):
                    continue
                later = [y for y in members.get(x, ()) if y in pos and pos[y] > k]
                if t in later:
                    continue
                hz = Lin().add(ONE).add(r(t, j), -1).add(s(t + 1, x))
                for y in later:
                    hz.add(r(t, y))
                if not hz.c:
                    if hz.k == 0:
                        freed.k += nb
                    continue
                f = m.var()
                top = 2 + len(later)
                m.le(Lin().add(ONE).add(f, -1).add(hz, -1), 0.0)  # no hazard -> freed
                m.le(Lin().add(hz).add(f, float(top)), float(top))  # a hazard -> kept
                freed.add(f, float(nb))
        kept_before += p.kept[t]
    obj = Lin()
    for (_t, i), x in R.items():
        obj.add(x, p.cost[i])
    return Formulation(m, R, S, obj, stages, u_vars, const_peak)


@dataclass
class Solution:
    status: str  # "optimal", "feasible" (time limit, not proven), "infeasible", "not solved in time", ...
    decision: RematDecision | None
    objective: float = 0.0  # the decision's recomputation seconds (Checkmate's objective)
    gap: float | None = None
    seconds: float = 0.0
    variables: int = 0
    constraints: int = 0
    bound: float | None = None  # a proven lower bound on the optimum's objective (HiGHS's dual bound)


class OutOfTime(Exception):
    pass


def _highs(f: Formulation, mat, budget: float, time_limit: float, integer: bool):
    """HiGHS (``scipy.optimize.milp``) on formulation ``f`` at ``budget`` bytes: the MILP, or its LP
    relaxation (every variable continuous in [0, 1])."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    m = f.model
    nv = len(m.integer)
    c = np.zeros(nv)
    for v, x in f.objective.c.items():
        c[v] = x
    a, lb, ub = mat
    opts = {"time_limit": max(0.1, time_limit), "disp": False}
    if integer:
        opts["mip_rel_gap"] = 1e-6
    return milp(c, integrality=np.array(m.integer) if integer else np.zeros(nv),
                bounds=Bounds(np.zeros(nv), f.upper(budget)),
                constraints=[LinearConstraint(a, lb, ub)] if len(lb) else None, options=opts)


def solve(p: Problem, budget: int, time_limit: float = 60.0, f: Formulation | None = None, mat=None) -> Solution:
    """The MILP at ``budget`` bytes (formulated here unless ``f``, its matrix ``mat``, is given);
    never raises for a budget it cannot meet or a time limit."""
    t0 = time.perf_counter()
    f = f or formulate(p)
    mat = mat if mat is not None else f.model.matrix()
    base = dict(variables=len(f.model.integer), constraints=len(mat[1]))
    if f.const_peak > budget:
        return Solution(f"infeasible (at least {int(f.const_peak)} B live whatever is recomputed)", None, **base)
    res = _highs(f, mat, budget, time_limit - (time.perf_counter() - t0), integer=True)
    base["seconds"] = time.perf_counter() - t0
    if res.status == 2:
        return Solution("infeasible", None, **base)
    if res.x is None:
        why = "not solved in time" if res.status == 1 else f"not solved ({res.message})"
        return Solution(why, None, **base)
    x = np.round(res.x).astype(int)
    chosen = {(t, i) for (t, i), lin in f.R.items() if x[next(iter(lin.c))] == 1}
    status = "optimal" if res.status == 0 else "feasible"
    bound = res.get("mip_dual_bound")
    return Solution(status, decision(p, chosen), float(res.fun), res.get("mip_gap"),
                    bound=None if bound is None or not np.isfinite(bound) else float(bound), **base)


# ---- the LP relaxation and its two-phase rounding (Checkmate section 5) --------------------------
@dataclass
class Relaxation:
    status: str  # "optimal", "infeasible", "not solved in time", ...
    objective: float = 0.0  # a lower bound on the MILP's optimum at the same budget
    s_values: np.ndarray | None = None  # per key of ``Formulation.S``, in its order
    seconds: float = 0.0


def relax(f: Formulation, mat, budget: float, time_limit: float) -> Relaxation:
    """The LP relaxation of the MILP at ``budget`` bytes (HiGHS); the fractional S it finds."""
    t0 = time.perf_counter()
    if f.const_peak > budget:
        return Relaxation(f"infeasible (at least {int(f.const_peak)} B live whatever is recomputed)")
    res = _highs(f, mat, budget, time_limit, integer=False)
    dt = time.perf_counter() - t0
    if res.status == 2:
        return Relaxation("infeasible", seconds=dt)
    if res.x is None or res.status != 0:
        why = "not solved in time" if res.status == 1 else f"not solved ({res.message})"
        return Relaxation(why, seconds=dt)
    idx = np.fromiter((next(iter(lin.c)) for lin in f.S.values()), dtype=np.int64, count=len(f.S))
    return Relaxation("optimal", float(res.fun), res.x[idx], dt)


def round_s(f: Formulation, s_values: np.ndarray, rng: np.random.Generator | None = None,
            threshold: float = 0.5) -> set[tuple[int, Val]]:
    """Phase one: the checkpoints S rounded -- deterministically (S* >= ``threshold``) or, given
    ``rng``, randomly (kept with probability S*)."""
    keep = rng.random(len(s_values)) < s_values if rng is not None else s_values >= threshold
    keys = list(f.S)
    return {keys[k] for k in np.flatnonzero(keep)}


def r_given_s(p: Problem, f: Formulation, s: set[tuple[int, Val]]) -> set[tuple[int, int]] | None:
    """Phase two: the fewest recomputations R that make checkpoints S a schedule (every constraint
    but memory).  Stage by stage from the last, carrying what later stages read: an output read in
    stage t is held there if S holds it, else computed in stage t (its own inputs then read in
    stage t too); an output some later stage reads and stage t does not compute is held into t+1,
    so stage t holds or computes it.  Where an output cannot be recomputed (not a candidate, or past
    its last need) it is held whatever S says.  Checkpoints nothing reads are dropped, so R's cost
    is what the schedule recomputes.  None when S cannot be repaired (an output needed where no
    variable holds it: not for a formulation of this problem)."""
    n = len(p.ids)
    at: list[set[Val]] = [set() for _ in range(n + 1)]
    for t, x in s:
        at[t].add(x)
    chosen: set[tuple[int, int]] = set()
    carry: set[Val] = set()  # outputs held into stage t+1 that a later stage reads
    for t in reversed(range(n)):
        held: set[Val] = set()
        computed = {t}
        todo = [t]
        for x in sorted(carry):
            if x[0] != t and not _want(f, at[t], t, x, held, computed, todo):
                return None
        while todo:
            j = todo.pop()
            if j != t:
                chosen.add((t, j))
            for x in sorted(p.reads[j]):
                if not _want(f, at[t], t, x, held, computed, todo):
                    return None
        carry = held
    return chosen


def _want(f: Formulation, s_t: set[Val], t: int, x: Val, held: set[Val], computed: set[int], todo: list[int]) -> bool:
    """Output x is needed in stage t: held (S says so, or it cannot be recomputed there) or computed
    in stage t (queued in ``todo``).  False when neither is possible."""
    if x[0] in computed or x in held:
        return True
    if x in s_t or (t, x[0]) not in f.R:
        if (t, x) not in f.S:
            return False
        held.add(x)
        return True
    computed.add(x[0])
    todo.append(x[0])
    return True


def recompute_seconds(p: Problem, chosen: set[tuple[int, int]]) -> float:
    return float(sum(p.cost[i] for _t, i in chosen))


def decision(p: Problem, chosen: set[tuple[int, int]]) -> RematDecision:
    """Stage by stage: the recomputed ops in index order, then the stage's op; each reads the
    latest computed instance of its inputs."""
    n = len(p.ids)
    per_stage: list[list[int]] = [[] for _ in range(n)]
    for t, i in chosen:
        per_stage[t].append(i)
    cur: dict[int, int] = {}
    events: list[Inst] = []
    reads: dict[Inst, dict[int, int]] = {}
    for t in range(n):
        for i in sorted(per_stage[t]) + [t]:
            k = cur.get(i, -1) + 1
            cur[i] = k
            v = p.ids[i]
            events.append((v, k))
            rd = {p.ids[q]: cur[q] for q in {x[0] for x in p.reads[i]} if cur.get(q, 0)}
            if rd:
                reads[(v, k)] = rd
    return RematDecision(events, reads)


class Checkmate(Peer):
    name = "checkmate"
    label = "Checkmate"
    colour = "#dc2626"
    symbol = "star"
    family = "peer"
    paper = "Jain et al. 2020, Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization (MLSys)"

    def refuse(self, g, cost, *, max_vars: int = MAX_VARS, max_nodes: int | None = None, **_) -> str | None:
        """Too large to formulate: more than ``max_vars`` R/S variables (or ``max_nodes`` nodes)."""
        if max_nodes is not None and len(g) > max_nodes:
            return f"not attempted on {len(g)} nodes (> {max_nodes}; its MILP is quadratic in the ops)"
        self._problem = (g, cost, problem(g, cost))  # ``_run`` takes it from here: built once
        n = size(self._problem[2])
        if n > max_vars:
            self._problem = None
            return (f"not attempted: {n / 1e6:.1f} M R/S variables (> {max_vars / 1e6:g} M; about "
                    f"{n * BYTES_PER_VAR / 1e9:.0f} GB to formulate)")
        return None

    def _run(self, g, cost, *, time_budget, progress, budgets=BUDGETS, time_limit=None, solver="auto",
             milp_share=0.5, milp_max_vars=MILP_MAX_VARS, samples=4, thresholds=THRESHOLDS, tighten=TIGHTEN,
             seed=0, max_vars=None, max_nodes=None, **_):
        """Budgets (fractions of eager's peak) coarse to fine (``common.coarse_to_fine``: the largest,
        the smallest, the middle, ...); one proven infeasible (by the MILP, its LP relaxation, or
        memory no variable lowers) rules out every smaller one, which is not run.  ``time_limit``: seconds per budget (default: an equal share of what
        is left of ``time_budget`` over the budgets left).  ``solver``: "auto" (the MILP within
        ``milp_share`` of that, then the LP relaxation with two-phase rounding; the LP alone when the
        MILP has more than ``milp_max_vars`` variables), "milp" or "lp".
        The rounding keeps the fastest of the deterministic ones (S* >= each of ``thresholds``) and
        ``samples`` randomised ones whose simulated peak meets the budget; when none does, the LP is solved again at a smaller budget
        (each factor of ``tighten``) and rounded again."""
        if solver not in ("auto", "milp", "lp"):
            raise ValueError(f"checkmate solver must be auto, milp or lp (got {solver!r})")
        t0 = time.perf_counter()
        base = eager_peak(g, cost)
        last = getattr(self, "_problem", None)
        p = last[2] if last is not None and last[0] is g and last[1] is cost else problem(g, cost)
        self._problem = None
        budgets = coarse_to_fine(sorted(budgets, reverse=True))  # the whole range first, then finer
        try:
            f = formulate(p, deadline=t0 + time_budget)
            mat = f.model.matrix(deadline=t0 + time_budget)
        except OutOfTime:
            return [], [Failure("all", f"not run: formulating the MILP ({size(p) / 1e6:.2f} M R/S variables) "
                                       f"took more than the time budget of {time_budget:g} s")]
        except Infeasible as e:
            return [], [Failure("all", f"infeasible ({e})")]
        nv = len(f.model.integer)
        progress(f"checkmate: formulated in {time.perf_counter() - t0:.1f} s ({nv} variables, "
                 f"{len(mat[1])} constraints)")
        skip_milp = solver == "auto" and nv > milp_max_vars
        if skip_milp:
            solver = "lp"
        plans, failures = [], []
        proven: float | None = None
        for k, b in enumerate(budgets):
            label = f"budget {b:g}"
            if proven is not None and b <= proven:
                failures.append(Failure(label, f"infeasible (budget {proven:g} already is)"))
                continue
            left = time_budget - (time.perf_counter() - t0)
            if left <= 0:
                failures.append(Failure(label, f"not run: time budget {time_budget:g} s spent"))
                continue
            share = min(time_limit, left) if time_limit else left / (len(budgets) - k)
            limit = int(b * base)
            plan, why, infeasible = self._point(g, cost, p, f, mat, label, b, limit, share, solver, milp_share,
                                                samples, thresholds, tighten, seed, progress)
            if skip_milp and plan is None and not infeasible:
                why += f" (the MILP not tried: {nv} variables > {milp_max_vars})"
            if plan is not None:
                if skip_milp:
                    plan.stats["milp_skipped"] = f"{nv} variables > {milp_max_vars}"
                plans.append(plan)
            elif infeasible:
                proven = b if proven is None else max(proven, b)
                failures.append(Failure(label, why))
            else:
                failures.append(Failure(label, f"not run: {why}"))
        plans.sort(key=lambda q: -q.stats["budget_fraction"])
        failures.sort(key=lambda q: -float(q.label.split()[-1]))
        return plans, failures

    def _point(self, g, cost, p, f, mat, label, b, limit, share, solver, milp_share, samples, thresholds, tighten,
               seed, progress):
        """(plan, None, False), or (None, why, whether the budget is proven infeasible)."""
        t0 = time.perf_counter()
        stats = dict(budget=limit, budget_fraction=b, variables=len(f.model.integer), constraints=len(mat[1]))
        why: list[str] = []
        if solver in ("auto", "milp"):
            sol = solve(p, limit, share * (milp_share if solver == "auto" else 1.0), f, mat)
            progress(f"checkmate {label}: MILP {sol.status} in {sol.seconds:.1f} s")
            if sol.status.startswith("infeasible"):
                return None, sol.status, True
            if sol.decision is not None:
                r = realise(g, sol.decision)
                return make_plan(self.name, label, r, cost, solver="milp", optimal=sol.status == "optimal",
                                 mip_gap=sol.gap, bound=sol.bound, solver_seconds=round(sol.seconds, 3),
                                 recompute_seconds=sol.objective, **stats), None, False
            why.append(f"MILP {sol.status} in {sol.seconds:.1f} s ({sol.variables} variables, "
                       f"{sol.constraints} constraints)")
        if solver == "milp":
            return None, "; ".join(why), False
        best, bound, tries = None, None, 0
        for factor in (1.0, *tighten):
            left = share - (time.perf_counter() - t0)
            if left <= 0:
                why.append(f"LP relaxation not tried: the budget's {share:.1f} s were spent" if bound is None
                           else f"no rounding met the budget within {share:.1f} s")
                break
            lp = relax(f, mat, factor * limit, left)
            progress(f"checkmate {label}: LP relaxation at {factor:g} x budget {lp.status} in {lp.seconds:.1f} s")
            if lp.status.startswith("infeasible"):
                if factor == 1.0:
                    return None, f"{lp.status} (the LP relaxation)", True
                why.append(f"LP relaxation at {factor:g} x the budget infeasible")
                break
            if lp.s_values is None:
                why.append(f"LP relaxation {lp.status} in {lp.seconds:.1f} s")
                break
            if factor == 1.0:
                bound = lp.objective
            rng = np.random.default_rng(seed)
            seen: set[frozenset] = set()
            ways = [(f"deterministic (S* >= {th:g})", th) for th in thresholds]
            ways += [(f"randomised (sample {k})", None) for k in range(1, samples + 1)]
            for k, (how, th) in enumerate(ways):
                if k and time.perf_counter() - t0 > share:
                    break
                s = round_s(f, lp.s_values, rng if th is None else None, th or 0.5)
                chosen = r_given_s(p, f, s)
                if chosen is None or frozenset(chosen) in seen:
                    continue
                seen.add(frozenset(chosen))
                tries += 1
                r = realise(g, decision(p, chosen))
                plan = make_plan(self.name, label, r, cost, solver="lp-rounded", optimal=False,
                                 rounding=how,
                                 lp_budget_factor=factor, bound=bound, lp_bound=bound,
                                 recompute_seconds=recompute_seconds(p, chosen),
                                 roundings_tried=tries, **stats)
                if plan.peak <= limit and (best is None or plan.latency < best.latency):
                    best = plan
            if best is not None:
                break
            why.append(f"no rounding of the LP at {factor:g} x the budget met it ({tries} tried)")
        if best is not None:
            rc, lb = best.stats["recompute_seconds"], best.stats["lp_bound"]
            best.stats["gap"] = None if not lb else round((rc - lb) / lb, 6)
            best.stats["solver_seconds"] = round(time.perf_counter() - t0, 3)
            best.stats["roundings_tried"] = tries
            progress(f"checkmate {label}: LP-rounded, recompute {rc:.6f} s against the LP bound {lb:.6f} s")
            return best, None, False
        return None, "; ".join(why), False


__all__ = ["BUDGETS", "MAX_VARS", "MILP_MAX_VARS", "THRESHOLDS", "TIGHTEN", "Checkmate", "Problem", "Relaxation", "Solution", "decision",
           "formulate", "problem", "r_given_s", "recompute_seconds", "relax", "round_s", "size", "solve"]

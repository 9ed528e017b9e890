"""Checkmate: optimal tensor rematerialisation as a MILP (Jain, Jain, Nrusimha, Gholami, Abbeel,
Keutzer, Stoica, Gonzalez: "Checkmate: Breaking the Memory Wall with Optimal Tensor
Rematerialization", MLSys 2020, section 4), solved with scipy's HiGHS (``scipy.optimize.milp``).

**Granularity.**  The paper solves over a network's layers; per aten op its MILP has O(n^2)
variables, and on a real training graph (thousands of ops: 1.5 M R/S variables for BERT-base,
27 M for BTLM-3B) neither the MILP nor its LP relaxation is solved in any time a comparison
gives it.  So the problem's *nodes* are per op only where the op-level MILP fits
(``granularity = "op"``: at most ``min(milp_max_vars, coarse_max_vars)`` variables -- hand-built
and tiny graphs); otherwise they are groups of consecutive ops in the traced order
(:mod:`.coarsen`): a node per module call ("module depth D": consecutive ops whose module paths
agree on D components), or, where every module level is still too large, the traced order in
segments of consecutive module calls ("segments N").  "auto" takes the finest level whose
formulation has at most ``coarse_max_vars`` variables (about 40-50 nodes on the paper's
workloads: a few per transformer layer or residual stage -- coarser than the paper's per-layer
graphs on the deepest models), else the coarsest one, solved by the LP relaxation.  A coarse
node costs the sum of its ops' times; its outputs are bundled into a few checkpoints (what later
forward groups read, what only the backward reads, views of other nodes' storages); while it runs
it holds its internal working set on top (``Problem.work``), and it frees its inputs only at its
end: the coarse model is meant to over-count memory rather than under-count it (it is not exact
either way: a realisation may duplicate a recomputation, ``stats["duplicates"]``).  A coarse
problem recomputes only in the backward's stages (``Problem.recompute_from``: no R variables in
forward stages, which made HiGHS prove GPT-Neo's 37-node problem optimal in 6 s rather than not
in 11 s).  As it over-counts, its budgets are scaled by what it counts for eager's schedule over
eager's simulated peak (``model_peak``, ``stats["model_scale"]``), and every point is the plan
*our simulator* measures: a schedule whose simulated peak is over the budget is solved again
lower (the MILP by what it overshot, ``stats["milp_budget_factor"]``; the LP at the fractions
``TIGHTEN``), and only plans within their budget and not dominated by eager are points.  A coarse solution is
mapped back to ops (``coarsen.coarse_decision``): a group recomputed in stage t recomputes those
of its ops some later instance reads.  A coarse problem is a restriction: its optimum is never
better than the op-level one (where that can be solved), and "infeasible" says at which
granularity.  Each plan's ``stats`` say ``granularity``, ``coarse_nodes`` (nodes of the problem
solved) and the finer levels passed over (``finer_passed_over``).

Linearised over the node order as in the paper (section 4.4): stage t computes node t, and before
it any earlier node again.  Variables (binary unless said):

* ``R[t,i]`` -- node i is computed in stage t (``R[t,t] = 1``);
* ``S[t,i]`` -- node i's output is kept in memory from stage t-1 into stage t (a checkpoint);
* ``FREE[t,i,k]`` -- i's storage is freed right after node k of stage t (k reads it, or k = i);
* ``U[t,k]`` -- memory while node k of stage t runs (continuous).

Constraints: dependencies ``R[t,j] <= R[t,i] + S[t,i]`` for each input i of j; checkpoints
``S[t+1,i] <= S[t,i] + R[t,i]``; memory ``U[t,k] <= budget`` with U following the paper's
recurrence (allocate k's output -- a coarse node's working set first --, then free each storage
whose last reader of the stage was k and which is not kept into t+1 -- the ``num_hazards``
linearisation of FREE); objective: minimum total compute time ``sum R[t,i] * c_i``.  Memory is
our storage semantics: bytes of storages (views own none; a kept view keeps its base:
``S[t,v] <= S[t,base]``; a storage's readers include those that read it through views), graph
inputs and weights resident, graph outputs kept.  HiGHS solves it scaled (memory in MiB,
seconds to a largest cost of 1) where bytes and seconds are past its tolerances.

Only forward activations are recompute candidates, and a variable exists only where it can
matter (``R[t,i]``, ``S[t,i]`` for stages up to the last one at which i can be needed), which is
exact (no optimum is cut off) but still O(n^2).  The model is formulated once; budgets enter only
as the memory variables' upper bound.  Budgets run from 0.95 of eager's peak down to 0.3 in steps
of 0.05, coarse to fine, each with its share of the time left (over at most ``SPREAD`` budgets);
the first one proven infeasible (by HiGHS, by the LP relaxation, or by memory that no
recomputation lowers) ends the sweep, every smaller one reported infeasible unsolved.

Per budget: the MILP (HiGHS) within its share of the time; a feasible solution found by then is a
point with its gap (``stats["optimal"] = False``) -- unless the rounded LP below, run in the rest
of the budget's time, gives a faster plan within the budget (then that is the point, with
``milp_incumbent_latency``).  Where the MILP finds none (or is too large to try,
``milp_max_vars``), the paper's approximation (section 5): the LP relaxation, then two-phase
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
from ...simulate import simulate
from .base import Method
from .common import (
    Failure,
    Inst,
    RematDecision,
    candidates,
    coarse_to_fine,
    dominated_by_eager,
    make_plan,
    realise,
    traced_order,
)

BUDGETS = tuple(round(0.95 - 0.05 * k, 2) for k in range(14))  # 0.95, 0.9, ..., 0.3 of eager's peak
TIGHTEN = (0.9, 0.8)  # the LP solved again at these fractions of a budget no rounding met
THRESHOLDS = (0.5, 0.75, 0.9)  # deterministic roundings: S = 1 where S* >= each (0.5: the paper's)
# "auto" goes straight to the LP relaxation above this many variables: HiGHS's branch and bound
# found no incumbent in its share of 30-60 s on any of the paper's workloads above ~3.7e5 (resnet50),
# and did not prove small ones (unet) optimal in 7.5 s
MILP_MAX_VARS = 100_000
# "auto" takes the finest grouping (``coarsen``) whose MILP has at most this many variables: set by
# the paper workloads, where HiGHS finds incumbents for such a problem within a few seconds
COARSE_MAX_VARS = 6_000
# a budget's time: what is left over at most this many budgets (a coarse MILP of ~40 nodes finds
# no incumbent in the 2 s an even split of 60 s over 14 budgets gives it, mostly does in 5-10 s)
SPREAD = 5
# the MILP is O(n^2) in variables, built in Python: bert_base's 1.5 M R/S variables (3.2 M in all)
# took about a minute and 8.4 GB to formulate.  Larger problems are not attempted.
MAX_VARS = 2_000_000
BYTES_PER_VAR = 5.6e3
MIB = float(2**20)


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
    # a coarse problem (``coarse_problem``): node i is the ops ``groups[i]``, holding up to
    # ``work[i]`` bytes of its own while it runs; ``out_refs[i][j]``: the tensors of its output j (a
    # bundle).  None: per op
    groups: list[list[int]] | None = None
    granularity: str = "op"
    work: list[int] | None = None
    out_refs: list[list[list[TRef]]] | None = None
    recompute_from: int = 0  # the first stage that may recompute (a coarse problem's: the backward's)

    def mem(self, i: int) -> int:
        return sum(self.outs[i])


def problem(g: Graph, cost) -> Problem:
    ids = traced_order(g)
    idx = {v: i for i, v in enumerate(ids)}
    cand = {idx[v] for v in candidates(g)}
    kept_roots = {g.storage_root(r) for r in g.outputs.values()}
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
    resident = sum(t.nbytes for p in g.placeholders() for t in p.outputs if t.alias is None and t.device == "device")
    return assemble(ids, cst, outs, kept, reads, owners, base, cand, resident)


def assemble(ids, cst, outs, kept, reads, owners, base, cand, resident) -> Problem:
    """A problem from its nodes (ops, or groups of ops: ``coarsen``), with the last stage at which
    each output can be needed."""
    n = len(ids)
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
    return Problem(ids, cst, outs, kept, reads, owners, base, cand, need, need_op, resident)


def coarse_problem(g: Graph, cost, grouping, backward_only: bool = False) -> Problem:
    """Checkmate's problem on ``grouping`` (``coarsen``): node i is group i, with ``groups``,
    ``granularity`` and the working sets ``work``."""
    from .coarsen import coarse_parts

    args, fields = coarse_parts(g, cost, grouping, backward_only)
    return Problem(**{**assemble(*args).__dict__, **fields})


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
            for t in range(max(i + 1, p.recompute_from), p.need_op[i] + 1):
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
            if p.work is not None and p.work[j] > p.mem(j) + p.kept[j]:
                # a group's own working set while it runs, on top of what it reads
                pk = Lin(dict(u.c), u.k).add(r(t, j), float(p.work[j]))
                if pk.c:
                    pv = m.var(integer=False, upper=np.inf)
                    u_vars.append(len(m.integer) - 1)
                    m.eq(pk.add(pv, -1), 0.0)
                else:
                    const_peak = max(const_peak, pk.k)
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
    relaxation (every variable continuous in [0, 1]).  Solved scaled where its numbers are past
    HiGHS's tolerances -- memory in MiB (the memory variables' columns and the rows they are in)
    above 64 MiB, the objective to a largest coefficient of 1 below 1e-3 -- as bytes (1e9) and
    seconds (1e-5) beside binaries are: the LP relaxation of a coarse BERT-base problem took 9 s
    unscaled, 0.7 s scaled;
    ``fun`` and ``mip_dual_bound`` are given back in seconds."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import diags

    m = f.model
    nv = len(m.integer)
    c = np.zeros(nv)
    for v, x in f.objective.c.items():
        c[v] = x
    cs = float(np.abs(c).max()) if nv else 0.0
    cs = cs if 0 < cs < 1e-3 else 1.0
    a, lb, ub = mat
    up = f.upper(budget)
    if f.u_vars and len(lb) and budget > 64 * MIB:
        col = np.ones(nv)
        col[f.u_vars] = MIB
        row = np.where(np.asarray((a[:, f.u_vars] != 0).sum(axis=1)).ravel() > 0, 1.0 / MIB, 1.0)
        a = diags(row) @ a @ diags(col)
        lb, ub = lb * row, ub * row
        up = up.copy()
        up[f.u_vars] = up[f.u_vars] / MIB
    opts = {"time_limit": max(0.1, time_limit), "disp": False}
    if integer:
        opts["mip_rel_gap"] = 1e-6
    res = milp(c / cs, integrality=np.array(m.integer) if integer else np.zeros(nv),
               bounds=Bounds(np.zeros(nv), up),
               constraints=[LinearConstraint(a, lb, ub)] if len(lb) else None, options=opts)
    if res.get("fun") is not None:
        res["fun"] = float(res["fun"]) * cs
    if res.get("mip_dual_bound") is not None:
        res["mip_dual_bound"] = float(res["mip_dual_bound"]) * cs
    return res


def solve(p: Problem, budget: int, time_limit: float = 60.0, f: Formulation | None = None, mat=None,
          g: Graph | None = None) -> Solution:
    """The MILP at ``budget`` bytes (formulated here unless ``f``, its matrix ``mat``, is given);
    never raises for a budget it cannot meet or a time limit.  ``g``: the graph of a coarse problem
    (its decision is in the graph's ops)."""
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
    return Solution(status, decision(p, chosen, g), float(res.fun), res.get("mip_gap"),
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


def model_peak(p: Problem) -> float:
    """The memory the formulation counts for the schedule that recomputes nothing: each output held
    from its node to its last reader or member (a view's storage as long as the view), each node
    holding its working set (``Problem.work``) on top."""
    n = len(p.ids)
    last: dict[Val, int] = {}
    for j in range(n):
        for x in p.reads[j] | p.owners[j]:
            last[x] = max(last.get(x, x[0]), j)
    for x, b in sorted(p.base.items(), reverse=True):
        last[b] = max(last.get(b, b[0]), last.get(x, x[0]))
    delta = [0.0] * (n + 2)
    for i in range(n):
        for j, nb in enumerate(p.outs[i]):
            if nb:
                delta[i + 1] += nb  # held from the stage after its node's ...
                delta[last.get((i, j), i) + 1] -= nb  # ... to its last reader's
    held = peak = 0.0
    kept_before = 0
    for t in range(n):
        held += delta[t]
        own = max(p.work[t] if p.work is not None else 0, p.mem(t) + p.kept[t])
        peak = max(peak, p.resident + kept_before + max(held, 0.0) + own)
        kept_before += p.kept[t]
    return peak


def recompute_seconds(p: Problem, chosen: set[tuple[int, int]]) -> float:
    return float(sum(p.cost[i] for _t, i in chosen))


def decision(p: Problem, chosen: set[tuple[int, int]], g: Graph | None = None) -> RematDecision:
    """Stage by stage: the recomputed ops in index order, then the stage's op; each reads the
    latest computed instance of its inputs.  A coarse problem's (``g`` given): its groups' ops
    (``coarsen.coarse_decision``)."""
    if p.groups is not None:
        from .coarsen import coarse_decision

        if g is None:
            raise ValueError("a coarse problem's decision needs its graph")
        return coarse_decision(g, p.groups, chosen)
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


def grouping_of(g: Graph, granularity: str):
    """The grouping a granularity names: "module depth D" or "segments N" (``coarsen``)."""
    from .coarsen import Grouping, kinds, module_groups, segment_groups

    order = traced_order(g)
    words = granularity.split()
    try:
        if granularity.startswith("module depth") and len(words) == 3:
            return Grouping(granularity, module_groups(g, order, kinds(g, order), int(words[2])))
        if granularity.startswith("segments") and len(words) == 2:
            kind = kinds(g, order)
            deepest = max((len(g.nodes[v].module.split(".")) for v in order if g.nodes[v].module), default=0)
            atoms = module_groups(g, order, kind, deepest) if deepest else None
            return Grouping(granularity, segment_groups(order, kind, int(words[1]), atoms))
    except ValueError:
        pass
    raise ValueError(f"checkmate granularity must be auto, op, 'module depth D' or 'segments N' (got {granularity!r})")


@dataclass
class Chosen:
    """The problem Checkmate solves on a graph, at the granularity :meth:`Checkmate.choose` took."""

    problem: Problem
    formulation: Formulation
    matrix: tuple
    tried: list[str]  # the finer granularities passed over, and why


class Checkmate(Method):
    name = "checkmate"
    label = "Checkmate"
    colour = "#dc2626"
    symbol = "star"
    family = "peer"
    paper = "Jain et al. 2020, Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization (MLSys)"

    def refuse(self, g, cost, *, max_vars: int = MAX_VARS, max_nodes: int | None = None, granularity: str = "auto",
               **_) -> str | None:
        """Too large to formulate: more than ``max_vars`` R/S variables at the coarsest granularity
        it may take (the op's, where ``granularity`` is "op"), or more than ``max_nodes`` nodes."""
        if max_nodes is not None and len(g) > max_nodes:
            return f"not attempted on {len(g)} nodes (> {max_nodes}; its MILP is quadratic in the ops)"
        self._problem = (g, cost, problem(g, cost))  # ``_run`` takes it from here: built once
        n = size(self._problem[2])
        if n <= max_vars:
            return None
        if granularity == "auto":
            from .coarsen import coarsest

            grouping = coarsest(g)
            n = size(coarse_problem(g, cost, grouping))
            if n <= max_vars:
                return None
            self._problem = None
            return (f"not attempted: {n} R/S variables at the coarsest granularity ({grouping.name}) "
                    f"(> {max_vars:g})")
        if granularity != "op":
            return None  # a named granularity: ``_run`` says what it costs
        self._problem = None
        return (f"not attempted: {n / 1e6:.1f} M R/S variables (> {max_vars / 1e6:g} M; about "
                f"{n * BYTES_PER_VAR / 1e9:.0f} GB to formulate)")

    def choose(self, g, cost, fine: Problem | None, granularity: str, cap: int, max_vars: int,
               deadline: float, progress) -> Chosen:
        """The problem to solve: at ``granularity``, or ("auto") the finest whose formulation has at
        most ``cap`` variables -- per op first, then ``coarsen.levels`` from the deepest module level
        to the fewest segments -- else the coarsest (solved by the LP relaxation).  Raises OutOfTime
        past ``deadline``, Infeasible, or ValueError when nothing has at most ``max_vars`` R/S
        variables."""
        from .coarsen import levels

        def formulated(p: Problem) -> Chosen:
            f = formulate(p, deadline=deadline)
            return Chosen(p, f, f.model.matrix(deadline=deadline), tried)

        tried: list[str] = []
        if granularity == "op":
            return formulated(fine or problem(g, cost))
        if granularity != "auto":
            p = coarse_problem(g, cost, grouping_of(g, granularity), backward_only=True)
            if size(p) > max_vars:
                raise ValueError(f"{size(p)} R/S variables at {granularity} (> {max_vars:g})")
            return formulated(p)
        fine = fine or problem(g, cost)
        last: Problem | None = None
        # the formulation has about twice as many variables as R and S (frees and memory): a level
        # whose R/S alone are over half the cap is not formulated
        n = size(fine)
        if 2 * n <= cap and n <= max_vars:
            c = formulated(fine)
            if len(c.formulation.model.integer) <= cap:
                return c
            tried.append(f"op: {len(c.formulation.model.integer)} variables")
        else:
            tried.append(f"op: {n} R/S variables")
        coarsest = None
        for grouping in levels(g):
            coarsest = grouping
            if time.perf_counter() > deadline:
                raise OutOfTime("choosing the granularity")
            if len(grouping.groups) ** 2 > 2 * cap:
                # about n^2 R/S variables and as many again on n nodes (the paper workloads): not built
                tried.append(f"{grouping.name}: {len(grouping.groups)} nodes")
                continue
            p = coarse_problem(g, cost, grouping, backward_only=True)
            n = size(p)
            last = p
            if 2 * n > cap or n > max_vars:
                tried.append(f"{grouping.name}: {n} R/S variables")
                continue
            c = formulated(p)
            nv = len(c.formulation.model.integer)
            if nv <= cap:
                return c
            tried.append(f"{grouping.name}: {nv} variables")
        if last is None and coarsest is not None:
            last = coarse_problem(g, cost, coarsest, backward_only=True)
        if last is None or size(last) > max_vars:
            raise ValueError("no granularity has at most " f"{max_vars:g} R/S variables ({'; '.join(tried)})")
        return formulated(last)

    def _run(self, g, cost, *, time_budget, progress, budgets=BUDGETS, time_limit=None, solver="auto",
             milp_share=0.5, milp_max_vars=MILP_MAX_VARS, samples=4, thresholds=THRESHOLDS, tighten=TIGHTEN,
             seed=0, max_vars=None, max_nodes=None, granularity="auto", coarse_max_vars=COARSE_MAX_VARS,
             spread=SPREAD, **_):
        """Budgets (fractions of eager's peak) coarse to fine (``common.coarse_to_fine``: the largest,
        the smallest, the middle, ...); one proven infeasible (by the MILP, its LP relaxation, or
        memory no variable lowers) rules out every smaller one, which is not run.  ``time_limit``:
        seconds per budget (default: an equal share of what is left of ``time_budget`` over the
        budgets left, at most ``spread`` of them: the first budgets of the coarse-to-fine order get
        the time a MILP needs, the last ones what the first left).  ``solver``: "auto" (the MILP within
        ``milp_share`` of that, then the LP relaxation with two-phase rounding; the LP alone when the
        MILP has more than ``milp_max_vars`` variables), "milp" or "lp".
        The rounding keeps the fastest of the deterministic ones (S* >= each of ``thresholds``) and
        ``samples`` randomised ones whose simulated peak meets the budget; when none does, the LP is solved again at a smaller budget
        (each factor of ``tighten``) and rounded again.
        ``granularity``: "auto" (per op where its MILP has at most ``milp_max_vars`` variables, else
        the finest grouping of ``coarsen.levels`` with at most ``coarse_max_vars``, else the coarsest
        one, by the LP), "op", "module depth D" or "segments N".  ``max_vars``: the most R/S
        variables formulated at all."""
        if solver not in ("auto", "milp", "lp"):
            raise ValueError(f"checkmate solver must be auto, milp or lp (got {solver!r})")
        if granularity not in ("auto", "op"):
            grouping_of(g, granularity)  # a bad name raises here
        t0 = time.perf_counter()
        eager = simulate(g, traced_order(g), cost)
        base = eager.peak
        last = getattr(self, "_problem", None)
        fine = last[2] if last is not None and last[0] is g and last[1] is cost else None
        self._problem = None
        max_vars = MAX_VARS if max_vars is None else max_vars
        budgets = coarse_to_fine(sorted(budgets, reverse=True))  # the whole range first, then finer
        cap = milp_max_vars if granularity == "op" else min(milp_max_vars, coarse_max_vars)
        try:
            ch = self.choose(g, cost, fine, granularity, cap, max_vars, t0 + time_budget, progress)
        except OutOfTime:
            n = size(fine) if fine is not None else 0
            what = f" ({n / 1e6:.2f} M R/S variables per op)" if n else ""
            return [], [Failure("all", f"not run: formulating the MILP{what} took more than the time budget "
                                       f"of {time_budget:g} s")]
        except Infeasible as e:
            return [], [Failure("all", f"infeasible ({e})")]
        except ValueError as e:
            return [], [Failure("all", f"not attempted: {e}")]
        p, f, mat = ch.problem, ch.formulation, ch.matrix
        gran = p.granularity
        nodes = len(p.ids)
        nv = len(f.model.integer)
        progress(f"checkmate: {gran} ({nodes} nodes), formulated in {time.perf_counter() - t0:.1f} s "
                 f"({nv} variables, {len(mat[1])} constraints)" + (f"; passed over {'; '.join(ch.tried)}"
                                                                   if ch.tried else ""))
        skip_milp = solver == "auto" and nv > milp_max_vars
        if skip_milp:
            solver = "lp"
        # a coarse problem's memory over-counts (a group holds its inputs and outputs to its end):
        # its budgets are scaled by what it counts for eager's schedule over eager's simulated peak
        scale = max(1.0, model_peak(p) / eager.peak) if p.groups is not None else 1.0
        plans, failures = [], []
        proven: float | None = None
        where = "" if gran == "op" else f" at granularity {gran}"
        for k, b in enumerate(budgets):
            label = f"budget {b:g}"
            if proven is not None and b <= proven:
                failures.append(Failure(label, f"infeasible{where} (budget {proven:g} already is)"))
                continue
            left = time_budget - (time.perf_counter() - t0)
            if left <= 0:
                failures.append(Failure(label, f"not run: time budget {time_budget:g} s spent"))
                continue
            share = min(time_limit, left) if time_limit else left / min(len(budgets) - k, spread)
            limit = int(b * base)
            plan, why, infeasible = self._point(g, cost, p, f, mat, label, b, limit, share, solver, milp_share,
                                                samples, thresholds, tighten, seed, progress, scale)
            if skip_milp and plan is None and not infeasible:
                why += f" (the MILP not tried: {nv} variables > {milp_max_vars})"
            if plan is not None and dominated_by_eager(plan.peak, plan.latency, eager.peak, eager.latency):
                plan, why = None, (f"the plan (peak {plan.peak} B, {plan.latency:.6g} s) is dominated by eager's "
                                   f"({eager.peak} B, {eager.latency:.6g} s)")
            if plan is not None:
                if skip_milp:
                    plan.stats["milp_skipped"] = f"{nv} variables > {milp_max_vars}"
                plan.stats.update(granularity=gran, coarse_nodes=nodes, model_scale=round(scale, 4))
                if ch.tried:
                    plan.stats["finer_passed_over"] = "; ".join(ch.tried)
                plans.append(plan)
            elif infeasible:
                proven = b if proven is None else max(proven, b)
                failures.append(Failure(label, why if not where else why.replace("infeasible", f"infeasible{where}", 1)))
            else:
                failures.append(Failure(label, f"not run: {why}" + (where and f" ({gran})")))
        plans.sort(key=lambda q: -q.stats["budget_fraction"])
        failures.sort(key=lambda q: -float(q.label.split()[-1]))
        return plans, failures

    def _point(self, g, cost, p, f, mat, label, b, limit, share, solver, milp_share, samples, thresholds, tighten,
               seed, progress, scale=1.0):
        """(plan, None, False), or (None, why, whether the budget is proven infeasible).  The
        problem is solved at ``scale`` x ``limit`` (a coarse problem's memory over-counts its
        schedule's: ``model_peak``); a plan is one whose simulated peak is within ``limit``.  A MILP
        incumbent not proven optimal competes with the LP's roundings (``solver`` "auto")."""
        t0 = time.perf_counter()
        model = limit * scale
        stats = dict(budget=limit, budget_fraction=b, variables=len(f.model.integer), constraints=len(mat[1]))
        if scale != 1.0:
            stats["model_budget"] = int(model)
        why: list[str] = []
        milp_plan = None
        if solver in ("auto", "milp"):
            # the MILP at the budget; where its schedule peaks above it in our simulator (a coarse
            # problem's memory is an estimate), again lower by what it overshot (as often as
            # ``tighten`` has factors)
            milp_time = share * (milp_share if solver == "auto" else 1.0)
            factor = 1.0
            for _ in range(1 + len(tighten)):
                left = milp_time - (time.perf_counter() - t0)
                if factor != 1.0 and left <= 0.05:
                    why.append(f"no time left for the MILP at {factor:.3g} x the budget")
                    break
                sol = solve(p, int(factor * model), left, f, mat, g=g)
                progress(f"checkmate {label}: MILP at {factor:g} x budget {sol.status} in {sol.seconds:.1f} s")
                if sol.status.startswith("infeasible"):
                    if factor == 1.0:
                        return None, sol.status, True
                    why.append(f"MILP at {factor:.3g} x the budget infeasible")
                    break
                if sol.decision is None:
                    why.append(f"MILP {sol.status} in {sol.seconds:.1f} s ({sol.variables} variables, "
                               f"{sol.constraints} constraints)")
                    break
                r = realise(g, sol.decision)
                plan = make_plan(self.name, label, r, cost, solver="milp", optimal=sol.status == "optimal",
                                 mip_gap=sol.gap, bound=sol.bound, solver_seconds=round(sol.seconds, 3),
                                 recompute_seconds=sol.objective, milp_budget_factor=factor, **stats)
                if plan.peak <= limit:
                    if plan.stats["optimal"] or solver == "milp":
                        return plan, None, False
                    milp_plan = plan  # an incumbent within the time: the LP's rounding may beat it
                    break
                why.append(f"the MILP's schedule at {factor:.3g} x the budget peaks at {plan.peak} B in the simulator")
                factor *= 0.98 * limit / plan.peak  # again, lower by what it overshot
        if solver == "milp":
            return None, "; ".join(why), False
        best, bound, tries = None, None, 0
        for factor in (1.0, *tighten):
            left = share - (time.perf_counter() - t0)
            if left <= 0:
                why.append(f"LP relaxation not tried: the budget's {share:.1f} s were spent" if bound is None
                           else f"no rounding met the budget within {share:.1f} s")
                break
            lp = relax(f, mat, factor * model, left)
            progress(f"checkmate {label}: LP relaxation at {factor:g} x budget {lp.status} in {lp.seconds:.1f} s")
            if lp.status.startswith("infeasible"):
                if factor == 1.0 and milp_plan is None:
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
                r = realise(g, decision(p, chosen, g))
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
        if milp_plan is not None and (best is None or milp_plan.latency <= best.latency):
            milp_plan.stats["lp_rounding"] = ("none met the budget" if best is None else
                                              f"slower ({best.latency:.6g} s)")
            return milp_plan, None, False
        if best is not None:
            if milp_plan is not None:
                best.stats["milp_incumbent_latency"] = milp_plan.latency
            rc, lb = best.stats["recompute_seconds"], best.stats["lp_bound"]
            best.stats["gap"] = None if not lb else round((rc - lb) / lb, 6)
            best.stats["solver_seconds"] = round(time.perf_counter() - t0, 3)
            best.stats["roundings_tried"] = tries
            progress(f"checkmate {label}: LP-rounded, recompute {rc:.6f} s against the LP bound {lb:.6f} s")
            return best, None, False
        return None, "; ".join(why), False


__all__ = ["BUDGETS", "COARSE_MAX_VARS", "MAX_VARS", "MILP_MAX_VARS", "SPREAD", "THRESHOLDS", "TIGHTEN", "Checkmate",
           "Problem", "Relaxation", "Solution", "assemble", "coarse_problem", "decision", "formulate", "grouping_of", "model_peak",
           "problem", "r_given_s", "recompute_seconds", "relax", "round_s", "size", "solve"]

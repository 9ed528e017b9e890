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
exact (no optimum is cut off) but still O(n^2): HiGHS solves small graphs; a graph it does not
solve within ``time_limit`` yields a failure "not solved in time", and a feasible solution found by
then is returned with its gap (``stats["optimal"] = False``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...ir.graph import Graph, TRef
from .base import Peer, eager_peak
from .common import Failure, Inst, RematDecision, candidates, make_plan, realise, traced_order

BUDGETS = (0.95, 0.9, 0.8, 0.7)
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

    def matrix(self):
        from scipy.sparse import coo_matrix

        rows, cols, vals, lb, ub = [], [], [], [], []
        for k, (e, lo, hi) in enumerate(self.rows):
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
    model: Model
    R: dict[tuple[int, int], Lin]  # (stage, op) -> variable, for the candidates that may be recomputed
    objective: Lin
    stages: list[list[int]]  # per stage, the ops it may compute, in order (the stage's op last)


def formulate(p: Problem, budget: int) -> Formulation:
    """The MILP of the module docstring for budget bytes."""
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
    for t in range(n):
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
                uv = m.var(integer=False, upper=float(budget))
                m.eq(Lin(dict(u.c), u.k).add(uv, -1), 0.0)
                u = Lin().add(uv)
            else:
                m.le(u, budget)
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
    return Formulation(m, R, obj, stages)


@dataclass
class Solution:
    status: str  # "optimal", "feasible" (time limit, not proven), "infeasible", "not solved in time", ...
    decision: RematDecision | None
    objective: float = 0.0
    gap: float | None = None
    seconds: float = 0.0
    variables: int = 0
    constraints: int = 0


def solve(p: Problem, budget: int, time_limit: float = 60.0) -> Solution:
    """Formulate and solve; never raises for a budget it cannot meet or a time limit."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    t0 = time.perf_counter()
    try:
        f = formulate(p, budget)
    except Infeasible as e:
        return Solution(f"infeasible ({e})", None, seconds=time.perf_counter() - t0)
    m = f.model
    nv = len(m.integer)
    c = np.zeros(nv)
    for v, x in f.objective.c.items():
        c[v] = x
    a, lb, ub = m.matrix()
    left = max(1.0, time_limit - (time.perf_counter() - t0))
    res = milp(c, integrality=np.array(m.integer), bounds=Bounds(np.zeros(nv), np.array(m.upper)),
               constraints=[LinearConstraint(a, lb, ub)] if len(lb) else None,
               options={"time_limit": left, "disp": False, "mip_rel_gap": 1e-6})
    dt = time.perf_counter() - t0
    base = dict(seconds=dt, variables=nv, constraints=len(lb))
    if res.status == 2:
        return Solution("infeasible", None, **base)
    if res.x is None:
        why = "not solved in time" if res.status == 1 else f"not solved ({res.message})"
        return Solution(why, None, **base)
    x = np.round(res.x).astype(int)
    chosen = {(t, i) for (t, i), lin in f.R.items() if x[next(iter(lin.c))] == 1}
    status = "optimal" if res.status == 0 else "feasible"
    return Solution(status, decision(p, chosen), float(res.fun), res.get("mip_gap"), **base)


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

    def _run(self, g, cost, *, time_budget, progress, budgets=BUDGETS, time_limit=None, max_vars=None,
             max_nodes=None, **_):
        """``time_limit``: seconds per MILP (default: an equal share of ``time_budget`` per budget)."""
        t0 = time.perf_counter()
        time_limit = time_limit or time_budget / len(budgets)
        base = eager_peak(g, cost)
        last = getattr(self, "_problem", None)
        p = last[2] if last is not None and last[0] is g and last[1] is cost else problem(g, cost)
        self._problem = None
        plans, failures = [], []
        for b in budgets:
            label = f"budget {b:g}"
            left = min(time_limit, time_budget - (time.perf_counter() - t0))
            if left <= 0:
                failures.append(Failure(label, f"time budget {time_budget:g} s spent"))
                continue
            limit = int(b * base)
            sol = solve(p, limit, left)
            progress(f"checkmate {label}: {sol.status} in {sol.seconds:.1f} s "
                     f"({sol.variables} variables, {sol.constraints} constraints)")
            if sol.decision is None:
                reason = sol.status if sol.status != "not solved in time" else (
                    f"not solved in {left:g} s ({sol.variables} variables, {sol.constraints} constraints)")
                failures.append(Failure(label, reason))
                continue
            r = realise(g, sol.decision)
            plans.append(make_plan(self.name, label, r, cost, budget=limit, budget_fraction=b,
                                   optimal=sol.status == "optimal", mip_gap=sol.gap,
                                   solver_seconds=round(sol.seconds, 3), variables=sol.variables,
                                   constraints=sol.constraints, recompute_seconds=sol.objective))
        return plans, failures


__all__ = ["BUDGETS", "MAX_VARS", "Checkmate", "size", "Problem", "Solution", "decision", "formulate", "problem", "solve"]

"""The layer-fusion problem of GET (Mills et al., "Applying Graph Explanation to Operator Fusion", 2025).

A *partition plan* Phi splits the operators of an inference graph into *fusion groups* phi_n: disjoint,
each weakly connected, and the graph of groups a DAG (paper section II-A).  A group runs with its
intermediate tensors on chip, so its DRAM traffic is

    F_D(phi) = bytes of the tensors entering phi + bytes of the tensors leaving phi + its weights

(a tensor read by two groups is read by each; one written and read only inside phi costs nothing).
A group is valid when its on-chip buffer need F_beta(phi) < beta (Eq. 2).  The paper gives no formula
for F_beta; ours (see ``notes/get-fusion.md``), per scheme:

* **LBDF** (line-buffer depth-first): every weight of the group resident, plus per layer a line buffer
  of ``k_h * W_in * C_in * bytes`` for its input (``k_h`` the kernel height, 1 for elementwise
  ops), plus *delay lines* for skip connections: a tensor read by two or more ops of the group is held
  for as many lines as the layers between its readers consume (the sum of their ``k_h``).
* **BRR** (branch requirement reduction): weights streamed one layer at a time (one weight tile: the
  largest layer's weights) plus the largest set of simultaneously live feature-map lines over the
  group's order (a map read in the group holds ``k_h`` lines of its reader from its producer to its
  last reader, and each op also holds the line it is writing); a group holding a squeeze-excite gate (a ``mul`` by a ``[N, C, 1, 1]`` tensor computed
  in the group) is invalid (paper section II: BRR is not compatible with squeeze-and-excite).

Every term of LBDF's F_beta only grows when a weakly connected sub-group grows, so every weakly
connected sub-group of a valid LBDF group is valid (the notes' hand case 2, a property test).

``FusionProblem`` extracts the operators of a :class:`~core.ir.graph.Graph` in topological order
(position ``i`` is the label of paper section III-C), memoises F_beta and F_D per group (frozenset of
positions) and counts evaluations and cache hits.  A weight seen through a view (``aten.t`` of a
linear layer's weight) stays a weight.  Views are otherwise counted as copies, as the ops registry's
bytes of a view op's output are its logical bytes (rare in CNN graphs: the flatten before the head).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ...ir import ops
from ...ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef

SCHEMES = ("lbdf", "brr")

Group = frozenset[int]


class FusionError(ValueError):
    """A fusion problem a user caused (an unknown scheme, a buffer too small, nothing to fuse)."""


def parse_scheme(scheme: str) -> str:
    s = scheme.lower()
    if s not in SCHEMES:
        raise FusionError(f"unknown fusion scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    return s


def line_bytes(t: TensorMeta) -> int:
    """Bytes of one line of a feature map: ``N * C * W * bytes`` for an ``[N, C, H, W]`` map (one row
    over the second-last dim for rank >= 3), the whole tensor below rank 3."""
    b = int(t.numel * t.itemsize)
    if len(t.shape) >= 3 and t.shape[-2] > 0:
        return b // t.shape[-2]
    return b


def kernel_height(g: Graph, node) -> int:
    """``k_h`` of a sliding-window op: a convolution's weight height, a pool's kernel; 1 otherwise."""
    op = node.op
    if op == "aten.convolution.default" and len(node.args) > 1 and isinstance(node.args[1], TRef):
        w = g.tensor(node.args[1]).shape
        return int(w[2]) if len(w) == 4 else 1
    if "pool2d" in op and len(node.args) > 1 and isinstance(node.args[1], list | tuple) and node.args[1]:
        return int(node.args[1][0])
    return 1


@dataclass
class CacheStats:
    """Evaluations of F_beta / F_D and cache hits (the notes' hand case 4: memoisation cuts them)."""

    fb_evals: int = 0
    fb_hits: int = 0
    fd_evals: int = 0
    fd_hits: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class FusionProblem:
    """The ops of ``graph`` in topological order, their tensors and weights, under ``scheme``."""

    graph: Graph
    scheme: str = "lbdf"
    names: list[str] = field(default_factory=list)  # op names by position
    node_ids: list[int] = field(default_factory=list)  # graph node id by position
    preds: list[tuple[int, ...]] = field(default_factory=list)  # positions of producers read
    succs: list[tuple[int, ...]] = field(default_factory=list)
    reads: list[tuple[int, ...]] = field(default_factory=list)  # activation tensor ids read (distinct)
    writes: list[tuple[int, ...]] = field(default_factory=list)  # tensor ids written
    weights: list[tuple[int, ...]] = field(default_factory=list)  # weight ids read (distinct)
    kh: list[int] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)  # op class: conv, dwconv, pool, binary, reduce, ...
    tensor_bytes: list[int] = field(default_factory=list)
    tensor_line: list[int] = field(default_factory=list)
    tensor_producer: list[int] = field(default_factory=list)  # position, -1 for graph inputs
    tensor_readers: list[tuple[int, ...]] = field(default_factory=list)
    tensor_is_output: list[bool] = field(default_factory=list)
    tensor_gate: list[bool] = field(default_factory=list)  # [N, C, 1, 1]: a squeeze-excite gate shape
    weight_bytes: list[int] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    stats: CacheStats = field(default_factory=CacheStats)

    def __post_init__(self) -> None:
        self.scheme = parse_scheme(self.scheme)
        self._fb: dict[Group, float] = {}
        self._fd: dict[Group, float] = {}
        if not self.names:
            self._extract()

    # ---- extraction ---------------------------------------------------------------------------
    def _extract(self) -> None:
        g = self.graph
        order = g.topo_order()
        weight_of: dict[TRef, int] = {}  # weight tensor (or a view of one) -> weight id
        tensor_of: dict[TRef, int] = {}
        pos_of: dict[int, int] = {}

        def add_tensor(ref: TRef, producer: int) -> int:
            t = g.tensor(ref)
            tensor_of[ref] = len(self.tensor_bytes)
            self.tensor_bytes.append(int(t.numel * t.itemsize))
            self.tensor_line.append(line_bytes(t))
            self.tensor_producer.append(producer)
            self.tensor_gate.append(len(t.shape) == 4 and t.shape[2] == 1 and t.shape[3] == 1)
            return tensor_of[ref]

        for nid in order:
            n = g[nid]
            if n.kind == NodeKind.PLACEHOLDER:
                ref = TRef(nid, 0)
                if n.outputs and (n.outputs[0].kind in (TensorKind.WEIGHT,)
                                  or n.target.startswith(("param:", "buffer:"))):
                    weight_of[ref] = len(self.weight_bytes)
                    self.weight_bytes.append(int(n.outputs[0].numel * n.outputs[0].itemsize))
                else:
                    add_tensor(ref, -1)
                continue
            ins = list(dict.fromkeys(n.inputs()))
            d = ops.get(n.op)
            if ins and all(r in weight_of for r in ins) and d is not None and d.category == "view":
                for j in range(len(n.outputs)):  # a view of a weight is that weight
                    weight_of[TRef(nid, j)] = weight_of[ins[0]]
                continue
            p = len(self.names)
            pos_of[nid] = p
            self.names.append(n.name)
            self.node_ids.append(nid)
            self.weights.append(tuple(dict.fromkeys(weight_of[r] for r in ins if r in weight_of)))
            reads = []
            for r in ins:
                if r in weight_of:
                    continue
                if r not in tensor_of:  # a tensor of an op outside the problem: an input
                    add_tensor(r, -1)
                reads.append(tensor_of[r])
            self.reads.append(tuple(dict.fromkeys(reads)))
            self.writes.append(tuple(add_tensor(TRef(nid, j), p) for j in range(len(n.outputs))))
            self.kh.append(kernel_height(g, n))
            self.kind.append(_op_class(g, n))
            self.flops.append(ops.flops(ops.ctx(n, g.tensor)))
        readers: list[list[int]] = [[] for _ in self.tensor_bytes]
        for p, rs in enumerate(self.reads):
            for t in rs:
                readers[t].append(p)
        self.tensor_readers = [tuple(r) for r in readers]
        outs = {tensor_of[r] for r in g.outputs.values() if r in tensor_of}
        self.tensor_is_output = [i in outs for i in range(len(self.tensor_bytes))]
        self.preds = [tuple(sorted({self.tensor_producer[t] for t in rs if self.tensor_producer[t] >= 0}))
                      for rs in self.reads]
        succ: list[set[int]] = [set() for _ in self.names]
        for v, ps in enumerate(self.preds):
            for u in ps:
                succ[u].add(v)
        self.succs = [tuple(sorted(s)) for s in succ]

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.names)

    def edges(self) -> list[tuple[int, int]]:
        return [(u, v) for v, ps in enumerate(self.preds) for u in ps]

    def group_weights(self, group: Iterable[int]) -> int:
        return sum(self.weight_bytes[w] for w in {w for v in group for w in self.weights[v]})

    def layer_line(self, v: int) -> int:
        """The line buffer of layer ``v``: ``k_h`` lines of its first input, one of each other."""
        rs = self.reads[v]
        if not rs:
            return 0
        return self.kh[v] * self.tensor_line[rs[0]] + sum(self.tensor_line[t] for t in rs[1:])

    # ---- F_D ---------------------------------------------------------------------------------
    def dram(self, group: Group) -> float:
        """F_D(group): bytes entering + bytes leaving + weights (memoised)."""
        v = self._fd.get(group)
        if v is not None:
            self.stats.fd_hits += 1
            return v
        self.stats.fd_evals += 1
        v = float(self._dram(group))
        self._fd[group] = v
        return v

    def _dram(self, group: Group) -> int:
        tb = self.tensor_bytes
        entering = {t for v in group for t in self.reads[v] if self.tensor_producer[t] not in group}
        leaving = {t for v in group for t in self.writes[v]
                   if self.tensor_is_output[t] or any(r not in group for r in self.tensor_readers[t])}
        return sum(tb[t] for t in entering) + sum(tb[t] for t in leaving) + self.group_weights(group)

    def internal_bytes(self, group: Group) -> int:
        """Bytes of the tensors produced in ``group`` that never leave it."""
        return sum(self.tensor_bytes[t] for v in group for t in self.writes[v]
                   if self.tensor_readers[t] and not self.tensor_is_output[t]
                   and all(r in group for r in self.tensor_readers[t]))

    # ---- F_beta ------------------------------------------------------------------------------
    def buffer(self, group: Group) -> float:
        """F_beta(group) under the problem's scheme (memoised)."""
        v = self._fb.get(group)
        if v is not None:
            self.stats.fb_hits += 1
            return v
        self.stats.fb_evals += 1
        v = float(self._lbdf(group) if self.scheme == "lbdf" else self._brr(group))
        self._fb[group] = v
        return v

    def valid(self, group: Group, beta: float) -> bool:
        return self.buffer(group) < beta

    def _lbdf(self, group: Group) -> int:
        total = self.group_weights(group) + sum(self.layer_line(v) for v in group)
        for t, ins in self._shared_reads(group).items():
            total += self.tensor_line[t] * sum(self.kh[v] for v in self._between(group, ins))
        return total

    def _shared_reads(self, group: Group) -> dict[int, list[int]]:
        """Tensors read by two or more ops of ``group`` -> those readers."""
        seen: dict[int, list[int]] = {}
        for v in group:
            for t in self.reads[v]:
                seen.setdefault(t, []).append(v)
        return {t: rs for t, rs in seen.items() if len(rs) > 1}

    def _between(self, group: Group, readers: list[int]) -> set[int]:
        """Ops of ``group`` reached (inside the group) from a reader and strictly upstream of a
        reader: the layers a skip connection's delay line must cover."""
        rs = set(readers)
        down = self._reach(group, rs, self.succs)
        up = self._reach(group, {p for r in rs for p in self.preds[r] if p in group}, self.preds)
        return down & up

    @staticmethod
    def _reach(group: Group, start: set[int], nbrs: Sequence[tuple[int, ...]]) -> set[int]:
        seen = set(start)
        stack = list(start)
        while stack:
            v = stack.pop()
            for w in nbrs[v]:
                if w in group and w not in seen:
                    seen.add(w)
                    stack.append(w)
        return seen

    def _brr(self, group: Group) -> float:
        if self.has_gate(group):
            return math.inf
        order = sorted(group)
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        k: dict[int, int] = {}
        for i, v in enumerate(order):
            for t in self.reads[v]:
                p = self.tensor_producer[t]
                first.setdefault(t, order.index(p) if p in group else i)
                last[t] = i
                k[t] = max(k.get(t, 1), self.kh[v])
        peak = 0
        for i, v in enumerate(order):
            live = sum(self.tensor_line[t] * k[t] for t in first if first[t] <= i <= last[t])
            live += sum(self.tensor_line[t] for t in self.writes[v])  # the line being written
            peak = max(peak, live)
        tile = max((sum(self.weight_bytes[w] for w in self.weights[v]) for v in group), default=0)
        return peak + tile

    def has_gate(self, group: Group) -> bool:
        """A squeeze-excite gate inside ``group``: a ``mul`` whose ``[N, C, 1, 1]`` operand is computed
        in the group."""
        for v in group:
            if self.kind[v] == "binary" and self.names and "mul" in self.graph[self.node_ids[v]].op:
                if any(self.tensor_gate[t] and self.tensor_producer[t] in group for t in self.reads[v]):
                    return True
        return False

    # ---- groups -----------------------------------------------------------------------------
    def components(self, nodes: Iterable[int]) -> list[Group]:
        """Weakly connected components of ``nodes`` (edges inside the set), ordered by first position."""
        left = set(nodes)
        out: list[Group] = []
        for s in sorted(left):
            if s not in left:
                continue
            comp = {s}
            stack = [s]
            left.discard(s)
            while stack:
                v = stack.pop()
                for w in self.preds[v] + self.succs[v]:
                    if w in left:
                        left.discard(w)
                        comp.add(w)
                        stack.append(w)
            out.append(frozenset(comp))
        out.sort(key=min)
        return out

    def unfusable(self, beta: float) -> list[int]:
        """Positions whose one-op group is invalid: unfixable by any split (filtered out beforehand)."""
        return [v for v in range(self.n) if not self.valid(frozenset((v,)), beta)]

    def trivial(self) -> list[Group]:
        return [frozenset((v,)) for v in range(self.n)]

    def total_dram(self, groups: Iterable[Group]) -> float:
        return sum(self.dram(gr) for gr in groups)


def _op_class(g: Graph, n) -> str:
    op = n.op
    if op == "aten.convolution.default":
        groups = n.args[8] if len(n.args) > 8 and isinstance(n.args[8], int) else 1
        return "dwconv" if groups > 1 else "conv"
    if "pool" in op:
        return "pool"
    if op.startswith(("aten.add.", "aten.mul.", "aten.sub.", "aten.div.")) and \
            sum(isinstance(a, TRef) for a in n.args) >= 2:
        return "binary"
    if op.startswith(("aten.mean.", "aten.sum.", "aten.amax.")):
        return "reduce"
    d = ops.get(op)
    if d is None:
        return "other"
    if d.category == "matmul":
        return "matmul"
    if d.category == "elementwise":
        return "elementwise"
    if d.category == "view":
        return "view"
    return "other"


OP_CLASSES = ("conv", "dwconv", "pool", "binary", "reduce", "matmul", "elementwise", "view", "other")


def check_plan(problem: FusionProblem, groups: Sequence[Group]) -> list[str]:
    """What is wrong with a partition plan (empty when it is one): every op in exactly one group,
    every group weakly connected, the group graph a DAG (paper section II-A)."""
    errors: list[str] = []
    gid = [-1] * problem.n
    for i, gr in enumerate(groups):
        for v in gr:
            if gid[v] != -1:
                errors.append(f"op {problem.names[v]} is in two groups")
            gid[v] = i
        if len(problem.components(gr)) != 1:
            errors.append(f"group {i} is not weakly connected")
    missing = [problem.names[v] for v in range(problem.n) if gid[v] == -1]
    if missing:
        errors.append(f"ops in no group: {', '.join(missing[:5])}")
        return errors
    out: list[set[int]] = [set() for _ in groups]
    indeg = [0] * len(groups)
    for u, v in problem.edges():
        a, b = gid[u], gid[v]
        if a != b and b not in out[a]:
            out[a].add(b)
            indeg[b] += 1
    ready = [i for i in range(len(groups)) if indeg[i] == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for j in out[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if seen != len(groups):
        errors.append("the group graph has a cycle")
    return errors

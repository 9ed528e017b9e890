"""The D-Graph (MAGIS section 4.1) and the validity of a split (section 4.2).

A D-Graph node is a dimension of an op's output, ``(node id, output, dim)``, or a reduce axis of the
op's computation for that output (``dim = -k``: the k-th reduce axis).  The ops registry's dim
links (``ir.ops.dim_links``) are its edges; a connected component is a graph-level dimension that a
sub-graph can be split along (the batch running through a whole training step, the heads of an
attention block, the channels between two convolutions ...).

:func:`plan_split` checks an F-Trans f = (S, D, n) -- S a set of ops, D a component -- against the
paper's constraints and returns how it splits: which inputs of S are sliced along which dim and
which are shared, and whether each output of S is concatenated (its dim in D) or summed (a reduce
axis in D, e.g. weight gradients along the batch).  The constraints, checked in order:

* every op of S is a compute op whose dims the registry knows (with rescalable arguments), and it
  draws no random numbers;
* G[S] is weakly connected and convex (no path leaves S and comes back); an original in S with a
  recomputed copy outside S is fine (``fission.apply_split`` makes that copy the original first);
* no redundant computation: each output of each op in S has exactly one D-node in D, and every edge
  of G[S] is a D-edge between those nodes (to at least one output of its reader); an input from outside S is either sliced along the one dim
  its reader links into D, or read whole (shared);
* a reduce axis leaves S only as an output combined by summing (a partial sum is never read inside S),
  and an op whose output is summed over the parts adds no shared bias;
* a mean loss (``ir.ops.MEAN_LOSSES``) is summed by the parts and divided once after them; its
  backward divides by the full count (the total weight, computed before the parts, or n times the
  part's element count); a ``ones_like`` of the loss (the backward's seed) is rebuilt without
  reading the loss, so the loss and its backward can share one sub-graph.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..errors import SplitError
from ..ir import ops
from ..ir.graph import Graph, NodeKind, TRef, kahn_order, map_refs

Key = tuple[int, int, int]  # (node id, output index, dim >= 0 | -reduce axis)


class DGraph:
    """The D-Graph of ``g`` as a union-find over its D-nodes, plus each op's dim links."""

    def __init__(self, g: Graph, nodes: Iterable[int] | None = None, routing: bool = False) -> None:
        """The D-Graph of all of ``g``, or of the links of ``nodes`` alone (a sub-graph S: what
        ``plan_split`` needs, in time proportional to S).  ``routing``: with the row-routing links
        of micro-batching (``ir.ops_routing``; ``plan_split(routing=True)`` checks them)."""
        self.g = g
        self.parent: dict[Key, Key] = {}
        self.links: dict[int, list[ops.DimLink]] = {}
        self.unknown: set[int] = set()  # ops without dim links (they block fission)
        self.routing = routing
        if routing:
            from . import routing as rt

            found = rt.positional(g)
        for n in (g.nodes.values() if nodes is None else (g.nodes[v] for v in nodes)):
            if n.kind == NodeKind.OP:
                links = rt.links(g, n, found) if routing else ops.dim_links(ops.ctx(n, g.tensor))
            elif n.kind in (NodeKind.STORE, NodeKind.LOAD):
                links = [ops.DimLink(0, d, 0, d) for d, s in enumerate(n.outputs[0].shape) if s > 1]
            elif n.kind == NodeKind.FISSION and n.fission is not None:
                links = fission_links(g, n)
            else:
                continue
            if links is None:
                self.unknown.add(n.id)
                continue
            self.links[n.id] = links
            ins = n.inputs()
            for lk in links:
                r = ins[lk.input]
                self._union((r.node, r.index, lk.in_dim), (n.id, lk.output, lk.out_dim))
        self.node_keys: dict[int, list[Key]] = {}
        for k in self.parent:
            self.node_keys.setdefault(k[0], []).append(k)

    def _find(self, k: Key) -> Key:
        p = self.parent.setdefault(k, k)
        while p != k:
            gp = self.parent[p]
            self.parent[k] = gp
            k, p = p, gp
        return k

    def _union(self, a: Key, b: Key) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def component(self, key: Key) -> Key:
        """The representative D-node of ``key``'s component."""
        return self._find(key) if key in self.parent else key

    def keys(self, nid: int, comp: Key) -> list[Key]:
        """The D-nodes of op ``nid`` in component ``comp``."""
        return [k for k in self.node_keys.get(nid, ()) if self._find(k) == comp]

    def components(self) -> dict[Key, set[int]]:
        """Component -> the ops with a D-node in it (components spanning at least two ops)."""
        out: dict[Key, set[int]] = {}
        for k in self.parent:
            out.setdefault(self._find(k), set()).add(k[0])
        return {c: v for c, v in out.items() if len(v) > 1}

    def describe(self, comp: Key) -> str:
        """A readable name of a component: a tensor dim of its representative."""
        nid, j, d = comp
        node = self.g.nodes[nid]
        shape = list(node.outputs[j].shape) if j < len(node.outputs) else []
        return (f"dim {d} of {node.name} {shape}" if d >= 0 else f"reduce axis {-d} of {node.name}")


@dataclass
class Split:
    """A valid F-Trans f = (S, D, n) before it is applied: how S's inputs and outputs split."""

    nodes: list[int]  # S, in the graph's node order
    comp: Key  # D
    length: int  # the common divisor of the split dims' sizes (a reshape merges the batch of 32 with a
    # sequence of 512 into 16384: split into n parts, both are split into n contiguous parts)
    out_dims: dict[TRef, int]  # every tensor of S -> its dim in D (< 0: a reduce axis, partial sums)
    inputs: list[TRef] = field(default_factory=list)  # tensors S reads from outside, first use first
    in_dims: list[int | None] = field(default_factory=list)  # sliced along / None: shared
    outputs: list[TRef] = field(default_factory=list)  # tensors of S read outside S (or graph outputs)
    combine: list[tuple[str, int | None]] = field(default_factory=list)  # ("cat", dim) / ("sum", None)
    # mean losses (ir.ops.MEAN_LOSSES): each part sums, the sum is divided after the parts
    mean_losses: list[int] = field(default_factory=list)
    tw_from: dict[int, int] = field(default_factory=dict)  # nll backward -> the nll forward of its total weight
    scale_grad: list[int] = field(default_factory=list)  # mse backward (mean): grad_output / n per part
    decouple: list[int] = field(default_factory=list)  # ones_like & co. outside S reading S: made input-free
    # mean nll loss -> the ops of S that compute its target (label shifting, -100 padding), in order:
    # run again at full size before the parts, they give the total weight of the whole split dim
    target_ops: dict[int, list[int]] = field(default_factory=dict)
    # planned with micro-batching's options (``plan_split``'s random_per_part and routing): applied by
    # ``transform.microbatch.MicroBatchFission``, not by the exact ``Fission``
    micro_batch: bool = False

    def divisors(self) -> list[int]:
        """The fission numbers n > 1 that divide the split dim."""
        return [k for k in range(2, self.length + 1) if self.length % k == 0]


SIZE_FROM_ARGS = ("aten.new_zeros.default", "aten.new_ones.default", "aten.new_empty.default",
                  "aten.new_full.default")  # their output's size is an argument (rescaled), not their input's
VALUE_FREE = ops.VALUE_FREE


def fission_links(g: Graph, node) -> list[ops.DimLink]:
    """The dim links of a FISSION node of ``g``: input k's dim d and output j's dim e (or reduce
    axis -e) are linked when their D-nodes are connected through the ops it replaced (at full size:
    at part size a dim of size 1 links like a broadcast one), else through its sub-graph.  This is
    what lets an F-Trans contain an enabled one (nested fission)."""
    spec = node.fission
    cached = getattr(spec, "_dim_links", None)
    if cached is not None:
        return cached
    o = spec.origin
    if o is not None:
        sub = Graph("origin")  # the replaced ops at full size, reading placeholders
        ref: dict[TRef, TRef] = {}
        base = 1 + max(v.id for v in o.nodes)
        for k, (r, now) in enumerate(zip(o.inputs, node.args, strict=False)):
            ph = sub.add_node(id=base + k, name=f"input_{k}", op="placeholder", kind=NodeKind.PLACEHOLDER,
                              outputs=[g.tensor(now)])
            ref[r] = TRef(ph.id, 0)
        replaced = set(o.split)  # S; the value-free readers it rebuilt link no dims between S's inputs and outputs
        for v in o.nodes:
            if v.id not in replaced:
                continue
            c = v.copy()
            c.args, c.kwargs = map_refs(c.args, lambda x: ref.get(x, x)), map_refs(c.kwargs, lambda x: ref.get(x, x))
            sub.add_node(c, check=False)
        phs = [sub.nodes[ref[r].node] for r in o.inputs]
        outs = list(o.outputs)
    else:
        sub = spec.graph
        phs = sub.placeholders()
        outs = list(sub.outputs.values())
    dg = DGraph(sub)
    comp_in: dict[Key, list[tuple[int, int]]] = {}
    for k, ph in enumerate(phs):
        for d in range(len(ph.outputs[0].shape)):
            key = (ph.id, 0, d)
            if key in dg.parent:
                comp_in.setdefault(dg.component(key), []).append((k, d))
    links = []
    for j, r in enumerate(outs):
        for key in dg.node_keys.get(r.node, ()):
            if key[1] == r.index:
                for k, d in comp_in.get(dg.component(key), ()):
                    links.append(ops.DimLink(k, d, j, key[2]))
    spec._dim_links = links
    return links


def _broadcasts_along(g: Graph, n, d: int) -> bool:
    """``n`` is an ``expand`` whose output dim ``d`` is broadcast (a new leading dim, or one of size 1
    in its input): its size argument sets it (``ops.rescale_args``), whatever its input."""
    if n.op != "aten.expand.default" or not n.inputs():
        return False
    src, out = g.tensor(n.inputs()[0]).shape, n.outputs[0].shape
    off = len(out) - len(src)
    return d < off or (src[d - off] == 1 and out[d] != 1)


def _zeros(g: Graph, r: TRef) -> bool:
    """``r`` is a fresh tensor of zeros (``new_zeros``, ``zeros_like``, ``zeros``, a ``full`` of 0): a
    bias that adds nothing, however many parts add it."""
    n = g.nodes[r.node]
    if n.kind != NodeKind.OP or n.outputs[r.index].alias is not None:
        return False
    if n.op in ("aten.new_zeros.default", "aten.zeros_like.default", "aten.zeros.default"):
        return True
    fill = {"aten.full.default": 1, "aten.new_full.default": 2, "aten.full_like.default": 1}.get(n.op)
    return fill is not None and len(n.args) > fill and n.args[fill] == 0


def value_free(g: Graph, v: int) -> bool:
    """An op whose output depends only on its input's shape (F-Trans rebuilds it input-free)."""
    n = g.nodes[v]
    return n.kind == NodeKind.OP and n.op in VALUE_FREE


def _path_back(g: Graph, s: set[int], rank: Mapping[int, int] | None = None,
               anywhere: bool = False) -> tuple[int | None, set[int]]:
    """Whether a path from S through nodes outside S comes back into S: (the first node outside S
    on such a path, or None when G[S] is convex; the value-free ops outside S that cut the paths
    from S).  A value-free op reading S cuts a path (F-Trans rebuilds it input-free:
    ``Split.decouple``); with ``anywhere`` (micro-batching's splits), one further along cuts it too:
    the backward's seed ``ones_like(loss / n)`` waits for no value of S.  (MAGIS's F-Trans keeps
    the first rule: the plans it made replay onto the same graph.)  With ``rank`` (a topological
    index of every node) the walk stops past S's last node: a path back into S runs through
    ancestors of S only."""
    last = max(rank[v] for v in s) if rank is not None else None
    cuts: set[int] = set()
    origin: dict[int, int] = {}  # node outside S -> the first node outside S on the path to it
    frontier: deque[int] = deque()
    for v in s:
        for u in g.users(v):
            if u in s or u in origin or (last is not None and rank[u] > last):
                continue
            if value_free(g, u):
                cuts.add(u)
                continue
            origin[u] = u
            frontier.append(u)
    while frontier:
        v = frontier.popleft()
        for u in g.users(v):
            if last is not None and rank[u] > last:
                continue
            if u in s:
                return origin[v], cuts
            if u in origin:
                continue
            if anywhere and value_free(g, u):
                cuts.add(u)
                continue
            origin[u] = origin[v]
            frontier.append(u)
    return None, cuts


def _total_weight_input(n) -> int | None:
    """The index in ``n.inputs()`` of an nll backward's total weight (argument 6), if it is a tensor."""
    tw = n.args[6] if len(n.args) > 6 else n.kwargs.get("total_weight")
    return n.inputs().index(tw) if isinstance(tw, TRef) and tw in n.inputs() else None


def _connected(g: Graph, s: set[int]) -> bool:
    start = next(iter(s))
    seen = {start}
    stack = [start]
    while stack:
        v = stack.pop()
        for u in list(g.users(v)) + list(g.preds(v)):
            if u in s and u not in seen:
                seen.add(u)
                stack.append(u)
    return len(seen) == len(s)


def topological(g: Graph, s: set[int]) -> list[int]:
    """S in a topological order of G[S], smaller ids first among ready nodes (the traced order for
    imported ops; nodes a rule restored or added need not sit in order in ``g.nodes``)."""
    return kahn_order(g, s)


def plan_split(g: Graph, dg: DGraph, nodes: Iterable[int], comp: Key,
               rank: Mapping[int, int] | None = None, order: list[int] | None = None, *,
               random_per_part: bool = False, routing: bool = False, seed_cuts: bool = False) -> Split:
    """The split of S = ``nodes`` along component ``comp`` (SplitError naming the broken rule);
    ``rank``: a topological index of ``g``'s nodes, when the caller has one (a faster check);
    ``order``: the order in which one part runs S (a topological order of G[S]; default
    :func:`topological`).

    Options of micro-batching (gradient accumulation, ``search.peers.microbatch``), never of
    MAGIS's F-Trans: ``seed_cuts`` rebuilds every value-free op on a path back into S (the seed of a
    loss divided after it), ``random_per_part`` lets random ops into S, each part drawing its own numbers
    at part size (as each micro-batch of a training loop does: the plan computes another draw than
    the imported graph); ``routing`` checks the row-routing links of ``dg`` (``DGraph(routing=True)``,
    ``analysis.routing``): a mixture of experts routes each part's tokens by itself."""
    s = set(nodes)
    if not s:
        raise SplitError("the sub-graph is empty")
    if any(v not in g.nodes for v in s):
        raise SplitError("the sub-graph names nodes the graph does not have")
    if order is None:
        order = topological(g, s)
    else:
        order = list(order)
        pos = {v: i for i, v in enumerate(order)}
        if set(order) != s or len(order) != len(s):
            raise SplitError("the part's order does not list the sub-graph's nodes once each")
        for v in order:
            for p in g.preds(v):
                if p in pos and pos[p] > pos[v]:
                    raise SplitError(f"the part's order runs {g.nodes[v].name!r} before its input "
                                     f"{g.nodes[p].name!r}")
    comp = dg.component(comp)
    out_dims: dict[TRef, int] = {}
    for v in order:
        n = g.nodes[v]
        if n.kind not in (NodeKind.OP, NodeKind.FISSION):
            raise SplitError(f"{n.name!r} is a {n.kind.value} node, not a compute op")
        if v in dg.unknown:
            raise SplitError(f"{n.name!r} ({n.op}) has no dim links in the ops registry")
        if ops.node_draws_random(n) and not random_per_part:
            raise SplitError(f"{n.name!r} draws random numbers")
        if n.kind == NodeKind.OP and not n.inputs() and not routing:
            raise SplitError(f"{n.name!r} ({n.op}) makes its values from nothing: a part would make the first "
                             f"part's values")
        mine = dg.keys(v, comp)
        for j in range(len(n.outputs)):
            ks = [k for k in mine if k[1] == j]
            if len(ks) != 1:
                raise SplitError(f"output {j} of {n.name!r} has {len(ks)} dims in the split dimension "
                                 f"(needs exactly one)")
            out_dims[TRef(v, j)] = ks[0][2]
        if n.kind == NodeKind.OP and n.inputs() and not value_free(g, v):
            own = dg.links.get(v, [])
            for j in range(len(n.outputs)):  # the split reaches each output through v's own links
                if _broadcasts_along(g, n, out_dims[TRef(v, j)]):
                    continue  # an expand's new or size-1 dim: each part expands to its own size
                if not any(lk.output == j and lk.out_dim == out_dims[TRef(v, j)] for lk in own):
                    raise SplitError(f"output {j} of {n.name!r} is in the split dimension only through "
                                     f"its readers: {n.op} does not split along it")
    if not _connected(g, s):
        raise SplitError("the sub-graph is not weakly connected")
    away, cuts = _path_back(g, s, rank, anywhere=seed_cuts)
    if away is not None:
        raise SplitError(f"the sub-graph is not convex: a path leaves it through {g.nodes[away].name!r} "
                         f"({g.nodes[away].op}) and comes back")
    length = 0
    in_dims: dict[TRef, int | None] = {}
    inputs: list[TRef] = []
    mean_losses, tw_from, scale_grad = [], {}, []
    target_ops: dict[int, list[int]] = {}
    for v in order:
        n = g.nodes[v]
        red = ops.reduction_of(n)
        if n.op in ops.MEAN_LOSSES and red == 1:
            if n.op != "aten.mse_loss.default" and len(n.args) > 2 and n.args[2] is not None:
                raise SplitError(f"{n.name!r}: a mean loss with class weights is not split")
            if n.op != "aten.mse_loss.default":
                target_ops[v] = _target_ops(g, n, s, order)
            mean_losses.append(v)
        elif n.op in ops.MEAN_LOSS_GRADS and red == 1:
            if n.op == "aten.mse_loss_backward.default":
                scale_grad.append(v)
            else:
                tw = n.args[6] if len(n.args) > 6 else None
                if isinstance(tw, TRef) and tw.node in s:
                    if g.nodes[tw.node].op not in ops.MEAN_LOSSES:
                        raise SplitError(f"{n.name!r}: its total weight is computed inside the sub-graph")
                    tw_from[v] = tw.node
    partial_reads: list[tuple[int, int]] = []  # routing: checked by ``routing.check``
    for v in order:
        n = g.nodes[v]
        links = dg.links[v]
        for i, r in enumerate(n.inputs()):
            if r.node in s:
                dr = out_dims[r]
                if v in tw_from and r == TRef(tw_from[v], 1):
                    continue  # the full total weight replaces it (computed before the parts)
                if n.op in ops.MEAN_LOSS_GRADS and ops.reduction_of(n) != 1 and i == _total_weight_input(n):
                    continue  # a sum (or none) reduction's backward never reads its total weight
                if n.op in SIZE_FROM_ARGS:
                    continue  # new_zeros & co. read their input's dtype and device, not its shape
                if dr < 0 and routing:
                    partial_reads.append((v, i))
                elif dr < 0:
                    raise SplitError(f"{n.name!r} reads a partial sum of {g.nodes[r.node].name!r} inside "
                                     f"the sub-graph")
                if not any(lk.input == i and lk.in_dim == dr and lk.out_dim == out_dims[TRef(v, lk.output)]
                           for lk in links):
                    raise SplitError(f"edge {g.nodes[r.node].name!r} -> {n.name!r} does not follow the "
                                     f"split dimension")
                continue
            dims = {lk.in_dim for lk in links if lk.input == i
                    and lk.out_dim == out_dims[TRef(v, lk.output)]}
            if len(dims) > 1:
                raise SplitError(f"{n.name!r} links several dims of {g.nodes[r.node].name!r} to the split")
            d = next(iter(dims)) if dims else None
            if d is not None:  # every output of v must follow the sliced dim
                for j in range(len(n.outputs)):
                    if not any(lk.input == i and lk.in_dim == d and lk.output == j
                               and lk.out_dim == out_dims[TRef(v, j)] for lk in links):
                        raise SplitError(f"{n.name!r}: output {j} does not follow the sliced input "
                                         f"{g.nodes[r.node].name!r}")
                length = math.gcd(length, g.tensor(r).shape[d])
            if r in in_dims:
                if in_dims[r] != d:
                    raise SplitError(f"{g.nodes[r.node].name!r} is sliced by one reader and shared by another")
            else:
                in_dims[r] = d
                inputs.append(r)
    for v in order:  # kernels that read their inputs as contiguous memory: no strided slice
        n = g.nodes[v]
        if n.op not in ops.CONTIGUOUS_INPUTS:
            continue
        for r in n.inputs():
            d = in_dims.get(r) if r.node not in s else out_dims[r] if g.tensor(r).alias is not None else None
            if d is not None and d > 0 and any(x > 1 for x in g.tensor(r).shape[:d]):
                raise SplitError(f"{n.name!r} ({n.op}) needs contiguous inputs; a part of "
                                 f"{g.nodes[r.node].name!r} along dim {d} is strided")
    for v in order:  # a bias shared by the parts of a summed output would be added n times
        bias = ops.added_once(g.nodes[v])
        if bias is not None and bias.node not in s and in_dims.get(bias) is None and not _zeros(g, bias) \
                and any(out_dims[r] < 0 for r in g.nodes[v].refs()):
            raise SplitError(f"{g.nodes[v].name!r}: its bias would be added once per part of a summed output")
    if routing:
        from .routing import check

        length = math.gcd(length, check(g, order, s, out_dims, in_dims, dg.links, partial_reads))
    for r, d in out_dims.items():
        if d >= 0:
            length = math.gcd(length, g.tensor(r).shape[d])
    if length < 2:
        raise SplitError("the split dims have no common divisor above 1")
    graph_outs = g.output_refs()
    outputs, combine = [], []
    for v in order:
        for j in range(len(g.nodes[v].outputs)):
            r = TRef(v, j)
            outside = any(u not in s for u in g.readers(r)) or r in graph_outs
            if not outside:
                continue
            d = out_dims[r]
            outputs.append(r)
            combine.append(("cat", d) if d >= 0 else ("sum", None))
    if not outputs:
        raise SplitError("the sub-graph has no output")
    # argument rescaling must be known for every op (checked at n = 2 shapes by fission.apply)
    for v in order:
        n = g.nodes[v]
        if n.kind == NodeKind.FISSION:  # its sub-graph is rescaled when the split is applied
            continue
        full = [g.tensor(r) for r in n.inputs()]
        split_in = [out_dims.get(r) if r.node in s else in_dims.get(r) for r in n.inputs()]
        if ops.rescale_args(n, full, n.outputs, split_in) is None:
            raise SplitError(f"{n.name!r} ({n.op}): the registry does not know how its arguments "
                             f"change when the split dim shrinks")
    decouple = sorted(cuts | {u for v in order for u in g.users(v) if u not in s and value_free(g, u)})
    # a D-node of S names the component in any D-Graph of S (an op's, which outlives nested fission)
    first = next((v for v in order if g.nodes[v].kind == NodeKind.OP), order[0])
    local = dg.keys(first, comp)[0]
    return Split(order, local, length, out_dims, inputs, [in_dims[r] for r in inputs], outputs, combine,
                 mean_losses, tw_from, scale_grad, decouple, target_ops)


def _target_ops(g: Graph, loss, s: set[int], order: list[int]) -> list[int]:
    """The ops of S that compute the target of mean nll loss ``loss`` (in ``order``): the labels
    shifted, padded with ``ignore_index`` or masked inside the training step, as causal LMs do.  The
    F-Trans runs them once more at full size before the parts to count the targets of the whole split
    dim (the loss's total weight).  Only integer label arithmetic is run again: a target computed from
    floating-point values (from activations: the whole forward) or from random draws is refused."""
    cone: set[int] = set()
    work = [loss.args[1]] if isinstance(loss.args[1], TRef) else []
    while work:
        r = work.pop()
        if r.node not in s or r.node in cone:
            continue
        n = g.nodes[r.node]
        if n.kind != NodeKind.OP or ops.node_draws_random(n) \
                or any(t.dtype.startswith(("float", "bfloat", "complex")) for t in n.outputs):
            raise SplitError(f"{loss.name!r}: its target is computed inside the sub-graph from "
                             f"{'random draws' if ops.node_draws_random(n) else 'floating-point values'} "
                             f"({n.name!r})")
        cone.add(r.node)
        work.extend(n.inputs())
    return [v for v in order if v in cone]


__all__ = ["DGraph", "Key", "Split", "SplitError", "plan_split", "topological"]

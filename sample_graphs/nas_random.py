"""Random NASNet-like graphs and local rewrites for the incremental-scheduling experiment (MAGIS
section 7.3: "10 randomly generated DNNs with structures resembling NASNet", 10 rounds of TASO-style
transformations each).

``random_nasnet(seed)`` builds, with :class:`core.ir.builder.GraphBuilder` (sizes in bytes of fp32
feature maps), a stem and a few cells; each cell squeezes its two inputs (the two previous cell
outputs), computes B blocks -- each the sum of two random ops (separable conv chains, pooling,
identity) applied to random earlier states of the cell -- and concatenates the blocks no other block
used.  After every ``normal`` normal cells comes a reduction (half the resolution, twice the
channels).

``local_rewrite(g, rng)`` applies one random local transformation and returns (new graph, mutated
node ids): the ids of the nodes it created or whose inputs it changed.
"""

from __future__ import annotations

import random

from core.ir.builder import GraphBuilder
from core.ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef

OPS = ["sep3", "sep5", "pool", "pool", "id", "conv"]


def random_nasnet(seed: int, cells: int = 4, blocks: int = 4, channels: int = 16, hw: int = 16,
                  normal: int = 1) -> Graph:
    """A random NASNet-like inference graph (see module docstring): ``cells`` cells where every
    ``normal + 1``-th one is a reduction cell (NASNet: N normal cells between reductions)."""
    rng = random.Random(seed)
    b = GraphBuilder(f"nasnet_like_{seed}")
    c = channels
    size = lambda ch, res: ch * res * res * 4  # noqa: E731
    x = b.input("x", size(3, 2 * hw))
    stem = b.op("stem", [x], size(c, hw))
    prev, cur = stem, stem
    res = hw
    k = 0

    def op(name: str, ins: list[TRef], nbytes: int) -> TRef:
        nonlocal k
        k += 1
        return b.op(f"{name}_{k}", ins, nbytes)

    for ci in range(cells):
        reduction = ci % (normal + 1) == normal
        out_res = res // 2 if reduction else res
        c_out = 2 * c if reduction else c
        s = size(c_out, out_res)
        s_in = size(c_out, res)
        states = [op("pre0", [op("relu", [prev], size(c, res) if ci else size(c, res))], s_in),
                  op("pre1", [op("relu", [cur], size(c, res))], s_in)]
        used: set[int] = set()
        for _ in range(blocks):
            terms = []
            for _ in range(2):
                j = rng.randrange(len(states))
                used.add(j)
                src = states[j]
                stride = reduction and j < 2
                kind = rng.choice(OPS)
                if kind == "id" and not stride:
                    terms.append(src)
                    continue
                if kind == "pool" or kind == "id":
                    terms.append(op("pool", [src], s))
                elif kind == "conv":
                    terms.append(op("conv", [op("relu", [src], s_in if stride else s)], s))
                else:
                    reps = 2 if kind == "sep5" else 1
                    t = src
                    for r in range(reps):
                        t = op("relu", [t], s_in if (stride and r == 0) else s)
                        t = op("dw", [t], s)
                        t = op("pw", [t], s)
                    terms.append(t)
            states.append(op("add", terms, s))
        outs = [st for j, st in enumerate(states) if j >= 2 and j not in used] or [states[-1]]
        cat = op("concat", outs, s * len(outs)) if len(outs) > 1 else outs[0]
        prev, cur = cur, cat
        res, c = out_res, c_out
    b.op("head", [op("pool", [cur], size(c, 1))], 40, output=True)
    return b.graph


def _fresh(g: Graph, name: str, inputs: list[TRef], nbytes: int) -> TRef:
    n = g.add_node(name=f"{name}_{g.new_id()}", op="synthetic", args=list(inputs),
                   outputs=[TensorMeta((nbytes,), "uint8", TensorKind.ACTIVATION)])
    return TRef(n.id, 0)


def _replace_uses(g: Graph, old: TRef, new: TRef, only: set[int] | None = None) -> set[int]:
    return set(g.replace_all_uses_with(old, new, only=only))


def local_rewrite(g: Graph, rng: random.Random, focus: set[int] | None = None) -> tuple[Graph, set[int]]:
    """One random TASO-style local transformation of a copy of ``g``: (new graph, mutated ids).
    With ``focus`` (e.g. the producers of the memory hot-spots, as MAGIS picks rewrite sites), the
    rewritten op is taken from it half of the time."""
    g = g.copy()
    ops = [n for n in g.nodes.values() if n.kind != NodeKind.PLACEHOLDER and len(n.outputs) == 1]
    hot = [n for n in ops if focus and n.id in focus]
    kinds = ["split", "insert", "split_merge", "fuse"]
    for _ in range(20):
        kind = rng.choice(kinds)
        v = rng.choice(hot) if hot and rng.random() < 0.5 else rng.choice(ops)
        out = TRef(v.id, 0)
        nbytes = v.out.nbytes
        if kind == "split":  # v -> (v, v2): an op becomes two chained ops (e.g. expand + project)
            v.outputs[0] = TensorMeta((max(1, int(nbytes * rng.choice([0.5, 1, 2, 4]))),), "uint8",
                                      TensorKind.ACTIVATION)
            v2 = _fresh(g, "split", [out], nbytes)
            changed = _replace_uses(g, out, v2)
            return g, changed | {v2.node}
        if kind == "insert":  # a new op on one edge v -> u
            users = g.users(v.id)
            if not users:
                continue
            u = rng.choice(users)
            x = _fresh(g, "insert", [out], max(1, nbytes // rng.choice([1, 2, 4])))
            changed = _replace_uses(g, out, x, only={u})
            return g, changed | {x.node}
        if kind == "split_merge":  # v -> two half ops on v's inputs + concat
            if not v.inputs():
                continue
            a = _fresh(g, "half", list(v.inputs()), max(1, nbytes // 2))
            bb = _fresh(g, "half", list(v.inputs()), max(1, nbytes - nbytes // 2))
            cat = _fresh(g, "merge", [a, bb], nbytes)
            changed = _replace_uses(g, out, cat)
            g.erase_node(v.id)
            return g, changed | {a.node, bb.node, cat.node}
        if kind == "fuse":  # v -> w with w v's only user and v w's only input: one op
            users = g.users(v.id)
            if len(users) != 1:
                continue
            w = g.nodes[users[0]]
            if [r.node for r in w.inputs()] != [v.id] or len(w.outputs) != 1 or out in g.outputs.values():
                continue
            f = _fresh(g, "fused", list(v.inputs()), w.out.nbytes)
            changed = _replace_uses(g, TRef(w.id, 0), f)
            g.erase_node(w.id)
            g.erase_node(v.id)
            return g, changed | {f.node}
    raise RuntimeError("no rewrite applied")


__all__ = ["local_rewrite", "random_nasnet"]

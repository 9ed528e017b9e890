"""Random graphs with every node kind the memory semantics knows: views, multi-output ops, graph
inputs and weights, STORE/LOAD swaps, recomputed copies and FISSION nodes (shared by the property
tests)."""

from __future__ import annotations

import random

from core.ir.graph import FissionSpec, Graph, NodeKind, TensorKind, TensorMeta, TRef


def _meta(size: int, kind: TensorKind = TensorKind.ACTIVATION, **kw) -> TensorMeta:
    return TensorMeta((size,), "uint8", kind, **kw)


def _part_graph(size: int, rng: random.Random) -> Graph:
    sub = Graph("part")
    x = sub.add_node(name="x", op="placeholder", kind=NodeKind.PLACEHOLDER, outputs=[_meta(size)])
    cur = TRef(x.id)
    for k in range(rng.randint(1, 3)):
        n = sub.add_node(name=f"p{k}", op="synthetic", args=[cur], outputs=[_meta(size * rng.randint(1, 3))])
        cur = TRef(n.id)
    out = sub.add_node(name="pout", op="synthetic", args=[cur], outputs=[_meta(size)])
    sub.set_output("out", TRef(out.id))
    return sub


def random_graph(seed: int, n_ops: int = 18, copies: bool = True) -> Graph:
    """A random DAG of ``n_ops`` op nodes (plus swaps, recomputes and fissions) on 1-d uint8 tensors
    of even sizes."""
    rng = random.Random(seed)
    g = Graph(f"rand{seed}")
    tensors: list[TRef] = []  # device tensors ops may read
    for i in range(rng.randint(1, 2)):
        n = g.add_node(name=f"in{i}", op="placeholder", kind=NodeKind.PLACEHOLDER,
                       outputs=[_meta(2 * rng.randint(1, 8), TensorKind.INPUT)], target=f"input:{i}")
        tensors.append(TRef(n.id))
    for i in range(rng.randint(1, 2)):
        n = g.add_node(name=f"w{i}", op="placeholder", kind=NodeKind.PLACEHOLDER,
                       outputs=[_meta(2 * rng.randint(1, 8), TensorKind.WEIGHT)], target=f"param:w{i}")
        tensors.append(TRef(n.id))
    ops: list[int] = []
    for k in range(n_ops):
        roll = rng.random()
        src = rng.sample(tensors, min(len(tensors), rng.randint(1, 2)))
        if roll < 0.12 and copies:  # swap a tensor out and back in
            t = rng.choice([r for r in tensors if g[r.node].kind != NodeKind.PLACEHOLDER] or tensors)
            size = g.tensor(t).shape[0]
            st = g.add_node(name=f"store{k}", op="store", kind=NodeKind.STORE, args=[t],
                            outputs=[_meta(size, device="host")])
            ld = g.add_node(name=f"load{k}", op="load", kind=NodeKind.LOAD, args=[TRef(st.id)],
                            outputs=[_meta(size)])
            tensors.append(TRef(ld.id))
            ops += [st.id, ld.id]
        elif roll < 0.22 and ops:  # a recomputed copy of an earlier op
            src_op = g[rng.choice(ops)]
            if src_op.kind != NodeKind.OP or any(t.alias is not None for t in src_op.outputs):
                continue
            n = g.add_node(name=f"rc{k}", op=src_op.op, args=list(src_op.args), recompute_of=src_op.id,
                           outputs=[TensorMeta(t.shape, t.dtype, t.kind) for t in src_op.outputs])
            tensors.extend(n.refs())
            ops.append(n.id)
        elif roll < 0.32:  # a fission node over one tensor, split in two along dim 0
            x = src[0]
            size = g.tensor(x).shape[0]
            if size % 2:
                continue
            sub = _part_graph(size // 2, rng)
            n = g.add_node(name=f"fis{k}", op="fission", kind=NodeKind.FISSION, args=[x],
                           outputs=[_meta(size)], fission=FissionSpec(sub, 2, [0], [("cat", 0)]))
            tensors.append(TRef(n.id))
            ops.append(n.id)
        elif roll < 0.45:  # a view of its first input
            t = g.tensor(src[0])
            n = g.add_node(name=f"v{k}", op="synthetic", args=src, outputs=[
                TensorMeta(t.shape, t.dtype, TensorKind.ACTIVATION, alias=src[0])])
            tensors.append(TRef(n.id))
            ops.append(n.id)
        elif roll < 0.55:  # two outputs
            n = g.add_node(name=f"m{k}", op="synthetic", args=src,
                           outputs=[_meta(2 * rng.randint(1, 8)), _meta(2 * rng.randint(1, 4))])
            tensors.extend(n.refs())
            ops.append(n.id)
        else:
            n = g.add_node(name=f"o{k}", op="synthetic", args=src, outputs=[_meta(2 * rng.randint(1, 16))])
            tensors.append(TRef(n.id))
            ops.append(n.id)
    outs = [r for r in tensors if g[r.node].kind not in (NodeKind.PLACEHOLDER,)]
    g.set_output("out", outs[-1])
    if len(outs) > 3:
        g.set_output("extra", rng.choice(outs[:-1]))
    return g


def random_order(g: Graph, seed: int) -> list[int]:
    """A random topological order of ``g``'s ops."""
    rng = random.Random(seed)
    indeg = {n.id: len(g.preds(n.id)) for n in g}
    ready = [i for i, d in indeg.items() if d == 0]
    out: list[int] = []
    while ready:
        i = ready.pop(rng.randrange(len(ready)))
        if g[i].kind != NodeKind.PLACEHOLDER:
            out.append(i)
        for u in g.users(i):
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    return out

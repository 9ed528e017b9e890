"""Brute-force check of an op's registry entry: run the op on real tensors, then for every component
of its dim links (the D-Graph of the op alone) run it on slices along the linked dims, with the
arguments the registry rescales for one part, and compare the parts -- concatenated along a split
dim, summed over a reduce axis -- with the full result."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from core.ir import ops
from core.ir.graph import Graph, NodeKind, TensorKind, TensorMeta, TRef
from core.ir.torch_bridge import materialize, resolve_op


@dataclass
class Checked:
    """One component: the input dims it slices, each output's dim (< 0: summed) and the n used."""

    inputs: dict[int, int]
    outputs: dict[int, int]
    n: int


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _as_list(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def build_node(op: str, args: list[Any], kwargs: dict[str, Any] | None = None):
    """A graph of ``op`` on placeholders for every tensor in ``args`` / ``kwargs`` (nested lists
    too), with output metas from running it; returns (graph, node, {TRef: tensor}, outputs)."""
    kwargs = kwargs or {}
    g = Graph("bruteforce", {"mode": "eval"})
    values: dict[TRef, torch.Tensor] = {}

    def ref(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            n = g.add_node(name=f"i{len(values)}", op="placeholder", kind=NodeKind.PLACEHOLDER,
                           outputs=[TensorMeta(tuple(x.shape), _dtype(x), TensorKind.INPUT)],
                           target=f"input:{len(values)}")
            r = TRef(n.id, 0)
            values[r] = x
            return r
        if isinstance(x, list):
            return [ref(y) for y in x]
        return x

    rargs = [ref(a) for a in args]
    rkwargs = {k: ref(v) for k, v in kwargs.items()}
    full = [t for t in _as_list(resolve_op(op)(*args, **kwargs))]
    metas = [TensorMeta(tuple(t.shape), _dtype(t)) for t in full]
    node = g.add_node(name="op", op=op, args=rargs, kwargs=rkwargs, outputs=metas)
    for j, a in enumerate(ops.output_aliases(op, len(metas))):
        if a is not None and isinstance(rargs[a], TRef):
            metas[j].alias = rargs[a]
    return g, node, values, full


def components(links: list[ops.DimLink]) -> list[set[tuple[str, int, int]]]:
    parent: dict[tuple[str, int, int], tuple[str, int, int]] = {}

    def find(k):
        parent.setdefault(k, k)
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for lk in links:
        a, b = find(("i", lk.input, lk.in_dim)), find(("o", lk.output, lk.out_dim))
        if a != b:
            parent[a] = b
    out: dict[tuple, set] = {}
    for k in list(parent):
        out.setdefault(find(k), set()).add(k)
    return list(out.values())


def check_op(op: str, args: list[Any], kwargs: dict[str, Any] | None = None, n: int | None = None,
             rtol: float = 1e-7, atol: float = 1e-9) -> list[Checked]:
    """Every component of ``op``'s dim links in which each output has exactly one dim (a valid split)
    checked against the full op at ``n`` parts (default: the smallest divisor of the split dims);
    returns what was checked.  AssertionError on any mismatch."""
    g, node, values, full = build_node(op, args, kwargs)
    c = ops.ctx(node, g.tensor)
    links = ops.dim_links(c)
    assert links is not None, f"{op}: no dim links"
    ins = node.inputs()
    checked = []
    for comp in components(links):
        in_dims = {i: d for k, i, d in comp if k == "i"}
        out_dims = {j: d for k, j, d in comp if k == "o"}
        if len(in_dims) != len({(k, i) for k, i, _ in comp if k == "i"}):
            continue  # one input linked by two dims: plan_split refuses it
        if len({j for k, j, _ in comp if k == "o"}) != len(node.outputs) or \
                len(out_dims) != len([k for k in comp if k[0] == "o"]):
            continue  # an output outside the component (or twice in it): not a split
        sizes = [c.ins[i].shape[d] for i, d in in_dims.items()] + \
                [node.outputs[j].shape[d] for j, d in out_dims.items() if d >= 0]
        length = math.gcd(*sizes)
        parts = n if n is not None and length % n == 0 else next(k for k in range(2, length + 1) if length % k == 0)
        full_ins = [g.tensor(r) for r in ins]
        in_split = [in_dims.get(i) for i in range(len(ins))]
        part_outs = []
        for j, t in enumerate(node.outputs):
            p = TensorMeta(tuple(s // parts if d == out_dims[j] else s for d, s in enumerate(t.shape)), t.dtype)
            part_outs.append(p)
        new = ops.rescale_args(node, full_ins, part_outs, in_split)
        assert new is not None, f"{op}: arguments cannot be rescaled"
        pargs, pkwargs = new
        results: list[list[torch.Tensor]] = []
        for p in range(parts):
            def part(r: TRef, p=p, in_dims=in_dims, parts=parts) -> torch.Tensor:
                i = ins.index(r)
                x = values[r]
                d = in_dims.get(i)
                if d is None:
                    return x
                w = x.shape[d] // parts
                part = x.narrow(d, p * w, w)  # what a fission loop passes: a view
                # kernels that need contiguous inputs get them (plan_split refuses a strided slice
                # of an outside input; inside a sub-graph their inputs are fresh tensors)
                return part.contiguous() if op in ops.CONTIGUOUS_INPUTS else part
            a = materialize(pargs, part, "cpu")
            kw = materialize(pkwargs, part, "cpu")
            results.append(_as_list(resolve_op(op)(*a, **kw)))
        for j, ref in enumerate(full):
            d = out_dims[j]
            got = torch.cat([r[j] for r in results], d) if d >= 0 else sum(r[j] for r in results)
            torch.testing.assert_close(got, ref, rtol=rtol, atol=atol,
                                       msg=lambda m, j=j, d=d, s=dict(in_dims): f"{op} output {j} split on {d} ({s}): {m}")
        checked.append(Checked(in_dims, out_dims, parts))
    return checked

"""Orders of a DAG: reverse post-order (RPO), the baseline every memory-aware scheduler must beat.

A DFS over *predecessors* from the sinks emits a node once all of its inputs are emitted, so each
node runs right after the last of its inputs -- the RPO of the reversed graph, which is how the
MAGIS and HMCOS papers' "RPO" baseline schedules a graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def reverse_post_order(preds: Mapping[int, Sequence[int]] | Sequence[Sequence[int]],
                       roots: Iterable[int]) -> list[int]:
    """Post-order of a DFS over predecessors from each of ``roots`` in turn: every node reachable
    backwards from the roots, each right after the last of its inputs.

    ``preds[v]`` lists v's predecessors; they are visited in that order and roots in the order
    given, which fixes every tie (callers pass both sorted, so the order is deterministic)."""
    done: set[int] = set()
    out: list[int] = []
    for root in roots:
        stack = [(root, 0)]
        while stack:
            v, k = stack.pop()
            if v in done:
                continue
            ps = preds[v]
            while k < len(ps) and ps[k] in done:
                k += 1
            if k < len(ps):
                stack.append((v, k + 1))
                stack.append((ps[k], 0))
            else:
                done.add(v)
                out.append(v)
    return out


__all__ = ["reverse_post_order"]

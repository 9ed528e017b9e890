"""Collapse-by-module views of a graph (pure, no dash).

Every node belongs to a *group path*: its dotted module path split into parts
(``"encoder.layer.3.attention"`` -> ``("encoder", "layer", "3", "attention")``).  A training graph is
split first by phase, so the forward and the backward pass are two top-level groups (``"fwd"`` /
``"bwd"``) holding the module hierarchy each: collapsed, that reads as a DAG (forward down, backward
up) instead of one group per layer with edges both ways.

A *view* is the set of expanded group paths.  A node is drawn as itself when every prefix of its path
is expanded, otherwise as the shortest collapsed prefix (a group super-node with counts).  Views start
with as many shallow groups expanded as fit a node budget, so a ~10k-node graph opens with tens of
elements and grows one level per click -- never thousands of elements at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from core.ir.graph import Graph, Node, NodeKind, TensorKind

Path = tuple[str, ...]
ROOT: Path = ()
PHASE_LABELS = {"fwd": "forward", "bwd": "backward"}
OTHER = "~ops"  # synthetic child holding a group's own ops when it also has sub-modules
MAX_LOOSE = 4  # a group with sub-modules shows at most this many own ops loose, else bundles them
CHUNK = 60  # a group never shows more than this many nodes at once: bigger ones split into runs
CHUNK_PREFIX = "#"  # synthetic child "#3": the third run of CHUNK nodes (traced order)
BACKWARD_KINDS = (TensorKind.GRADIENT, TensorKind.OPTIMIZER_STATE)


def phase_of(node: Node) -> str:
    """"bwd" for an op producing gradients or optimizer state, else "fwd" (placeholders included)."""
    if node.kind != NodeKind.PLACEHOLDER and any(t.kind in BACKWARD_KINDS for t in node.outputs):
        return "bwd"
    return "fwd"


@dataclass
class Group:
    path: Path
    children: list[Path] = field(default_factory=list)  # child groups, in traced order of first member
    nodes: list[int] = field(default_factory=list)  # direct members, in traced order
    size: int = 0  # nodes in the whole subtree (placeholders included)
    ops: int = 0  # non-placeholder nodes in the subtree
    first: int = 0  # traced position of the first member (orders siblings)


Key = tuple[str, object]  # ("n", node id) or ("g", group path)


class ModuleTree:
    def __init__(self, g: Graph, split_phases: bool | None = None) -> None:
        phases = {n.id: phase_of(n) for n in g}
        self.split = (len(set(phases.values())) > 1) if split_phases is None else split_phases
        self.path_of: dict[int, Path] = {}
        self.groups: dict[Path, Group] = {ROOT: Group(ROOT)}
        for pos, n in enumerate(g):
            parts = tuple(p for p in n.module.split(".") if p)
            path = ((phases[n.id],) if self.split else ()) + parts
            self.path_of[n.id] = path
            is_op = n.kind != NodeKind.PLACEHOLDER
            for k in range(len(path) + 1):
                pre = path[:k]
                grp = self.groups.get(pre)
                if grp is None:
                    grp = self.groups[pre] = Group(pre, first=pos)
                    self.groups[pre[:-1]].children.append(pre)
                grp.size += 1
                grp.ops += is_op
            self.groups[path].nodes.append(n.id)
        # bundle the own ops of mixed groups (e.g. module-less ops at the top level of the backward
        # pass) into one synthetic child, so expanding a group never spills dozens of loose nodes
        pos = {nid: i for i, nid in enumerate(g.nodes)}
        for path, grp in list(self.groups.items()):
            if grp.children and len(grp.nodes) > MAX_LOOSE:
                sub = path + (OTHER,)
                other = Group(sub, nodes=grp.nodes, size=len(grp.nodes),
                              ops=sum(g[i].kind != NodeKind.PLACEHOLDER for i in grp.nodes),
                              first=pos[grp.nodes[0]])
                self.groups[sub] = other
                grp.children.append(sub)
                grp.children.sort(key=lambda q: self.groups[q].first)
                grp.nodes = []
                for nid in other.nodes:
                    self.path_of[nid] = sub
        # split huge flat groups (e.g. thousands of module-less backward ops) into runs
        for path, grp in list(self.groups.items()):
            if len(grp.nodes) > CHUNK:
                self._chunk(path, grp, pos, g)

    def _chunk(self, path: Path, grp: Group, pos: dict[int, int], g: Graph) -> None:
        nodes, grp.nodes = grp.nodes, []
        width = CHUNK
        while len(nodes) > width * CHUNK:  # keep the number of runs per level small too
            width *= CHUNK
        for k in range(0, len(nodes), width):
            part = nodes[k:k + width]
            sub = path + (f"{CHUNK_PREFIX}{k // width + 1}",)
            child = Group(sub, nodes=part, size=len(part),
                          ops=sum(g[i].kind != NodeKind.PLACEHOLDER for i in part), first=pos[part[0]])
            self.groups[sub] = child
            grp.children.append(sub)
            for nid in part:
                self.path_of[nid] = sub
            if len(part) > CHUNK:
                self._chunk(sub, child, pos, g)
        grp.children.sort(key=lambda q: self.groups[q].first)

    # ---- structure -----------------------------------------------------------------------------
    def members(self, path: Path) -> list[int]:
        """All node ids in the subtree of ``path`` (traced order within each group)."""
        out: list[int] = []
        stack = [path]
        while stack:
            p = stack.pop()
            grp = self.groups[p]
            out.extend(grp.nodes)
            stack.extend(reversed(grp.children))
        return out

    def is_chain(self, path: Path) -> bool:
        """A group with one child group and no direct nodes (drawn without its own box)."""
        grp = self.groups[path]
        return len(grp.children) == 1 and not grp.nodes

    def phase(self, path: Path) -> str:
        return path[0] if self.split and path else "fwd"

    def label(self, path: Path, keep: int = 3) -> str:
        """A short name: the last ``keep`` module parts ("layer.3.attention"), "∇ " for backward."""
        if path and path[-1].startswith(CHUNK_PREFIX):
            run = path[-1][len(CHUNK_PREFIX):]
            return f"{self.label(path[:-1], keep)} [{run}/{len(self.groups[path[:-1]].children)}]"
        mod = list(path[1:] if self.split else path)
        prefix = "∇ " if self.split and path and path[0] == "bwd" else ""
        own = bool(mod) and mod[-1] == OTHER
        if own:
            mod = mod[:-1]
        if not mod:
            text = (PHASE_LABELS.get(path[0], path[0]) if self.split and path else "top level")
            if own:
                text = ("top level" if self.split else text) + " ops"
            return (prefix if own else "") + text
        parts = mod[-keep:]
        if parts[0].isdigit() and len(mod) > len(parts):
            parts = mod[-keep - 1:]  # "layer.3" rather than "3"
        return prefix + ".".join(parts) + (" ops" if own else "")

    def full_name(self, path: Path) -> str:
        if path and path[-1].startswith(CHUNK_PREFIX):
            return f"{self.full_name(path[:-1])}, part {path[-1][len(CHUNK_PREFIX):]}"
        if path and path[-1] == OTHER:
            return self.full_name(path[:-1]) + " (own ops)"
        if self.split and path:
            mod = ".".join(path[1:])
            return f"{PHASE_LABELS.get(path[0], path[0])}: {mod or '(top level)'}"
        return ".".join(path) or "(top level)"

    # ---- views ---------------------------------------------------------------------------------
    def visible(self, expanded: set[Path]) -> dict[int, Key]:
        """Node id -> the element that draws it under the view ``expanded``."""
        cache: dict[Path, Key | None] = {}
        out: dict[int, Key] = {}
        for nid, path in self.path_of.items():
            hit = cache.get(path, 0)
            if hit == 0:
                hit = None
                for k in range(1, len(path) + 1):
                    if path[:k] not in expanded:
                        hit = ("g", path[:k])
                        break
                cache[path] = hit
            out[nid] = hit if hit is not None else ("n", nid)
        return out

    def count_visible(self, expanded: set[Path]) -> int:
        return len(set(self.visible(expanded).values()))

    def expand(self, expanded: Iterable[Path], path: Path) -> set[Path]:
        """``expanded`` plus ``path`` and the chain of single-child groups below it."""
        out = set(expanded)
        out.add(path)
        while self.is_chain(path):
            path = self.groups[path].children[0]
            out.add(path)
        return out

    def collapse(self, expanded: Iterable[Path], path: Path) -> set[Path]:
        """``expanded`` without ``path`` and everything below it (and without the chain above it)."""
        out = {p for p in expanded if p[: len(path)] != path}
        # a chain group above has no other content: collapsing the inner box collapses it as well
        up = path[:-1]
        while up and self.is_chain(up) and up in out:
            out.discard(up)
            up = up[:-1]
        return out

    def reveal(self, expanded: Iterable[Path], nid: int) -> set[Path]:
        """``expanded`` plus every prefix of ``nid``'s path, so the node itself is drawn."""
        out = set(expanded)
        path = self.path_of[nid]
        for k in range(1, len(path) + 1):
            out.add(path[:k])
        return out

    def initial_expanded(self, budget: int = 150) -> set[Path]:
        """Expand groups breadth-first (shallow first, traced order) while the view stays within
        ``budget`` elements.  Leaf modules stay collapsed: the first view shows module structure, a
        click shows a module's ops."""
        expanded: set[Path] = set()
        root = self.groups[ROOT]
        count = len(root.children) + len(root.nodes)
        frontier = list(root.children)
        while frontier:
            nxt: list[Path] = []
            for p in sorted(frontier, key=lambda q: self.groups[q].first):
                grp = self.groups[p]
                if not grp.children:
                    continue
                grown = count - 1 + len(grp.children) + len(grp.nodes)
                if grown <= budget or (self.is_chain(p) and grown <= budget + 1):
                    expanded.add(p)
                    count = grown
                    nxt.extend(grp.children)
            frontier = nxt
        return expanded

    def collapsible(self, expanded: Iterable[Path]) -> list[Path]:
        """Expanded groups worth a "collapse" control: not chain links (collapsing the inner end of a
        chain collapses it), deepest paths last."""
        exp = set(expanded)
        out = [p for p in exp if p and not self.is_chain(p)]
        return sorted(out, key=lambda p: (self.groups[p].first, len(p)))

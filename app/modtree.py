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
# the opening view must fit its panel (about 900 x 580 px) at a zoom that keeps labels readable (>= 0.78:
# 12-unit op labels >= 9 px): at most this much room in model units, as a layered (dagre) layout takes it
VIEW_W, VIEW_H = 1100, 700
RANK_H = 40 + 26  # a group box's height plus the layout's rank separation
GROUP_CHAR_W = 0.6 * 13  # a group label character (13-unit font); labels are clipped to 24 characters
NODE_SEP = 14
WIDTH_SLACK = 2.5  # the layout's width over the widest rank's elements side by side (measured: 1.1-2.4x;
# edges that skip ranks take room in the ranks between, and the ranks are not packed)


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
        self._edges = [(p, n.id) for n in g for p in g.preds(n.id)]  # for the size of a view's layout
        self._initial: dict[int, set[Path]] = {}
        self._pos = {nid: i for i, nid in enumerate(g.nodes)}
        self._names = [(n.id, n.name.lower(), n.op.lower()) for n in g]
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

    def extent(self, expanded: set[Path]) -> tuple[float, float]:
        """About the (width, height) in model units of a layered top-down layout of the view: ranks by
        the longest path of the collapsed graph (backward-pass edges reversed, as drawn), each rank as
        wide as its elements side by side."""
        vis = self.visible(expanded)
        succ: dict = {}
        indeg: dict = {k: 0 for k in set(vis.values())}
        for a, b in self._edges:
            ka, kb = vis[a], vis[b]
            if ka == kb:
                continue
            if self._phase_of(ka) == "bwd" and self._phase_of(kb) == "bwd":
                ka, kb = kb, ka
            s = succ.setdefault(ka, set())
            if kb not in s:
                s.add(kb)
                indeg[kb] += 1
        # drop the back edges of a depth-first walk in traced order (the collapsed graph has cycles:
        # a module's own ops feed its sub-modules and read their outputs), as the layout breaks them
        first = {k: (self.groups[k[1]].first if k[0] == "g" else self._pos[k[1]]) for k in indeg}
        state: dict = {}
        for root in sorted(indeg, key=first.get):
            if root in state:
                continue
            state[root] = 1
            stack = [(root, iter(sorted(succ.get(root, ()), key=first.get)))]
            while stack:
                k, it = stack[-1]
                c = next(it, None)
                if c is None:
                    state[k] = 2
                    stack.pop()
                elif c not in state:
                    state[c] = 1
                    stack.append((c, iter(sorted(succ.get(c, ()), key=first.get))))
                elif state[c] == 1:  # a back edge
                    succ[k].discard(c)
                    indeg[c] -= 1
        indeg_in = dict(indeg)
        rank = {k: 0 for k, d in indeg.items() if d == 0}
        todo = list(rank)
        while todo:
            k = todo.pop()
            for c in succ.get(k, ()):
                rank[c] = max(rank.get(c, 0), rank[k] + 1)
                indeg[c] -= 1
                if indeg[c] == 0:
                    todo.append(c)
        for k in sorted(rank, key=rank.get, reverse=True):  # a source sits right above its first use
            if indeg_in.get(k, 0) == 0 and succ.get(k):
                rank[k] = min(rank[c] for c in succ[k]) - 1
        widths: dict[int, float] = {}
        for k in indeg:
            r = rank.get(k, 0)
            widths[r] = widths.get(r, 0.0) + self._width(k) + NODE_SEP
        return max(widths.values(), default=0.0), (max(widths) - min(widths) + 1) * RANK_H if widths else 0.0

    def _phase_of(self, key: Key) -> str:
        return self.phase(self.path_of[key[1]] if key[0] == "n" else key[1])

    def _width(self, key: Key) -> float:
        if key[0] == "n":
            return 90.0  # an op box with its label under it (clipped to 14 characters)
        path = key[1]
        grp = self.groups[path]
        count = len(f"{grp.ops or grp.size} ops · 000.0 KiB")
        return max(64.0, GROUP_CHAR_W * max(min(len(self.label(path)), 24), count) + 12)

    def fits(self, expanded: set[Path]) -> bool:
        w, h = self.extent(expanded)
        return w * WIDTH_SLACK <= VIEW_W and h <= VIEW_H

    def initial_expanded(self, budget: int = 150) -> set[Path]:
        """Expand groups breadth-first (shallow first, traced order) while the view stays within
        ``budget`` elements and its layout fits the panel at a readable zoom (``fits``).  Leaf modules
        stay collapsed: the first view shows module structure, a click shows a module's ops."""
        if budget not in self._initial:
            self._initial[budget] = self._initial_expanded(budget)
        return set(self._initial[budget])

    def _initial_expanded(self, budget: int) -> set[Path]:
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
                    if grown > 4 and not self.is_chain(p) and not self.fits(expanded | {p}):
                        continue
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

    # ---- search ----------------------------------------------------------------------------------
    def module_name(self, path: Path) -> str:
        """The dotted module name of a group path ("" for synthetic runs / own-ops groups)."""
        if path and (path[-1] == OTHER or path[-1].startswith(CHUNK_PREFIX)):
            return ""
        return ".".join(path[1:] if self.split else path)

    def find(self, query: str) -> tuple[Key | None, int]:
        """The first match of ``query`` (case-insensitive) and how many there are: a node or tensor
        ("name" or "name[1]", an output of node "name") by name, else a module (a group path, forward
        pass first) by dotted name, else a node by op.  Exact matches first (a node before a module),
        then prefixes, then substrings (a module before a node); ties in traced order."""
        q = query.strip().lower()
        if q.endswith("]") and "[" in q:
            q = q[:q.rindex("[")]
        if not q:
            return None, 0
        mods = [(p, self.module_name(p).lower()) for p in self.groups if p]
        mods = [(p, m) for p, m in sorted(mods, key=lambda pm: (self.phase(pm[0]) != "fwd", self.groups[pm[0]].first))
                if m]
        for level, test in enumerate((lambda s: s == q, lambda s: s.startswith(q), lambda s: q in s)):
            nodes = [nid for nid, name, _op in self._names if test(name)]
            found = [p for p, m in mods if test(m)]
            if nodes and (not level or not found):  # an exact node name first, else modules first
                return ("n", nodes[0]), len(nodes)
            if found:
                return ("g", found[0]), len({m for p, m in mods if test(m)})
        ops = [nid for nid, _name, op in self._names if q in op]
        return (("n", ops[0]), len(ops)) if ops else (None, 0)

    def show_group(self, expanded: Iterable[Path], path: Path) -> set[Path]:
        """``expanded`` with group ``path`` drawn as a box: its ancestors expanded, itself collapsed."""
        out = self.collapse(expanded, path)
        for k in range(1, len(path)):
            out.add(path[:k])
        return out

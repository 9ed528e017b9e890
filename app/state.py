"""Server-side cache of loaded graphs and their analyses, keyed by (graph id, schedule[, device]).

The browser only ever holds a graph *id* ("sample:bert_tiny", "upload:3f2a9c0d1e4b"); graphs,
schedules, simulations and dominator trees live here.  Schedulers run on a small thread pool with a
time budget, so a slow strategy on a big graph never blocks a callback: callers wait a little and get
``None`` (still running) otherwise.  Uploaded bytes are only ever parsed as JSON by
``core.ir.io.loads`` -- never unpickled, imported or executed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import inspect
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from core.analysis.dominators import DominatorTree, dominator_tree
from core.analysis.lifetimes import MemoryProfile, Storage
from core.cost import DEFAULT_PROFILE, DEVICES, AnalyticCost
from core.ir import io
from core.ir.graph import Graph, GraphError, NodeKind, TRef
from core.schedule import SCHEDULERS, Schedule
from core.simulate import SimResult, simulate

from .errors import AppError, wait_result
from .modtree import ModuleTree
from .plan_store import PlanStore

log = logging.getLogger("magis.app")
MAX_UPLOAD_BYTES = io.DEFAULT_LIMITS.max_bytes  # a gzip file inflates to at most the same again
MAX_UPLOADS = 2  # uploaded graphs kept in memory: a new upload releases the oldest
EXCLUDED_SCHEDULES = {"brute"}  # exhaustive: hopeless beyond toy graphs
FIRST_SCHEDULES = ["traced", "rpo"]
FULL_SIZE = {"resnet50", "bert_base", "vit_base", "unet", "unetpp", "gpt_neo_1_3b", "btlm_3b"}
def forward_sample_names() -> list[str]:
    """The inference samples with a committed forward graph (the CNNs of layer fusion:
    ``sample_graphs.FORWARD_NAMES`` whose ``<name>.forward.json.gz`` is there)."""
    import sample_graphs

    return [n for n in sample_graphs.FORWARD_NAMES if n not in sample_graphs.NAMES
            and sample_graph_path(n, "forward").exists()]


def sample_names() -> list[str]:
    """Every sample: the small ones first, then the paper-size workloads, then the forward samples."""
    import sample_graphs

    return sorted(sample_graphs.NAMES, key=lambda n: (n in FULL_SIZE, n)) + forward_sample_names()


def sample_mode(name: str) -> str:
    """The graph a sample opens with: "forward" for the inference samples, else its training graph."""
    import sample_graphs

    return "forward" if name in sample_graphs.FORWARD_NAMES and name not in sample_graphs.NAMES else "train"


def sample_graph_path(name: str, mode: str = "train") -> Path:
    from sample_graphs.store import graph_path

    return graph_path(name, mode)


def sample_file_exists(name: str) -> bool:
    return sample_graph_path(name, sample_mode(name)).exists()


def load_sample(name: str) -> Graph:
    """A sample's committed graph file (a forward sample's forward graph), or (slow, imports torch)
    a capture when there is none."""
    mode = sample_mode(name)
    p = sample_graph_path(name, mode)
    if p is not None and p.exists():
        return io.load(p)
    from sample_graphs.store import load_sample_graph

    return load_sample_graph(name, mode)


def decode_upload(contents: str) -> bytes:
    """The bytes of a ``dcc.Upload`` data URL ("data:<mime>;base64,<data>")."""
    if not isinstance(contents, str) or "," not in contents:
        raise GraphError("the upload is empty")
    head, _, data = contents.partition(",")
    if ";base64" not in head:
        raise GraphError("the upload is not base64-encoded")
    if len(data) * 3 // 4 > MAX_UPLOAD_BYTES:
        raise GraphError(f"the file is larger than {MAX_UPLOAD_BYTES // 2**20} MiB")
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError) as e:
        raise GraphError(f"the upload is not valid base64 ({e})") from None


@dataclass
class GraphEntry:
    gid: str
    label: str
    graph: Graph
    tok: str  # short token prefixed to cytoscape ids, unique per loaded graph
    tree: ModuleTree
    out_bytes: dict[int, int]
    seconds: float = 0.0  # load time
    _dom: DominatorTree | None = None
    dom_error: str | None = None
    _dom_done: bool = False
    _dom_children: dict[int, list[int]] | None = None
    _dom_sizes: dict[int, int] | None = None
    _path_table: dict | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def dom(self) -> DominatorTree | None:
        with self._lock:
            if not self._dom_done:
                try:
                    self._dom = dominator_tree(self.graph)
                except (ValueError, KeyError, GraphError) as e:
                    self.dom_error = f"no dominator tree: {e}"
                self._dom_done = True
        return self._dom

    def path_table(self) -> dict:
        """``cyto.path_table`` of the module tree, built once (sent on every switch to this graph)."""
        if self._path_table is None:
            from .cyto import path_table

            self._path_table = path_table(self.tree)
        return self._path_table

    def dom_children(self) -> dict[int, list[int]]:
        if self._dom_children is None:
            dt = self.dom()
            self._dom_children = dt.children() if dt is not None else {}
        return self._dom_children

    def dom_sizes(self) -> dict[int, int]:
        """Subtree size of every node of the dominator tree (itself included)."""
        if self._dom_sizes is None:
            dt = self.dom()
            sizes: dict[int, int] = {}
            if dt is not None:
                ch = self.dom_children()
                order, stack = [], [dt.entry]
                while stack:
                    v = stack.pop()
                    order.append(v)
                    stack.extend(ch.get(v, []))
                for v in reversed(order):
                    sizes[v] = 1 + sum(sizes[c] for c in ch.get(v, []))
            self._dom_sizes = sizes
        return self._dom_sizes


@dataclass
class Analysis:
    """One schedule of one graph simulated on one device."""

    gid: str
    schedule: Schedule
    sim: SimResult
    device: str
    step_of: dict[int, int] = field(default_factory=dict)
    storage_of: dict[TRef, Storage] = field(default_factory=dict)
    hot: list[Storage] = field(default_factory=list)  # tensors alive at the peak, largest first
    hot_nodes: set[int] = field(default_factory=set)  # producers of the non-resident hot-spots
    hot_roots: set[TRef] = field(default_factory=set)
    hot_bytes: dict[int, int] = field(default_factory=dict)  # node id -> its bytes alive at the peak
    _live: object = None  # figures.LiveIndex, built on first use
    _hover: dict = field(default_factory=dict)  # max_points -> figures.Hover

    def live_index(self):
        from .figures import LiveIndex

        if self._live is None:
            self._live = LiveIndex.of(self.sim.memory)
        return self._live

    def hover(self, g: Graph, max_points: int):
        """Hover data of the drawn (downsampled) steps, built once per analysis."""
        from .figures import downsample_indices, hover_data

        h = self._hover.get(max_points)
        if h is None:
            steps = downsample_indices(self.sim.memory.step_bytes, max_points).tolist()
            h = self._hover[max_points] = hover_data(g, self.sim.memory, steps, self.live_index())
        return h

    @property
    def profile(self) -> MemoryProfile:
        return self.sim.memory

    @property
    def name(self) -> str:
        return self.schedule.name


def _bytes_by_node(hot: list[Storage]) -> dict[int, int]:
    out: dict[int, int] = {}
    for s in hot:
        if s.alloc >= 0:
            out[s.root.node] = out.get(s.root.node, 0) + s.nbytes
    return out


class AppState:
    """``time_budget`` caps a scheduler's search; a graph gets ``budget_per_node`` seconds per node
    within [``min_budget``, ``time_budget``], so the work a file can cause scales with its size."""

    def __init__(self, time_budget: float = 5.0, max_graphs: int = 6, workers: int = 2,
                 min_budget: float = 1.0, budget_per_node: float = 2e-3) -> None:
        self.time_budget = time_budget
        self.min_budget = min_budget
        self.budget_per_node = budget_per_node
        self._cancels: dict[tuple[str, str], threading.Event] = {}
        self.max_graphs = max_graphs
        self._lock = threading.RLock()
        self._key_locks: dict[object, threading.Lock] = {}
        self._graphs: OrderedDict[str, GraphEntry] = OrderedDict()
        self._labels: dict[str, str] = {}  # every id ever offered (uploads stay listed after eviction)
        self._pinned: set[str] = set()
        self._futures: dict[tuple[str, str], Future] = {}
        self._analyses: OrderedDict[tuple[str, str, str], Analysis] = OrderedDict()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="magis-sched")
        # uploads schedule on their own worker: a slow upload never holds up anyone's sample
        self._upload_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magis-upload")
        self._bg = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magis-prefetch")
        self._tok = 0
        self.loaders: dict[str, Callable[[], Graph]] = {}
        self.plans = PlanStore(self.entry)  # frontiers, plan views, optimization and verification jobs

    # ---- locking --------------------------------------------------------------------------------
    def _key_lock(self, key: object) -> threading.Lock:
        with self._lock:
            lk = self._key_locks.get(key)
            if lk is None:
                lk = self._key_locks[key] = threading.Lock()
            return lk

    # ---- graphs ---------------------------------------------------------------------------------
    def schedules(self) -> list[str]:
        """Scheduler names for the picker: traced and RPO first, then the rest sorted."""
        names = [n for n in SCHEDULERS if n not in EXCLUDED_SCHEDULES]
        return [n for n in FIRST_SCHEDULES if n in names] + sorted(n for n in names if n not in FIRST_SCHEDULES)

    def model_options(self) -> list[dict]:
        opts = []
        for gid, label in self._labels.items():
            if not gid.startswith("sample:"):
                opts.append({"label": label, "value": gid})
        for name in sample_names():
            label = name
            if name in FULL_SIZE:
                label += "  (full size)"
            elif sample_mode(name) == "forward":
                label += "  (forward: layer fusion)"
            if not sample_file_exists(name):
                label += "  - no graph file, captured on first use (slow)"
            opts.append({"label": label, "value": f"sample:{name}"})
            self._labels.setdefault(f"sample:{name}", name)
        return opts

    def label(self, gid: str) -> str:
        return self._labels.get(gid, gid.partition(":")[2] or gid)

    def add_graph(self, g: Graph, label: str, kind: str = "upload", data: bytes | None = None,
                  pin: bool = False) -> str:
        digest = hashlib.sha256(data if data is not None else repr(sorted(g.nodes)).encode()).hexdigest()
        gid = f"{kind}:{digest[:12]}"
        with self._lock:
            self._labels[gid] = label
            if pin:
                self._pinned.add(gid)
            if gid not in self._graphs:
                self._insert(gid, label, g, 0.0)
        return gid

    def add_upload(self, contents: str, filename: str | None) -> str:
        """Parse an upload (JSON or gzip'd JSON, never anything else) and register it; GraphError
        with one line on bad input."""
        data = decode_upload(contents)
        g = io.loads(data)  # JSON only
        if not g.ops():
            raise GraphError("the graph has no operators")
        name = filename or g.name
        return self.add_graph(g, f"{name} (uploaded)", "upload", data)

    def _insert(self, gid: str, label: str, g: Graph, seconds: float) -> GraphEntry:
        self._tok += 1
        out_bytes = {n.id: n.out_bytes for n in g}
        entry = GraphEntry(gid, label, g, f"a{self._tok}", ModuleTree(g), out_bytes, seconds)
        self._graphs[gid] = entry
        self._graphs.move_to_end(gid)
        uploads = [k for k in self._graphs if k.startswith("upload:") and k != gid]
        while gid.startswith("upload:") and len(uploads) >= MAX_UPLOADS:
            self._evict(uploads.pop(0))  # its memory goes with it (and its queued schedules)
        while len(self._graphs) > self.max_graphs:
            old = next((k for k in self._graphs if k not in self._pinned and k != gid), None)
            if old is None:
                break
            self._evict(old)
        return entry

    def _evict(self, gid: str) -> None:
        self.cancel(gid)  # its running searches stop now, not at their time budget
        self.plans.forget(gid)
        self._graphs.pop(gid, None)
        for key in [k for k in self._analyses if k[0] == gid]:
            del self._analyses[key]
        for key in [k for k in self._futures if k[0] == gid]:
            self._futures[key].cancel()
            del self._futures[key]

    def entry(self, gid: str) -> GraphEntry:
        """The loaded graph ``gid``, loading a sample on first use (GraphError if it cannot be)."""
        with self._lock:
            e = self._graphs.get(gid)
            if e is not None:
                self._graphs.move_to_end(gid)
                return e
        if not isinstance(gid, str) or ":" not in gid:
            raise AppError(f"unknown model {gid!r}")
        with self._key_lock(("graph", gid)):
            with self._lock:
                e = self._graphs.get(gid)
                if e is not None:
                    return e
            kind, _, name = gid.partition(":")
            t0 = time.perf_counter()
            if gid in self.loaders:
                g = self.loaders[gid]()
            elif kind == "sample":
                if name not in sample_names():
                    raise AppError(f"unknown sample {name!r}")
                try:
                    g = load_sample(name)
                except GraphError:
                    raise
                except Exception as ex:  # capturing a model can fail in many ways
                    raise AppError(f"could not load sample {name!r}: {type(ex).__name__}: {ex}") from None
            else:
                raise AppError(f"{self.label(gid)} is no longer in memory; please upload it again")
            with self._lock:
                self._labels.setdefault(gid, name)
                return self._insert(gid, self._labels[gid], g, time.perf_counter() - t0)

    # ---- schedules ------------------------------------------------------------------------------
    def budget_for(self, g: Graph) -> float:
        """Seconds a scheduler may search on ``g``: scaled with its size, within the app's limits."""
        return min(self.time_budget, max(self.min_budget, self.budget_per_node * len(g)))

    def _run_scheduler(self, gid: str, name: str) -> Schedule:
        g = self.entry(gid).graph
        cls = SCHEDULERS[name]
        params = inspect.signature(cls).parameters
        kwargs_ok = any(p.kind == p.VAR_KEYWORD for p in params.values())
        kw = {}
        if "time_budget" in params or kwargs_ok:
            kw["time_budget"] = self.budget_for(g)
        if "seed" in params:
            kw["seed"] = 0
        sched = cls(**kw)
        ev = self._cancels.get((gid, name))
        if ev is not None and hasattr(sched, "cancel"):
            sched.cancel = ev  # a memory-aware search: it checks the event with its deadline
        res = sched.run(g)
        if ev is not None and ev.is_set():
            res.info["stopped"] = "by the user"
        return res

    def cancel(self, gid: str) -> int:
        """End the running and queued schedulers of graph ``gid``: each returns the best order it has
        found (its result is kept).  Returns how many were still running."""
        n = 0
        with self._lock:
            for (g, name), fut in self._futures.items():
                if g == gid and not fut.done():
                    self._cancels.setdefault((g, name), threading.Event()).set()
                    n += 1
        return n

    def schedule_future(self, gid: str, name: str) -> Future:
        if name not in self.schedules():
            raise AppError(f"unknown schedule {name!r}")
        with self._lock:
            fut = self._futures.get((gid, name))
            if fut is None or fut.cancelled():
                pool = self._pool if gid.startswith("sample:") else self._upload_pool
                self._cancels[(gid, name)] = threading.Event()
                fut = self._futures[(gid, name)] = pool.submit(self._run_scheduler, gid, name)
            return fut

    def schedule(self, gid: str, name: str, wait: float | None = None) -> Schedule | None:
        """The schedule, or None if it is still running after ``wait`` seconds (None: wait for it).
        Raises AppError if the scheduler failed."""
        return wait_result(self.schedule_future(gid, name), wait, f"schedule {name!r} failed", keep=())

    def analysis(self, gid: str, name: str, device: str = DEFAULT_PROFILE,
                 wait: float | None = None) -> Analysis | None:
        """Schedule + simulation + hot-spots (None while the schedule is still being computed)."""
        if device not in DEVICES:
            raise AppError(f"unknown device {device!r}")
        key = (gid, name, device)
        with self._lock:
            a = self._analyses.get(key)
            if a is not None:
                return a
        sched = self.schedule(gid, name, wait)
        if sched is None:
            return None
        with self._key_lock(("analysis", key)):
            with self._lock:
                a = self._analyses.get(key)
                if a is not None:
                    return a
            g = self.entry(gid).graph
            sim = simulate(g, sched.order, AnalyticCost(device), validate=False)
            mem = sim.memory
            hot = mem.hotspots()
            a = Analysis(
                gid, sched, sim, device,
                step_of={nid: i for i, nid in enumerate(sched.order)},
                storage_of={s.root: s for s in mem.storages},
                hot=hot,
                hot_nodes={s.root.node for s in hot if s.alloc >= 0},
                hot_roots={s.root for s in hot},
                hot_bytes=_bytes_by_node(hot),
            )
            with self._lock:
                self._analyses[key] = a
                while len(self._analyses) > 8 * self.max_graphs:
                    self._analyses.popitem(last=False)
            return a

    def warm(self, gid: str, device: str = DEFAULT_PROFILE, schedules: tuple[str, ...] = ("traced", "rpo"),
             background: bool = True) -> threading.Thread | None:
        """Load ``gid`` and analyse it under the first schedules ahead of the first page load (the
        first simulation also pays for core's lazy imports)."""

        def run() -> None:
            try:
                e = self.entry(gid)
                from .figures import MAX_POINTS

                for name in schedules:
                    if name in self.schedules():
                        self.analysis(gid, name, device).hover(e.graph, MAX_POINTS)
                e.dom_sizes()
            except Exception as ex:  # the page will show the error when it asks for the same thing
                log.info("warm-up of %s failed: %s", gid, ex)

        if not background:
            run()
            return None
        t = threading.Thread(target=run, name="magis-warm", daemon=True)
        t.start()
        return t

    def prefetch_hover(self, a: Analysis, g: Graph, max_points: int) -> Future:
        """Build ``a``'s hover data in the background (an overlaid curve's, before the user makes it
        the selected schedule)."""
        return self._bg.submit(a.hover, g, max_points)

    def shutdown(self) -> None:
        self.plans.shutdown()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._upload_pool.shutdown(wait=False, cancel_futures=True)
        self._bg.shutdown(wait=False, cancel_futures=True)


__all__ = ["AppState", "AppError", "Analysis", "GraphEntry", "sample_names", "decode_upload", "NodeKind"]

"""Plans and plan files (MAGIS section 6.2's output, and every peer's).

A :class:`Plan` is what a method recommends for one imported graph: the rule applications that turn
the imported graph into the plan's graph (compact and replayable: node ids created by an
application depend only on the graph it is applied to), the schedule of that graph, and what the
simulator says about it.  Every method -- the M-Optimizer, PyTorch's eager order, sqrt(n)
checkpointing, DTR, torch's min-cut partitioner, Checkmate -- speaks this one format, so every point
of a Pareto plot exports and verifies the same way.

A plan file holds the points of one graph (a frontier, or one plan), with the graph's canonical hash
(``wl_hash.graph_hash``) so that a plan is never applied to a graph it was not made for.  It is JSON
(gzip when the name ends in ``.gz``), versioned, and validated on load: a bad file is one clear
``PlanError`` line.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cost.devices import DEFAULT_PROFILE, DEVICES
from ..ir.graph import Graph
from ..ir.io import atomic_write, inflate
from ..metrics import METRICS, HasMetrics, metrics
from ..transform.registry import RULES, get_rule
from ..transform.rule import Application
from .wl_hash import graph_hash

SCHEMA = "magis-plan"
VERSION = 1
MAX_BYTES = 64 << 20  # a plan file larger than this (decompressed) is refused


class PlanError(ValueError):
    """A plan file that cannot be read, or that does not belong to the graph (one line)."""


@dataclass
class Plan(HasMetrics):
    """One point: a method's applications from the imported graph, its schedule, its simulation."""

    method: str  # a registered method's name (``search.methods``): "magis", "eager", "dtr", ...
    applications: list[Application]
    order: list[int]  # schedule of the transformed graph (node ids after replaying ``applications``)
    metrics: dict[str, float]  # named metrics (``core.metrics``): peak (bytes) and latency (s) at least
    label: str = ""  # what distinguishes it among its method's points ("budget 0.5", "limit 8 GiB")
    stats: dict[str, Any] = field(default_factory=dict)  # method-specific (search time, states, ...)
    reserved_peak: int | None = None  # predicted CUDA caching-allocator reserved peak (analysis.allocator)

    def graph(self, imported: Graph) -> Graph:
        """The plan's graph: a copy of ``imported`` with the applications replayed."""
        return replay(imported, self.applications)

    def to_dict(self) -> dict[str, Any]:
        others = {k: v for k, v in self.metrics.items() if k not in ("peak", "latency")}
        return {"method": self.method, "label": self.label, "peak": int(self.peak),
                "latency": float(self.latency), **({"metrics": others} if others else {}),
                "applications": [[a.rule, *map(int, a.params)] for a in self.applications],
                "order": [int(v) for v in self.order], "stats": self.stats,
                **({"reserved_peak_bytes": int(self.reserved_peak)} if self.reserved_peak is not None else {})}


def sim_options(plan: Plan) -> dict[str, Any]:
    """The ``simulate`` (and exporter) options a plan was made with: SwapAdvisor's three streams and
    the copies the compute stream waits for (``stats["swap_streams"]``, ``stats["waits"]``), or none."""
    if not plan.stats.get("swap_streams"):
        return {}
    waits = plan.stats.get("waits", [])
    return {"swap_streams": True, "waits": [(int(a), int(b)) for a, b in waits]}


def reserved_peak_of(plan: Plan, imported: Graph, device: str = DEFAULT_PROFILE) -> int:
    """The predicted reserved peak of the CUDA caching allocator running ``plan``'s exported script
    (``simulate.predict_reserved``; swaps' release points from the analytic model of
    ``device``)."""
    from ..cost.model import AnalyticCost
    from ..simulate import predict_reserved

    return predict_reserved(plan.graph(imported), plan.order, AnalyticCost(device), **sim_options(plan)).reserved_peak


def fill_reserved_peaks(pf: PlanFile, imported: Graph) -> PlanFile:
    """Set ``reserved_peak`` on every point of ``pf`` that has none (in place; returns ``pf``)."""
    for p in pf.points:
        if p.reserved_peak is None:
            p.reserved_peak = reserved_peak_of(p, imported, pf.device)
    return pf


def replay(imported: Graph, applications: Iterable[Application]) -> Graph:
    """A copy of ``imported`` with ``applications`` applied in order (PlanError naming the step
    that does not apply)."""
    g = imported.copy()
    for k, app in enumerate(applications):
        try:
            get_rule(app.rule).apply(g, app)
        except Exception as e:  # noqa: BLE001 -- any failure means the plan is not for this graph
            raise PlanError(f"step {k + 1} ({app}) does not apply to {imported.name}: {e}") from None
    return g


def check_order(g: Graph, order: Sequence[int]) -> None:
    """PlanError unless ``order`` runs every op of ``g`` exactly once, inputs first."""
    ops = {n.id for n in g.ops()}
    if len(order) != len(ops) or set(order) != ops:
        missing = len(ops - set(order))
        raise PlanError(f"the schedule does not match the plan's graph ({len(order)} steps for {len(ops)} ops, "
                        f"{missing} missing)")
    seen: set[int] = set()
    for v in order:
        for p in g.preds(v):
            if p in ops and p not in seen:
                raise PlanError(f"the schedule runs {g.nodes[v].name!r} before its input {g.nodes[p].name!r}")
        seen.add(v)


@dataclass
class PlanFile:
    """The points of one graph, with the graph's identity and the device profile they were made for."""

    graph_name: str
    graph_hash: int
    device: str
    points: list[Plan]
    records: list[dict[str, Any]] = field(default_factory=list)  # search convergence (per iteration)
    meta: dict[str, Any] = field(default_factory=dict)

    def check_graph(self, g: Graph) -> None:
        """PlanError unless the plans were made for ``g`` (same canonical hash)."""
        h = graph_hash(g)
        if h != self.graph_hash:
            raise PlanError(f"the plan was made for graph {self.graph_name!r}, not for {g.name!r} "
                            f"(the graphs differ)")

    def point(self, k: int | None = None) -> Plan:
        """Point ``k`` (default: the first); PlanError naming the valid range."""
        if not self.points:
            raise PlanError("the plan file has no points")
        k = 0 if k is None else k
        if not 0 <= k < len(self.points):
            raise PlanError(f"no point {k}: the plan file has points 0-{len(self.points) - 1}")
        return self.points[k]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": VERSION, "graph": {"name": self.graph_name, "hash": str(self.graph_hash)},
                "device": self.device, "meta": self.meta, "points": [p.to_dict() for p in self.points],
                "records": self.records}


def plans_to_bytes(pf: PlanFile, compress: bool = False) -> bytes:
    """The bytes of ``pf``'s plan file: JSON, gzip'd when ``compress``."""
    data = json.dumps(pf.to_dict(), separators=(",", ":")).encode()
    return gzip.compress(data, compresslevel=6, mtime=0) if compress else data


def save_plans(pf: PlanFile, path: str | os.PathLike, graph: Graph | None = None) -> Path:
    """Write ``pf`` atomically (gzip when the name ends in .gz); with ``graph`` (the imported graph),
    each point's predicted reserved peak is computed first where it is missing."""
    if graph is not None:
        fill_reserved_peaks(pf, graph)
    path = Path(path)
    return atomic_write(path, plans_to_bytes(pf, compress=path.suffix == ".gz"))


def load_plans(path: str | os.PathLike, g: Graph | None = None) -> PlanFile:
    """Read a plan file (PlanError with one line on any problem); with ``g``, also check that the
    plans belong to it and that every point replays onto it with a valid schedule."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise PlanError(f"cannot read plan file {path}: {e.strerror or e}") from None
    pf = plans_from_bytes(data)
    if g is not None:
        pf.check_graph(g)
    return pf


def plans_from_bytes(data: bytes) -> PlanFile:
    try:
        if data[:2] == b"\x1f\x8b":
            data = bytes(inflate(data, MAX_BYTES))
        elif len(data) > MAX_BYTES:
            raise PlanError(f"larger than {MAX_BYTES >> 20} MiB (the limit for a plan file)")
        d = json.loads(data.decode("utf-8"))
    except PlanError:
        raise
    except Exception as e:  # noqa: BLE001 -- json, unicode and gzip errors are all "not a plan file"
        raise PlanError(f"not a MAGIS plan file ({type(e).__name__}: {str(e)[:80]})") from None
    return plans_from_dict(d)


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise PlanError(msg)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def plans_from_dict(d: Any) -> PlanFile:
    _need(isinstance(d, dict), "not a MAGIS plan file: the top level is not a JSON object")
    _need(d.get("schema") == SCHEMA, f"not a MAGIS plan file: schema is {str(d.get('schema'))[:40]!r}, "
                                     f"expected {SCHEMA!r}")
    _need(d.get("version") == VERSION, f"unsupported plan file version {str(d.get('version'))[:20]!r} "
                                       f"(this build reads version {VERSION})")
    gd = d.get("graph")
    _need(isinstance(gd, dict) and isinstance(gd.get("name"), str) and isinstance(gd.get("hash"), str)
          and gd["hash"].lstrip("-").isdigit(), "plan file: 'graph' needs a name and a hash")
    device = d.get("device", DEFAULT_PROFILE)  # a file that names none: the default profile
    _need(isinstance(device, str), "plan file: 'device' is not a string")
    _need(device in DEVICES, f"plan file: unknown device {device[:40]!r} (known: {', '.join(DEVICES)})")
    pts = d.get("points")
    _need(isinstance(pts, list), "plan file: 'points' is not a list")
    points = [_point(p, k) for k, p in enumerate(pts)]
    records = d.get("records", [])
    _need(isinstance(records, list) and all(isinstance(r, dict) for r in records),
          "plan file: 'records' is not a list of objects")
    meta = d.get("meta", {})
    _need(isinstance(meta, dict), "plan file: 'meta' is not an object")
    return PlanFile(gd["name"], int(gd["hash"]), device, points, records, meta)


def _point(p: Any, k: int) -> Plan:
    w = f"plan file: point {k}"
    _need(isinstance(p, dict), f"{w} is not an object")
    _need(isinstance(p.get("method"), str) and p["method"], f"{w}: 'method' is not a name")
    _need(_int(p.get("peak")) and p["peak"] >= 0, f"{w}: 'peak' is not a byte count")
    lat = p.get("latency")
    _need(isinstance(lat, (int, float)) and not isinstance(lat, bool) and math.isfinite(lat) and lat >= 0,
          f"{w}: 'latency' is not a number of seconds")
    apps = p.get("applications")
    _need(isinstance(apps, list), f"{w}: 'applications' is not a list")
    out: list[Application] = []
    for i, a in enumerate(apps):
        _need(isinstance(a, list) and a and isinstance(a[0], str) and all(_int(x) for x in a[1:]),
              f"{w}, application {i}: expected [rule, int, ...]")
        _need(a[0] in RULES, f"{w}, application {i}: unknown rule {a[0][:40]!r} (known: {', '.join(sorted(RULES))})")
        out.append(Application(a[0], tuple(a[1:])))
    order = p.get("order")
    _need(isinstance(order, list) and all(_int(v) for v in order), f"{w}: 'order' is not a list of node ids")
    stats = p.get("stats", {})
    _need(isinstance(stats, dict), f"{w}: 'stats' is not an object")
    label = p.get("label", "")
    _need(isinstance(label, str), f"{w}: 'label' is not a string")
    reserved = p.get("reserved_peak_bytes")  # absent in files written before it was computed
    _need(reserved is None or (_int(reserved) and reserved >= 0), f"{w}: 'reserved_peak_bytes' is not a byte count")
    others = p.get("metrics", {})
    _need(isinstance(others, dict), f"{w}: 'metrics' is not an object")
    for k, v in others.items():
        _need(k in METRICS and k not in ("peak", "latency"),
              f"{w}: unknown metric {str(k)[:40]!r} (known: {', '.join(METRICS)})")
        _need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0,
              f"{w}: metric {k!r} is not a non-negative number")
    return Plan(p["method"], out, list(order), metrics(p["peak"], float(lat), **others), label, stats, reserved)


def thin(points: Sequence[Plan], k: int) -> list[Plan]:
    """At most ``k`` (>= 2) of ``points`` (one method's frontier), spread over its range of peaks:
    the lowest and the highest peak and the point nearest each of ``k`` - 2 peaks evenly spaced
    between them; in order of peak."""
    if k < 2:
        raise ValueError("thin keeps at least the two ends of a frontier (k >= 2)")
    pts = sorted(points, key=lambda p: (p.peak, p.latency))
    if len(pts) <= k:
        return pts
    lo, hi = pts[0].peak, pts[-1].peak
    keep = {0, len(pts) - 1}
    for j in range(1, k - 1):
        target = lo + (hi - lo) * j / (k - 1)
        keep.add(min(range(len(pts)), key=lambda i: (abs(pts[i].peak - target), i)))
    return [pts[i] for i in sorted(keep)]


def merge_plans(old: PlanFile, new: PlanFile) -> PlanFile:
    """``old``'s and ``new``'s points of one graph (PlanError unless the graph hashes and the devices
    agree): per method, the points of both that no other point of that method dominates (peak and
    latency; of equal points the newer stays), methods in order of first appearance, PyTorch's eager
    point kept and last (``new``'s where it has one).  ``meta.peer_failures`` merged: a method that
    ``new`` ran (``meta.methods``) keeps only ``new``'s reasons.  ``records`` are ``new``'s when it
    has any (a MAGIS search), else ``old``'s."""
    from .pareto import front_of

    if old.graph_hash != new.graph_hash:
        raise PlanError(f"the plan file is of graph {old.graph_name!r}, not of {new.graph_name!r} (the graphs "
                        f"differ); write to another file")
    if old.device != new.device:
        raise PlanError(f"the plan file was made for device {old.device!r}, not {new.device!r}; "
                        f"write to another file or pass --device {old.device}")
    by: dict[str, list[Plan]] = {}
    for p in [*new.points, *old.points]:  # new first: of equal points the newer stays
        by.setdefault(p.method, []).append(p)
    methods = list(dict.fromkeys(p.method for p in [*old.points, *new.points] if p.method != "eager"))
    points = [p for m in methods for p in front_of(by[m])]
    eager = [p for p in new.points if p.method == "eager"][-1:] or [p for p in old.points if p.method == "eager"][-1:]
    ran = set(new.meta.get("methods", [p.method for p in new.points]))
    failures = {m: why for m, why in old.meta.get("peer_failures", {}).items() if m not in ran}
    failures.update(new.meta.get("peer_failures", {}))
    meta = {**old.meta, **new.meta, "peer_failures": failures,
            "methods": list(dict.fromkeys([*old.meta.get("methods", []), *new.meta.get("methods", [])]))}
    return PlanFile(new.graph_name, new.graph_hash, new.device, points + eager, new.records or old.records, meta)


__all__ = ["Plan", "PlanError", "PlanFile", "check_order", "fill_reserved_peaks", "load_plans", "merge_plans",
           "plans_from_bytes", "plans_from_dict", "plans_to_bytes", "replay", "reserved_peak_of", "save_plans",
           "sim_options", "thin"]

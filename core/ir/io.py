"""JSON save/load of graphs (optionally gzip), with a schema version and validation on load."""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any

from .graph import (
    FissionOrigin,
    FissionSpec,
    Graph,
    GraphError,
    Node,
    NodeKind,
    TensorKind,
    TensorMeta,
    TorchConst,
    TRef,
)
from .schema import DEFAULT_LIMITS, Limits, check_graph_dict, json_extent, shown

SCHEMA = "magis-graph"
SCHEMA_VERSION = 1


# ---- values ------------------------------------------------------------------------------------
def _enc(v: Any) -> Any:
    if isinstance(v, TRef):
        return {"$t": [v.node, v.index]}
    if isinstance(v, TorchConst):
        return {"$c": [v.kind, v.value]}
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return {"$f": repr(v)}
    if isinstance(v, tuple):
        return {"$tuple": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, dict):
        return {"$dict": {k: _enc(x) for k, x in v.items()}}
    raise GraphError(f"cannot serialise argument of type {type(v).__name__}: {v!r}")


def _dec(v: Any) -> Any:
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if isinstance(v, dict):
        if "$t" in v:
            node, index = v["$t"]
            return TRef(int(node), int(index))
        if "$c" in v:
            return TorchConst(*v["$c"])
        if "$f" in v:
            return float(v["$f"])
        if "$tuple" in v:
            return tuple(_dec(x) for x in v["$tuple"])
        if "$dict" in v:
            return {k: _dec(x) for k, x in v["$dict"].items()}
        raise GraphError(f"unknown encoded value {v!r}")
    return v


def _enc_tensor(t: TensorMeta) -> dict[str, Any]:
    d: dict[str, Any] = {"shape": list(t.shape), "dtype": t.dtype, "kind": t.kind.value}
    if t.alias is not None:
        d["alias"] = [t.alias.node, t.alias.index]
    if t.device != "device":
        d["device"] = t.device
    if t.storage_bytes is not None:
        d["storage_bytes"] = t.storage_bytes
    return d


def _dec_tensor(d: dict[str, Any], where: str) -> TensorMeta:
    if "shape" not in d or d["shape"] is None:
        raise GraphError(f"{where}: tensor has no shape")
    if "dtype" not in d or not d["dtype"]:
        raise GraphError(f"{where}: tensor has no dtype")
    if not isinstance(d["shape"], list) or not all(isinstance(s, int) and s >= 0 for s in d["shape"]):
        raise GraphError(f"{where}: bad shape {d['shape']!r}")
    try:
        kind = TensorKind(d.get("kind", "activation"))
    except ValueError:
        raise GraphError(f"{where}: unknown tensor kind {d.get('kind')!r}") from None
    alias = TRef(*d["alias"]) if d.get("alias") is not None else None
    sb = d.get("storage_bytes")
    if sb is not None and (not isinstance(sb, int) or sb < 0):
        raise GraphError(f"{where}: bad storage_bytes {sb!r}")
    return TensorMeta(tuple(d["shape"]), d["dtype"], kind, alias, d.get("device", "device"), sb)


# ---- graphs ------------------------------------------------------------------------------------
def graph_to_dict(g: Graph) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "name": g.name,
        "meta": g.meta,
        "nodes": [node_to_dict(n) for n in g.nodes.values()],
        "outputs": {k: [r.node, r.index] for k, r in g.outputs.items()},
    }


def node_to_dict(n: Node) -> dict[str, Any]:
    d: dict[str, Any] = {"id": n.id, "name": n.name, "op": n.op, "kind": n.kind.value}
    if n.args:
        d["args"] = _enc(n.args)
    if n.kwargs:
        d["kwargs"] = {k: _enc(v) for k, v in n.kwargs.items()}
    d["outputs"] = [_enc_tensor(t) for t in n.outputs]
    if n.module:
        d["module"] = n.module
    if n.target:
        d["target"] = n.target
    if n.recompute_of is not None:
        d["recompute_of"] = n.recompute_of
    if n.fission is not None:
        f = n.fission
        d["fission"] = {
            "n": f.n,
            "in_dims": f.in_dims,
            "out_combine": [list(c) for c in f.out_combine],
            "graph": graph_to_dict(f.graph),
        }
        if f.members:
            d["fission"]["members"] = sorted(f.members)
        if f.comp is not None:
            d["fission"]["comp"] = list(f.comp)
        o = f.origin
        if o is not None:
            d["fission"]["origin"] = {"split": list(o.split), "length": o.length,
                                      "nodes": [node_to_dict(v) for v in o.nodes],
                                      "inputs": [[r.node, r.index] for r in o.inputs],
                                      "outputs": [[r.node, r.index] for r in o.outputs], "aux": list(o.aux),
                                      "rebuilt": [list(p) for p in o.rebuilt]}
    return d


def node_from_dict(nd: Any, i: int, validate: bool = True) -> Node:
    if not isinstance(nd, dict) or "id" not in nd or "op" not in nd:
        raise GraphError(f"node #{i}: missing 'id' or 'op'")
    where = f"node {nd.get('name', nd['id'])!r}"
    try:
        kind = NodeKind(nd.get("kind", "op"))
    except ValueError:
        raise GraphError(f"{where}: unknown node kind {nd.get('kind')!r}") from None
    if "outputs" not in nd or not isinstance(nd["outputs"], list):
        raise GraphError(f"{where}: missing outputs (shapes)")
    fission = None
    if "fission" in nd:
        f = nd["fission"]
        fission = FissionSpec(
            graph=graph_from_dict(f["graph"], validate=validate),
            n=int(f["n"]),
            in_dims=list(f["in_dims"]),
            out_combine=[(c[0], c[1]) for c in f["out_combine"]],
        )
        fission.members = frozenset(int(x) for x in f.get("members", ()))
        if "comp" in f:
            fission.comp = (int(f["comp"][0]), int(f["comp"][1]), int(f["comp"][2]))
        o = f.get("origin")
        if o is not None:
            fission.origin = FissionOrigin(
                split=tuple(int(x) for x in o["split"]),
                length=int(o["length"]),
                nodes=[node_from_dict(v, k, validate) for k, v in enumerate(o["nodes"])],
                inputs=[TRef(int(r[0]), int(r[1])) for r in o["inputs"]],
                outputs=[TRef(int(r[0]), int(r[1])) for r in o["outputs"]],
                aux=tuple(int(x) for x in o["aux"]),
                rebuilt=tuple((int(p[0]), int(p[1])) for p in o["rebuilt"]))
    return Node(
        id=int(nd["id"]),
        name=str(nd.get("name", f"n{nd['id']}")),
        op=str(nd["op"]),
        kind=kind,
        args=_dec(nd.get("args", [])),
        kwargs={k: _dec(v) for k, v in (nd.get("kwargs") or {}).items()},
        outputs=[_dec_tensor(t, where) for t in nd["outputs"]],
        module=nd.get("module", ""),
        target=nd.get("target", ""),
        recompute_of=nd.get("recompute_of"),
        fission=fission,
    )


def graph_from_dict(d: Any, validate: bool = True) -> Graph:
    if not isinstance(d, dict):
        raise GraphError("not a MAGIS graph: top level is not a JSON object")
    if d.get("schema") != SCHEMA:
        raise GraphError(f"not a MAGIS graph: schema is {d.get('schema')!r}, expected {SCHEMA!r}")
    if d.get("version") != SCHEMA_VERSION:
        raise GraphError(
            f"unsupported graph schema version {d.get('version')!r} (this build reads version {SCHEMA_VERSION})"
        )
    if not isinstance(d.get("nodes"), list):
        raise GraphError("graph file has no node list")
    g = Graph(str(d.get("name", "graph")), d.get("meta") or {})
    for i, nd in enumerate(d["nodes"]):
        g.add_node(node_from_dict(nd, i, validate), check=False)
    for k, r in (d.get("outputs") or {}).items():
        g.outputs[k] = TRef(int(r[0]), int(r[1]))
    if validate:
        g.validate()
    return g


def dumps(g: Graph, compress: bool = False) -> bytes:
    """The bytes of ``g``'s graph file: JSON, gzip'd when ``compress``."""
    data = json.dumps(graph_to_dict(g), separators=(",", ":")).encode()
    return gzip.compress(data, compresslevel=6, mtime=0) if compress else data


def save(g: Graph, path: str | os.PathLike) -> Path:
    """Write ``g`` as JSON (gzip if the name ends in .gz), atomically: never a half-written file."""
    path = Path(path)
    return atomic_write(path, dumps(g, compress=path.suffix == ".gz"))


def atomic_write(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def inflate(data: bytes, max_bytes: int) -> bytes:
    """``data`` gunzipped (every member) in bounded chunks: GraphError as soon as the output passes
    ``max_bytes`` -- a small file that inflates to gigabytes is refused without inflating it."""
    out = bytearray()
    buf = data
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            while True:
                out += d.decompress(buf, _CHUNK)
                if len(out) > max_bytes:
                    raise GraphError(f"decompresses to more than {max_bytes // 2**20} MiB "
                                     f"(the limit for a graph file)")
                buf = d.unconsumed_tail
                if d.eof or not buf:
                    break
        except zlib.error as e:
            raise GraphError(f"corrupt gzip data ({e})") from None
        if not d.eof:
            raise GraphError("corrupt gzip data (the compressed stream ends early)")
        rest = d.unused_data
        if not rest.strip(b"\0"):
            return out  # type: ignore[return-value]  (a bytearray: no copy)
        if rest[:2] != b"\x1f\x8b":
            raise GraphError("corrupt gzip data (trailing garbage after the compressed stream)")
        buf = rest


_CHUNK = 1 << 20


def _no_constant(name: str) -> Any:
    raise GraphError(f"not valid JSON ({name} is not a JSON number)")


def _finite(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise GraphError(f"not valid JSON (number {text[:40]} overflows a float)")
    return v


def loads(data: bytes, validate: bool = True, limits: Limits = DEFAULT_LIMITS) -> Graph:
    """Parse graph bytes (JSON or gzip'd JSON); raise GraphError with one clear line on bad input.

    The one validation of a graph file (``core.ir.schema``): decompressed size, nesting depth, then
    every field, then the graph's invariants (``Graph.lint``).  A graph it returns can be analysed,
    simulated, scheduled and exported without raising on its content."""
    if data[:2] == b"\x1f\x8b":
        data = inflate(data, limits.max_bytes)
    elif len(data) > limits.max_bytes:
        raise GraphError(f"larger than {limits.max_bytes // 2**20} MiB (the limit for a graph file)")
    if data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GraphError(f"not valid JSON (not UTF-8 text: {e.reason} at byte {e.start})") from None
    depth, containers, commas = json_extent(data)
    if depth > limits.max_depth:
        raise GraphError(f"JSON nested {depth} levels deep (at most {limits.max_depth})")
    if containers > limits.max_containers or commas + 1 > limits.max_values:
        raise GraphError(f"too many JSON values ({containers:,} arrays and objects, {commas + 1:,} values; "
                         f"at most {limits.max_containers:,} and {limits.max_values:,})")
    del data
    try:
        d = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as e:
        raise GraphError(f"not valid JSON ({e})") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer literal of more than 4300 digits
        raise GraphError(f"not valid JSON ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(d, dict):
        raise GraphError("not a MAGIS graph: top level is not a JSON object")
    if d.get("schema") != SCHEMA:
        raise GraphError(f"not a MAGIS graph: schema is {shown(d.get('schema'))}, expected {SCHEMA!r}")
    if type(d.get("version")) is not int or d.get("version") != SCHEMA_VERSION:
        raise GraphError(
            f"unsupported graph schema version {shown(d.get('version'))} (this build reads version {SCHEMA_VERSION})"
        )
    check_graph_dict(d, limits)
    try:
        return graph_from_dict(d, validate=validate)
    except GraphError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise GraphError(f"malformed graph file: {type(e).__name__}: {e}") from None


def read_graph_bytes(path: str | os.PathLike, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """The bytes of graph file ``path``, unparsed (``loads`` checks them); GraphError names the file
    when it is missing, not a regular file, too large or unreadable."""
    path = Path(path)
    try:
        if not path.is_file():
            raise GraphError("no such file" if not path.exists() else "not a regular file")
        if path.stat().st_size > limits.max_bytes:
            raise GraphError(f"larger than {limits.max_bytes // 2**20} MiB (the limit for a graph file)")
        return path.read_bytes()
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None
    except OSError as e:
        raise GraphError(f"{path}: cannot read ({e.strerror or e})") from None


def load(path: str | os.PathLike, validate: bool = True, limits: Limits = DEFAULT_LIMITS) -> Graph:
    """Read and check a graph file (``loads``); GraphError names the file and the problem."""
    data = read_graph_bytes(path, limits)
    try:
        return loads(data, validate=validate, limits=limits)
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None

"""JSON save/load of graphs (optionally gzip), with a schema version and validation on load."""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .graph import (
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
    nodes = []
    for n in g.nodes.values():
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
        nodes.append(d)
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "name": g.name,
        "meta": g.meta,
        "nodes": nodes,
        "outputs": {k: [r.node, r.index] for k, r in g.outputs.items()},
    }


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
        node = Node(
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
        g.add_node(node, check=False)
    for k, r in (d.get("outputs") or {}).items():
        g.outputs[k] = TRef(int(r[0]), int(r[1]))
    if validate:
        g.validate()
    return g


def save(g: Graph, path: str | os.PathLike) -> Path:
    """Write ``g`` as JSON (gzip if the name ends in .gz), atomically: never a half-written file."""
    path = Path(path)
    data = json.dumps(graph_to_dict(g), separators=(",", ":")).encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return atomic_write(path, data)


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


def loads(data: bytes, validate: bool = True) -> Graph:
    """Parse graph bytes (JSON or gzip'd JSON); raise GraphError with one clear line on bad input."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise GraphError(f"corrupt gzip data: {e}") from None
    try:
        d = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GraphError(f"not valid JSON ({e})") from None
    try:
        return graph_from_dict(d, validate=validate)
    except GraphError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise GraphError(f"malformed graph file: {type(e).__name__}: {e}") from None


def load(path: str | os.PathLike, validate: bool = True) -> Graph:
    path = Path(path)
    if not path.exists():
        raise GraphError(f"no such file: {path}")
    try:
        g = loads(path.read_bytes(), validate=validate)
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None
    return g

"""A corpus of malformed (and a few hostile but valid) graph files, by category, built from one real
sample graph.  Used by ``tests/test_fuzz_files.py`` and ``bench/fuzz_files.py``.

Categories (the problems a user or an attacker can put in a file):

* ``json``      -- not JSON at all: truncated, not UTF-8, NaN / Infinity tokens, 1e999, huge integers
* ``types``     -- every field of the graph, a node and a tensor replaced by values of the wrong type
* ``numbers``   -- shapes, ids, indices and arguments out of range (negative, 10**12 x 10**12, 2**64)
* ``aliases``   -- views of missing tensors, of tensors the node does not read, alias cycles
* ``structure`` -- dangling edges, duplicate ids, cycles, placeholders with inputs, bad fission nodes
* ``depth``     -- arrays / objects nested 100 to 100,000 levels deep
* ``size``      -- gzip bombs, oversized files, truncated or concatenated gzip streams
* ``names``     -- valid graphs whose names carry ANSI escapes, control characters, bidi overrides and
                   lone surrogates (accepted; the command line must print them escaped)
"""

from __future__ import annotations

import copy
import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BASE_SAMPLE = "fig6_ftree"
ACCEPTED = {"names"}  # categories whose files are valid graphs
MIXED = {"types"}  # a wrong type is sometimes still valid (a string name, a null alias, ...)


def base_graph() -> dict[str, Any]:
    """The parsed JSON of a small real graph (a committed sample file)."""
    from sample_graphs.store import graph_path

    return json.loads(gzip.decompress(graph_path(BASE_SAMPLE, "train").read_bytes()))


def _dump(d: Any) -> bytes:
    return json.dumps(d, separators=(",", ":"), allow_nan=True).encode("utf-8", "surrogatepass")


def _nodes_with(d: dict, pred: Callable[[dict], bool]) -> dict:
    return next(n for n in d["nodes"] if pred(n))


def _op(d: dict) -> dict:
    return _nodes_with(d, lambda n: n.get("kind") == "op" and len(n.get("args", [])) >= 2)


def _view(d: dict) -> dict:
    return _nodes_with(d, lambda n: any("alias" in t for t in n["outputs"]))


def _mutants(base: dict) -> Iterator[tuple[str, str, Callable[[dict], Any]]]:
    """(category, label, mutate): ``mutate`` edits a deep copy in place (or returns a replacement)."""
    wrong = {"str": "x", "list": [1], "dict": {"a": 1}, "null": None, "bool": True, "float": 1.5,
             "neg": -1, "huge": 10**30}

    # ---- types: every field of every level, each wrong type -------------------------------------
    for key in ("name", "meta", "nodes", "outputs", "version", "schema"):
        for w, v in wrong.items():
            yield "types", f"graph.{key}={w}", lambda d, k=key, v=v: d.__setitem__(k, v)
    for key in ("id", "name", "op", "kind", "args", "kwargs", "outputs", "module", "target", "recompute_of",
                "fission"):
        for w, v in wrong.items():
            yield "types", f"node.{key}={w}", lambda d, k=key, v=v: _op(d).__setitem__(k, v)
    for key in ("shape", "dtype", "kind", "alias", "device", "storage_bytes"):
        for w, v in wrong.items():
            yield "types", f"tensor.{key}={w}", lambda d, k=key, v=v: _op(d)["outputs"][0].__setitem__(k, v)
    for w, v in wrong.items():
        yield "types", f"node={w}", lambda d, v=v: d["nodes"].__setitem__(5, v)
        yield "types", f"tensor={w}", lambda d, v=v: _op(d)["outputs"].__setitem__(0, v)
        yield "types", f"shape[0]={w}", lambda d, v=v: _op(d)["outputs"][0]["shape"].__setitem__(0, v)
        yield "types", f"output-ref={w}", lambda d, v=v: d["outputs"].__setitem__("loss", v)
        yield "types", f"$t={w}", lambda d, v=v: _op(d)["args"].__setitem__(0, {"$t": v})
        yield "types", f"$c={w}", lambda d, v=v: _op(d)["args"].__setitem__(0, {"$c": v})
        yield "types", f"$f={w}", lambda d, v=v: _op(d)["args"].__setitem__(0, {"$f": v})
        yield "types", f"$tuple={w}", lambda d, v=v: _op(d)["args"].__setitem__(0, {"$tuple": v})
        yield "types", f"$dict={w}", lambda d, v=v: _op(d)["args"].__setitem__(0, {"$dict": v})
        yield "types", f"kwarg={w}", lambda d, v=v: _op(d).__setitem__("kwargs", {"alpha": {"$t": [v, 0]}})
    for name in ("$t", "a b", "x; import os", "lambda", "", "1x"):  # kwarg names a script cannot pass
        yield "types", f"kwarg-name={name!r}", lambda d, k=name: _op(d).__setitem__("kwargs", {k: None})
    yield "types", "encoded-two-keys", lambda d: _op(d)["args"].__setitem__(0, {"$t": [0, 0], "$c": ["dtype", "x"]})
    yield "types", "unknown-tag", lambda d: _op(d)["args"].__setitem__(0, {"$x": 1})
    yield "types", "torch-const-code", lambda d: _op(d)["args"].append({"$c": ["dtype", "float32; import os"]})
    yield "types", "top-level-array", lambda d: [d]
    yield "types", "top-level-string", lambda d: "magis"

    # ---- numbers --------------------------------------------------------------------------------
    for label, shape in [("1e12x1e12", [10**12, 10**12]), ("2**62", [2**62]), ("2**64", [2**64]),
                         ("neg", [-4, 4]), ("10**30", [10**30]), ("rank100", [1] * 100),
                         ("many-big", [2**20] * 8)]:
        yield "numbers", f"shape={label}", lambda d, s=shape: _op(d)["outputs"][0].__setitem__("shape", s)
    for label, v in [("neg", -3), ("2**63", 2**63), ("10**20", 10**20)]:
        yield "numbers", f"id={label}", lambda d, v=v: _op(d).__setitem__("id", v)
        yield "numbers", f"ref-node={label}", lambda d, v=v: _op(d)["args"].__setitem__(0, {"$t": [v, 0]})
        yield "numbers", f"ref-index={label}", lambda d, v=v: _op(d)["args"].__setitem__(0, {"$t": [0, v]})
        yield "numbers", f"storage_bytes={label}", lambda d, v=v: _op(d)["outputs"][0].__setitem__(
            "storage_bytes", v)
    yield "numbers", "arg=10**30", lambda d: _op(d)["args"].append(10**30)
    yield "numbers", "total-bytes", lambda d: [n["outputs"][0].update(shape=[2**50], dtype="int64")
                                               for n in d["nodes"] if n.get("kind") == "op"]
    yield "numbers", "fission-n=0", lambda d: _op(d).update(kind="fission", fission={
        "n": 0, "in_dims": [], "out_combine": [], "graph": {"nodes": []}})

    # ---- aliases --------------------------------------------------------------------------------
    yield "aliases", "alias-missing-node", lambda d: _view(d)["outputs"][0].__setitem__("alias", [9999, 0])
    yield "aliases", "alias-out-of-range", lambda d: _view(d)["outputs"][0].__setitem__("alias", [0, 7])
    yield "aliases", "alias-not-read", lambda d: _view(d)["outputs"][0].__setitem__("alias", [1, 0])
    yield "aliases", "alias-self", lambda d: _view(d)["outputs"][0].__setitem__("alias", [_view(d)["id"], 0])

    def cycle(d: dict) -> None:
        a, b = _op(d), _view(d)
        a["args"].append({"$t": [b["id"], 0]})
        b["args"].append({"$t": [a["id"], 0]})
        a["outputs"][0]["alias"] = [b["id"], 0]
        b["outputs"][0]["alias"] = [a["id"], 0]

    yield "aliases", "alias-cycle", cycle

    def self_cycle(d: dict) -> None:
        n = _op(d)
        n["outputs"] = [{"shape": [1], "dtype": "float32", "alias": [n["id"], 1]},
                        {"shape": [1], "dtype": "float32", "alias": [n["id"], 0]}]

    yield "aliases", "alias-cycle-own-outputs", self_cycle
    yield "aliases", "placeholder-alias", lambda d: d["nodes"][0]["outputs"][0].__setitem__("alias", [1, 0])

    # ---- structure ------------------------------------------------------------------------------
    yield "structure", "dangling-edge", lambda d: _op(d)["args"].append({"$t": [123456, 0]})
    yield "structure", "duplicate-id", lambda d: d["nodes"].append(copy.deepcopy(_op(d)))
    yield "structure", "placeholder-with-input", lambda d: d["nodes"][0].__setitem__("args", [{"$t": [1, 0]}])

    def graph_cycle(d: dict) -> None:
        a = _op(d)
        user = next(n for n in d["nodes"] if {"$t": [a["id"], 0]} in n.get("args", []))
        a["args"].append({"$t": [user["id"], 0]})

    yield "structure", "cycle", graph_cycle
    yield "structure", "self-loop", lambda d: _op(d)["args"].append({"$t": [_op(d)["id"], 0]})
    yield "structure", "no-nodes-key", lambda d: d.pop("nodes")
    yield "structure", "output-missing", lambda d: d["outputs"].__setitem__("loss", [99999, 0])
    yield "structure", "recompute-missing", lambda d: _op(d).__setitem__("recompute_of", 99999)
    yield "structure", "store-contract", lambda d: _op(d).__setitem__("kind", "store")
    yield "structure", "fission-no-spec", lambda d: _op(d).__setitem__("kind", "fission")
    yield "structure", "fission-bad-graph", lambda d: _op(d).update(kind="fission", fission={
        "n": 2, "in_dims": [0], "out_combine": [["cat", 0]], "graph": {"nodes": "x"}})
    yield "structure", "fission-recursive-garbage", lambda d: _op(d).update(kind="fission", fission={
        "n": 2, "in_dims": [0, None, 1], "out_combine": [["mix", 0]],
        "graph": {"nodes": [{"id": 0, "op": "placeholder", "kind": "placeholder",
                             "outputs": [{"shape": [4], "dtype": "float32"}]}], "outputs": {"o": [0, 0]}}})
    yield "structure", "unknown-dtype", lambda d: _op(d)["outputs"][0].__setitem__("dtype", "float128")
    yield "structure", "unknown-version", lambda d: d.__setitem__("version", 99)
    yield "structure", "empty-op", lambda d: _op(d).__setitem__("op", "")


def _names_mutants(base: dict) -> Iterator[tuple[str, Callable[[dict], Any]]]:
    hostile = {"ansi": "\x1b[2J\x1b[31mRED\x1b[0m", "osc": "\x1b]0;pwned\x07title", "bell": "a\x07b\x08c",
               "surrogate": "bad\ud800name", "bidi": "abc\u202edcba", "newline": "line1\nline2\r\n",
               "markup": "<img src=x onerror=alert(1)>", "nul": "nul\x00byte"}
    for label, s in hostile.items():
        def mut(d: dict, s: str = s) -> None:
            d["name"] = s
            for n in d["nodes"]:
                if n.get("kind") == "op":
                    n["name"] = n["name"] + s
                    n["module"] = s + "/" + n.get("module", "")

        yield label, mut


def _deep(levels: int, opener: str, closer: str) -> bytes:
    return (opener * levels + closer * levels).encode()


def corpus() -> Iterator[tuple[str, str, bytes]]:
    """(category, file name, bytes) of every file of the corpus (deterministic)."""
    base = base_graph()
    n = 0
    for cat, label, mut in _mutants(base):
        d = copy.deepcopy(base)
        r = mut(d)
        doc = d if r is None or isinstance(r, list) and all(x is None for x in r) else r
        n += 1
        data = _dump(doc)
        yield cat, f"{cat}-{n:03d}-{_safe(label)}.json" if n % 2 else f"{cat}-{n:03d}-{_safe(label)}.json.gz", \
            data if n % 2 else gzip.compress(data, mtime=0)
    for label, mut in _names_mutants(base):
        d = copy.deepcopy(base)
        mut(d)
        yield "names", f"names-{label}.json", _dump(d)

    # ---- json -----------------------------------------------------------------------------------
    good = _dump(base)
    yield "json", "json-empty.json", b""
    yield "json", "json-truncated.json", good[: len(good) // 2]
    yield "json", "json-not-utf8.json", good.replace(b'"fc1"', b'"\xff\xfe"', 1)
    yield "json", "json-utf16.json", good.decode().encode("utf-16")
    yield "json", "json-nan.json", good.replace(b'"version":1', b'"version":NaN', 1)
    yield "json", "json-infinity-id.json", good.replace(b'"id":5,', b'"id":Infinity,', 1)
    yield "json", "json-1e999.json", good.replace(b'"id":5,', b'"id":1e999,', 1)
    yield "json", "json-5000-digits.json", good.replace(b'"id":5,', b'"id":' + b"9" * 5000 + b",", 1)
    yield "json", "json-trailing.json", good + b"}garbage"
    yield "json", "json-binary.json", bytes(range(256)) * 16
    yield "json", "json-pickle.pkl", b"\x80\x04\x95" + b"\x00" * 64
    yield "json", "json-lone-surrogate-escape-key.json", good.replace(b'"schema"', b'"\\ud800"', 1)

    # ---- depth ----------------------------------------------------------------------------------
    for levels in (100, 1000, 10_000, 100_000):
        yield "depth", f"depth-array-{levels}.json", _deep(levels, "[", "]")
        yield "depth", f"depth-object-{levels}.json", ('{"a":' * levels + "1" + "}" * levels).encode()
        inner = good.replace(b'"meta":{', b'"meta":{"x":' + b"[" * levels + b"]" * levels + b",", 1)
        yield "depth", f"depth-in-meta-{levels}.json.gz", gzip.compress(inner, mtime=0)
        args = good.replace(b'"args":[', b'"args":[' + b'{"$tuple":[' * levels + b"]}" * levels + b",", 1)
        yield "depth", f"depth-in-args-{levels}.json", args

    # ---- size -----------------------------------------------------------------------------------
    bomb = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = b" " * (1 << 20)
    parts = [bomb.compress(good[:-1])]
    parts += [bomb.compress(chunk) for _ in range(200)]  # 200 MiB of whitespace inside the object
    parts.append(bomb.compress(b"}") + bomb.flush())
    yield "size", "size-gzip-bomb-200MiB.json.gz", b"".join(parts)
    zeros = zlib.compressobj(1, zlib.DEFLATED, 31)
    yield "size", "size-gzip-bomb-zeros.json.gz", b"".join([zeros.compress(b"\0" * (1 << 20)) for _ in range(300)]
                                                           + [zeros.flush()])
    yield "size", "size-plain-80MiB.json", good[:-1] + b" " * (80 << 20) + b"}"
    gz = gzip.compress(good, mtime=0)
    yield "size", "size-gzip-truncated.json.gz", gz[: len(gz) // 2]
    yield "size", "size-gzip-trailing-garbage.json.gz", gz + b"garbage!"
    yield "size", "size-gzip-two-members.json.gz", gz + gz
    yield "size", "size-gzip-header-only.json.gz", gz[:10]
    yield "size", "size-gzip-corrupt.json.gz", gz[:20] + bytes(b ^ 0x5A for b in gz[20:60]) + gz[60:]
    many = copy.deepcopy(base)
    ph = many["nodes"][0]
    many["nodes"] = [ph] + [{"id": i, "op": "x.y.z", "outputs": [{"shape": [1], "dtype": "int8"}],
                             "args": [{"$t": [0, 0]}]} for i in range(1, 300_000)]
    many["outputs"] = {}
    yield "size", "size-300k-nodes.json.gz", gzip.compress(_dump(many), mtime=0)


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_=" else "_" for c in label)[:48]


def write_corpus(directory: Path) -> dict[str, list[Path]]:
    """Write the corpus under ``directory``; the files of each category."""
    directory.mkdir(parents=True, exist_ok=True)
    out: dict[str, list[Path]] = {}
    for cat, name, data in corpus():
        p = directory / name
        p.write_bytes(data)
        out.setdefault(cat, []).append(p)
    return out

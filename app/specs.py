"""What a user names on the command line, resolved to the objects core works on.

* a *model spec* -- a sample name (``sample_graphs.NAMES``) or ``path/to/file.py:factory``, where
  ``factory()`` returns a workload (``core.frontend.workload``) -- becomes a built workload, a
  captured graph, or a verified round trip;
* a *graph spec* -- a graph file, or a sample name (its committed graph file) -- becomes a graph.

This is the one place where names meet the samples and user files: core only ever receives
built workloads and graphs.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sample_graphs
from core.ir import io
from core.ir.graph import Graph, GraphError

if TYPE_CHECKING:  # torch is imported only by the commands that build models
    from core.frontend.workload import Workload
    from core.search.sweep import SweepWorkload


class SpecError(ValueError):
    """A model spec that names nothing usable: an unknown sample, a missing file or factory."""


def load_factory(spec: str) -> Callable[[], Workload]:
    """``path/to/file.py:factory`` -> the factory function (it returns a workload)."""
    path, _, fn = spec.rpartition(":")
    if not path or not fn:
        raise SpecError(f"bad model spec {spec!r}: expected a sample name or path/to/file.py:factory")
    p = Path(path)
    if not p.exists():
        raise SpecError(f"no such file: {p}")
    # a module of its own in sys.modules, as ``import`` makes one (dataclasses, pickling and typing look
    # a class's module up there), and the file's folder on the path while it runs (its own imports)
    name = f"magis_model_{p.stem}_{hashlib.sha1(str(p.resolve()).encode()).hexdigest()[:8]}"
    modspec = importlib.util.spec_from_file_location(name, p)
    if modspec is None or modspec.loader is None:
        raise SpecError(f"cannot load {p}")
    mod = importlib.util.module_from_spec(modspec)
    sys.modules[name] = mod
    folder = str(p.resolve().parent)
    sys.path.insert(0, folder)
    try:
        modspec.loader.exec_module(mod)
    except Exception as e:  # the user's file: any error it raises is theirs to fix
        sys.modules.pop(name, None)
        raise SpecError(f"cannot load {p}: {_one_line(e)}") from e
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    if not hasattr(mod, fn):
        raise SpecError(f"{p} has no function {fn!r}")
    return getattr(mod, fn)


def _did_you_mean(spec: str) -> str:
    """``; did you mean NAME?`` for the sample name closest to ``spec`` (difflib), else nothing."""
    close = difflib.get_close_matches(spec, sample_graphs.NAMES, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _unknown(spec: str) -> SpecError:
    """A model spec that is neither a sample nor ``file.py:factory``."""
    return SpecError(f"unknown sample {spec!r}{_did_you_mean(spec)} (samples: {', '.join(sample_graphs.NAMES)}; "
                     f"or path/to/file.py:factory)")


def _looks_like_a_path(spec: str) -> bool:
    """A graph spec written as a path (a directory part or a file suffix), not as a sample name."""
    return os.sep in spec or "/" in spec or Path(spec).suffix != ""


def _no_graph(spec: str) -> SpecError:
    """A graph spec that names no file and no sample."""
    return SpecError(f"no sample or graph file named {spec!r}{_did_you_mean(spec)} "
                     f"(samples: {', '.join(sample_graphs.NAMES)})")


def build_workload(spec: str, seed: int = 0, fake: bool = False) -> Workload:
    """The workload a model spec names, built after seeding torch with ``seed``; ``fake=True``
    builds it under ``FakeTensorMode`` (nothing is allocated, values are unknown).  A factory's
    file is loaded outside that mode; only the factory call runs in it."""
    if spec in sample_graphs.NAMES or spec in sample_graphs.FORWARD_NAMES:
        make: Callable[[], Workload] = functools.partial(sample_graphs.build, spec)
    elif ":" in spec:
        make = load_factory(spec)
    else:
        raise _unknown(spec)
    import torch

    from core.frontend.workload import build_fake

    torch.manual_seed(seed)
    try:
        return build_fake(make) if fake else make()
    except (SpecError, GraphError):
        raise
    except Exception as e:  # a user's factory: report it as one line, not a traceback
        if spec in sample_graphs.NAMES or spec in sample_graphs.FORWARD_NAMES:
            raise
        raise SpecError(f"{spec} failed: {_one_line(e)}") from e


def _one_line(e: BaseException) -> str:
    """``Type: first line of the message, at file:line`` (the innermost frame of the user's code)."""
    import traceback

    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = f"{type(e).__name__}: {first}" if first else type(e).__name__
    if isinstance(e, SyntaxError) and e.filename:
        return f"{text} at {e.filename}:{e.lineno}"
    ours = tuple(str(Path(__file__).resolve().parents[1] / d) + os.sep for d in ("app", "core"))
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if "-packages" not in f.filename and not f.filename.startswith("<frozen")
              and not os.path.abspath(f.filename).startswith(ours)]
    if frames:
        text += f" at {frames[-1].filename}:{frames[-1].lineno}"
    return text


def capture_spec(spec: str, training: bool = True, sgd_lr: float | None = None,
                 progress: Callable[[str], None] | None = None, adam_lr: float | None = None,
                 fix_random_reads: bool = False, max_nodes: int | None = None) -> Graph:
    """The graph of a model spec, captured under fake tensors (a sample records its name and
    description; a factory's workload is named after its ``name`` or the factory);
    ``progress(message)`` hears each stage; ``fix_random_reads``: capture with the random draws
    the model branches on fixed (``core.frontend.idioms``); ``max_nodes``: the bound on a model
    file's graph size (default ``torch_import.MAX_NODES``)."""
    if spec in sample_graphs.NAMES:
        from sample_graphs.capture import capture_sample

        return capture_sample(spec, training, sgd_lr, progress=progress, adam_lr=adam_lr)
    if progress:
        progress(f"building {spec} on fake tensors")
    w = build_workload(spec, fake=True)
    from core.frontend.workload import capture_workload

    return capture_workload(w, training=training, name=getattr(w, "name", spec.rpartition(":")[2]),
                            sgd_lr=sgd_lr, progress=progress, adam_lr=adam_lr, fix_random_reads=fix_random_reads,
                            **({} if max_nodes is None else {"max_nodes": max_nodes}))


def verify_spec(spec: str, schedule: str = "traced", seed: int = 0, *, training: bool = True,
                allow_full_size: bool = False, details: bool = False, graph: Graph | None = None,
                **kwargs: Any) -> dict[str, Any]:
    """``core.codegen.verify.verify_workload`` on the workload a model spec names (the model
    really runs, on the CPU, so full-size samples are refused unless ``allow_full_size``);
    ``graph``: verify this graph of the model (a transformed one) instead of a fresh capture."""
    if graph is not None:
        training = graph.meta.get("mode", "train") == "train"
    from core.codegen.verify import verify_workload

    if not allow_full_size and getattr(build_workload(spec, seed, fake=True), "full_size", False):
        raise ValueError(f"{spec} is a full-size workload; verify runs the model for real on the "
                         f"CPU -- use its _tiny variant")
    w = build_workload(spec, seed)
    res = verify_workload(w, schedule, seed, name=getattr(w, "name", spec), training=training,
                          rebuild=lambda: build_workload(spec, seed), details=details, graph=graph, **kwargs)
    res["sample"] = spec
    return res


def load_graph(spec: str) -> Graph:
    """A graph file, or a sample name (its committed graph file, captured when there is none)."""
    if not Path(spec).exists():
        if spec in sample_graphs.NAMES:
            from sample_graphs.store import load_sample_graph

            return load_sample_graph(spec)
        if not _looks_like_a_path(spec):
            raise _no_graph(spec)
    return io.load(spec)  # "no such file" for a missing path


def sweep_workload(spec: str) -> SweepWorkload:
    """A graph spec as a workload of ``magis sweep``: a graph file, or a sample's committed graph
    file (captured when there is none).  SpecError when it names neither, GraphError when the
    file cannot be read."""
    from core.search.sweep import SweepWorkload

    if Path(spec).exists():
        w = SweepWorkload.from_file(spec)
    elif spec in sample_graphs.NAMES:
        from sample_graphs.store import graph_path

        p = graph_path(spec)
        w = (SweepWorkload.from_file(p, name=spec) if p.exists()
             else SweepWorkload(spec, io.dumps(load_graph(spec)), spec))
    elif _looks_like_a_path(spec):
        raise SpecError(f"{spec}: no such file")
    else:
        raise _no_graph(spec)
    if w.error is not None:
        raise GraphError(w.error)
    return w


__all__ = ["SpecError", "build_workload", "capture_spec", "load_factory", "load_graph", "sweep_workload",
           "verify_spec"]

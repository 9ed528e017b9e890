"""Export of a full-size training graph: BERT-base (batch 32, sequence 512, ~2k ops) captured under
fake tensors -- or its committed graph file -- becomes a script that compiles (``py_compile``), has one
line per op, and keys its inputs by the model's parameter names.  Nothing is run (that needs a GPU).
"""

from __future__ import annotations

import py_compile
import time

import pytest

from core.codegen import export_script
from core.codegen.verify import resolve_schedule

pytestmark = pytest.mark.slow


def _bert_base():
    from sample_graphs.store import graph_path, load_sample_graph

    return load_sample_graph("bert_base", "train"), graph_path("bert_base", "train").exists()


def test_bert_base_training_export_compiles(tmp_path, record_property):
    g, from_file = _bert_base()
    order = resolve_schedule(g, "traced")
    t0 = time.perf_counter()
    path = export_script(g, order, tmp_path / "bert_base_traced.py", schedule_name="traced")
    seconds = time.perf_counter() - t0
    py_compile.compile(str(path), cfile=str(tmp_path / "bert_base_traced.pyc"), doraise=True)
    src = path.read_text()
    size, lines = len(src.encode()), src.count("\n")
    record_property("script_bytes", size)
    record_property("script_lines", lines)
    print(f"\nbert_base training export: {len(order)} ops, {size} bytes, {lines} lines, "
          f"generated in {seconds:.2f} s (graph {'file' if from_file else 'captured'})")
    body = src[src.index("def _step("):src.index('if __name__ == "__main__":')]
    calls = [ln for ln in body.splitlines() if " = aten." in ln or ln.strip().startswith("aten.")
             or (" = " in ln and "aten." in ln)]
    assert len(calls) == len(order) > 1500
    assert "'bert.encoder.layer.11.output.dense.weight': {'shape': [768, 3072]" in src
    assert "'input_0': {'shape': [32, 512], 'dtype': 'int64', 'kind': 'input', 'range': [0, 30522]}" in src
    assert size < 2_000_000

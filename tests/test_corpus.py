"""The model corpus through the user's whole path (``bench/corpus.py``): every sample's small variant,
every zoo family (tiny), every example file, every loss pattern and the held-out ``transformers``
families -- import, ``magis optimize`` (a memory limit, and ``--pareto``), every method of ``magis
compare``, each method's plans exported and run against eager PyTorch, ``plan_step`` for two steps.
A crash anywhere, an exit status the command does not document, or a plan whose script differs from
eager is a FAILED cell and fails the test; a method's refusal is a row with its reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sample_graphs import NAMES, zoo
from sample_graphs.corpus import EXAMPLES, entries
from sample_graphs.losses import PATTERNS

ROOT = Path(__file__).resolve().parent.parent


def test_the_corpus_holds_every_model_the_project_owns():
    names = {e.name for e in entries()}
    assert {n for n in NAMES if n.endswith("_tiny")} <= names
    assert {f"zoo_{n}" for n in zoo.NAMES} <= names
    assert {n for n, _ in EXAMPLES} <= names
    assert {f"loss_{n}" for n in PATTERNS} <= names
    assert {"hf_bloom", "hf_mamba", "hf_whisper"} <= names
    for e in entries():
        path = e.spec.rpartition(":")[0]
        assert e.spec in NAMES or Path(path).is_file(), e


def test_a_failed_cell_fails_the_run(monkeypatch, capsys):
    """A stage that raises is a FAILED cell, the table says where, and the exit status is 1."""
    sys.path.insert(0, str(ROOT / "bench"))
    import corpus  # bench/corpus.py

    def broken(*_a, **_k):
        raise RuntimeError("plan_step broke")

    monkeypatch.setattr(corpus, "_plan_step", broken)
    assert corpus.main(["--models", "fig2_skip", "--jobs", "1", "--methods", "eager,dtr", "--time-budget", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "fig2_skip plan_step: RuntimeError: plan_step broke at test_corpus.py" in out


def _no_refusal(why: str) -> bool:
    """A method's reason that is no refusal of the split: its points no better than eager's, or its
    budget spent (on a loaded machine; the grid's finer points not tried), or the cut-off end of
    such a reason (a cell's detail is shortened)."""
    ok = ("no better than", "no plan better than", "time budget")
    return why.startswith(ok) or "not tried: time budget" in why or any(o.startswith(why) for o in ok)


@pytest.mark.slow
def test_the_whole_corpus_runs_without_a_failed_cell(tmp_path):
    out = tmp_path / "corpus.json"
    # half a second per method of compare: each spends its budget, and the run checks the path, not strength
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "corpus.py"), "--jobs", "2", "--method-budget", "0.5",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=2700)
    print(proc.stdout)
    res = json.loads(out.read_text())
    failed = res["summary"]["failed"]
    crashed = [(r["model"], m, c["detail"]) for r in res["rows"] for m, c in r["methods"].items()
               if c["status"] == "FAILED"]
    assert not failed and not crashed, (failed, crashed)
    assert proc.returncode == 0
    assert {r["model"] for r in res["rows"]} == {e.name for e in entries()}
    # gradient accumulation is the baseline users reach for first: its split is valid on every LM
    # (a point, or -- at the corpus's tiny sizes, where weights and gradients are most of the peak --
    # every point dominated by eager, which compare never reports as a result)
    lms = [r for r in res["rows"] if r["source"] == "example" or r["model"] in
           {f"zoo_{n}" for n in ("opt", "gpt_neox", "falcon", "phi", "phi3", "gemma", "gemma2", "mixtral", "qwen2_moe")}]
    refused = [(r["model"], c["detail"]) for r in lms for m, c in r["methods"].items()
               if m in ("microbatch", "microbatch_ckpt") and c["status"] != "ok"
               and not all(_no_refusal(why) for why in c["detail"].split("; "))]
    assert not refused, refused

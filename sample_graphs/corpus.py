"""The model corpus: every model the project owns, each as the spec a user would type
(``magis import SPEC``, ``magis verify SPEC``), run through every stage of the user's path by
``bench/corpus.py`` and its test.

* the samples' small variants (``sample_graphs.NAMES``; the paper-size ones are for the benchmarks);
* the zoo's families, tiny (``sample_graphs.zoo``), as factories of this file: ``sample_graphs/corpus.py:zoo_opt``;
* the model files of ``examples/``;
* the loss patterns of ``sample_graphs/losses.py``: targets computed inside the step;
* families of ``transformers`` held out of the zoo (``sample_graphs/heldout.py``), tiny, trained by
  their library's own loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sample_graphs import NAMES as SAMPLE_NAMES
from sample_graphs import zoo
from sample_graphs.losses import PATTERNS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SOURCES = ("sample", "zoo", "example", "loss", "heldout")


@dataclass(frozen=True)
class Entry:
    """One model of the corpus: its row name, the spec that builds it, and where it comes from."""

    name: str
    spec: str
    source: str  # one of SOURCES
    fix_random_reads: bool = False  # imported as `magis import --fix-random-reads` (layer drop)


def _zoo_factory(name: str):
    def build():
        return zoo.build(name, tiny=True)

    build.__name__ = f"zoo_{name}"
    build.__doc__ = f"The zoo's {zoo.BY_NAME[name].size} ({zoo.BY_NAME[name].family}), tiny."
    return build


for _name in zoo.NAMES:  # zoo_opt, zoo_gpt_neox, ...: module-level factories, as a model file has
    globals()[f"zoo_{_name}"] = _zoo_factory(_name)

EXAMPLES = [("hf_causal_lm", "examples/hf_causal_lm.py:build"), ("hf_gpt2", "examples/hf_causal_lm.py:build_gpt2")]


def entries(sources: tuple[str, ...] = SOURCES) -> list[Entry]:
    """The corpus, in a fixed order (samples, zoo, examples, loss patterns, held-out families)."""
    out: list[Entry] = []
    if "sample" in sources:
        out += [Entry(n, n, "sample") for n in SAMPLE_NAMES if n.endswith("_tiny") or n.startswith("fig")]
    if "zoo" in sources:
        out += [Entry(f"zoo_{n}", f"{HERE / 'corpus.py'}:zoo_{n}", "zoo") for n in zoo.NAMES]
    if "example" in sources:
        out += [Entry(n, str(ROOT / s.split(":")[0]) + ":" + s.split(":")[1], "example") for n, s in EXAMPLES]
    if "loss" in sources:
        out += [Entry(f"loss_{n}", f"{HERE / 'losses.py'}:{n}", "loss") for n in PATTERNS]
    if "heldout" in sources:
        from sample_graphs.heldout import FACTORIES, FIXED_DRAWS  # imports transformers

        out += [Entry(f"hf_{n}", f"{HERE / 'heldout.py'}:{n}", "heldout", n in FIXED_DRAWS) for n in FACTORIES]
    return out


__all__ = ["EXAMPLES", "SOURCES", "Entry", "entries"]

"""The README's commands are tests: every line of every ```bash block of README.md and docs/**/*.md
runs here, in document order, in one temporary working directory (a file one command writes is read by
the next, in the same block or a later one), through the ``magis`` console script of the environment
(``python -m app.cli`` where it is not installed) with ``HF_HUB_OFFLINE=1`` and a private
``$MAGIS_CACHE``.  A figure the README quotes as what a command prints is checked against what the
command prints now.

How a block becomes commands: ``# comments`` are stripped, ``\\`` continuations joined, a line split at
``&&``.  Optional arguments written ``[--json]``, ``[--point K]``, ``[graph.json.gz]`` are documentation
syntax: each such command runs without them, then with all of them (placeholders from
``PLACEHOLDERS``); a variant with ``--json`` must print JSON.

The substitutions that make the README's commands fast (each explicit, each with its reason):

- full-size samples -> their tiny variants (``TINY``: bert_base -> bert_tiny, vit_base -> vit_tiny, ...);
  the forward samples of ``magis fuse`` / ``magis substitute`` (efficientnet_b3, sru) run at full size:
  they take a few seconds;
- ``--time-budget`` of the searches bounded by it (``TIME_BUDGET_CAP``: optimize, sweep, compare) is capped
  at 1-2 s, and added where the command relies on the 60 s default; ``magis substitute sru`` keeps its
  60 s: its sampling search ends by itself in about 3 s, and the figures quoted from it are those of
  the finished search;
- ``magis fuse ... --explainer grad`` (also the default explainer) -> ``--explainer oracle``
  (``OPTION_OVERRIDES``): the GNN explainers first train a validity classifier, about a minute per graph
  and scheme on one CPU core; the oracle explainer drives the same tree split (GET's Algorithm 1) with
  F_beta itself;
- ``my_model.py`` / ``my_cnn.py``, the user's own model files, are written into the working directory
  (``USER_FILES``: an MLP and a small residual CNN from ``tests/model_files.py``);
- ``examples/...`` paths are the repository's files (the commands run outside the repository);
- ``magis app`` gets a free ``--port``; it is started in a subprocess, must answer HTTP 200 on ``/`` (and
  on its layout), and is then terminated.

A README line that uses a file no earlier command writes gets that file from ``PREREQUISITES`` first
(each with its reason).  The exit status is 0 unless ``EXPECTED_STATUS`` gives the status the README
documents for that command with the tiny input (e.g. 3: a memory limit no plan can reach).  The ``make``
targets are not run (``NOT_RUN``): ``make test`` is CI itself, ``make run`` creates the environment
these tests run in and then serves the app, which ``magis app`` covers here; nor are the commands
whose tiny variant cannot do what the paper-size one does (each with its reason).  A command that is neither runnable nor listed in ``NOT_RUN`` fails the test; every key of
these tables must name a command of the docs (``test_tables_name_commands_of_the_docs``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import sample_graphs
from tests.model_files import CNN_FACTORY, MLP_FACTORY

ROOT = Path(__file__).resolve().parents[1]


def doc_files() -> list[Path]:
    """README.md and every Markdown file under docs/ (picked up as soon as it exists)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


# ---- the tables ------------------------------------------------------------------------------------

TINY = {  # full-size sample -> the tiny variant of the same architecture
    "bert_base": "bert_tiny", "vit_base": "vit_tiny", "gpt_neo_1_3b": "gpt_neo_tiny", "btlm_3b": "btlm_tiny",
    "resnet50": "resnet50_tiny", "unet": "unet_tiny", "unetpp": "unetpp_tiny",
}

TIME_BUDGET_CAP = {"optimize": 2.0, "sweep": 1.0, "compare": 1.0}  # seconds; their default is 60

OPTION_OVERRIDES = {  # sub-command -> {option: value}, set whether the README gives the option or not
    "fuse": {"--explainer": "oracle"},  # grad/gnn train a GNN classifier first (about a minute)
}

PLACEHOLDERS = {"K": "1", "graph.json.gz": "bert.json.gz"}  # inside [optional] arguments

USER_FILES = {"my_model.py": MLP_FACTORY, "my_cnn.py": CNN_FACTORY}

NOT_RUN = {
    "make run": "creates .venv, installs and serves the app until interrupted: the environment of these tests; "
                "`magis app` is run below",
    "make test": "the whole test suite, this file included: CI runs it",
    "make test-fast": "the fast part of the whole suite, this file's fast tests included",
    "make docs": "rewrites the docs' results tables in the repository; tests/test_docs.py runs the same "
                 "renderer's check (`bench/docs.py --check`)",
    "magis optimize bert_base --method swapadvisor --memory-limit 0.5 --time-budget 60 -o sa.json":
        "on bert_tiny no plan reaches half the peak (its largest op's working set is 0.8x of it), so it writes "
        "no plan; SwapAdvisor's planner and plans are tested in tests/test_swapadvisor.py",
    "magis export bert_base --plan sa.json -o bert_base_sa.py":
        "exports the plan of the command above, which the tiny variant does not produce",
    "magis optimize btlm_3b --method magis_pool --memory-limit 0.125 --time-budget 60 -o btlm_24g.json":
        "on btlm_tiny no frontier state runs within 1/8 of the peak; MAGIS + planner plans are exported and "
        "verified in tests/test_magis_pool.py",
    "python bench/swapadvisor.py --budget 30 --magis-budget 30":
        "a benchmark of hours on the paper-size workloads; its committed result renders the SwapAdvisor table",
}

EXPECTED_STATUS = {  # README command -> (status, why)
    "magis sweep bert_tiny,vit_tiny --memory-limits 0.8,0.5,8GiB --pareto --devices rtx3090,a100-80gb -o sweep/":
        (3, "bert_tiny's resident floor (weights and gradients) is 0.70x of its peak, so no plan reaches 0.5: "
            "`magis sweep` writes every row and exits 3"),
    "magis sweep bert_tiny,vit_tiny,unet_tiny --memory-limits 0.8,0.5 --pareto --time-budget 30 --processes 4 -o sweep/":
        (3, "bert_tiny's resident floor is 0.70x of its peak: the limit 0.5 is not reached"),
}


# none today: every file a README command reads is written by a command before it
PREREQUISITES: dict[str, tuple[list[list[str] | Callable[[Path], None]], str]] = {}


@dataclass(frozen=True)
class Figure:
    """A figure the docs quote as a command's output: ``quote`` is in the docs (whitespace-normalised),
    each of ``printed`` is in the command's stdout, none of ``absent`` is (the condition under which the
    figure is deterministic)."""

    quote: str
    printed: tuple[str, ...]
    absent: tuple[str, ...] = ()


VERIFY_BERT_TINY = """\
ok: bert_tiny, schedule traced (377 ops, float32, seed 0): the exported script reproduces eager PyTorch
  outputs  43 tensors (the loss and every gradient): max abs error 0, max rel error 0; tolerance rtol 1.3e-06 of each tensor's scale, atol 1e-05
  peak     265.1 KiB measured (CPU run), 265.1 KiB simulated (rtx3090 profile): ratio 1.0000"""

RESIDENT_FLOOR = ("resident floor: 186.5 KiB (0.70x of the peak): weights 93.5 KiB, gradients 92.5 KiB -- no plan "
                  "without swaps goes below it")

SRU_SUBSTITUTE = (  # the search ends by itself (not by its 60 s budget), seeded: its result is deterministic
    Figure("#   1. merge_linear (A-Trans): addmm, addmm_1 -> 4 ops, cost 4.2229 ms, peak 8.64 MiB",
           ("  1. merge_linear (A-Trans): addmm, addmm_1 -> 4 ops, cost 4.2229 ms, peak 8.64 MiB",),
           ("stopped by the time budget",)),
    Figure("# wrote sru_sub.json.gz: 10 substitutions, 559 -> 579 nodes",
           ("wrote sru_sub.json.gz: 10 substitutions, 559 -> 579 nodes",), ("stopped by the time budget",)),
    Figure("#   cost     4.2319 ms -> 4.1415 ms (weight-only ops folded, as at inference), 1.022x (analytic model, rtx3090)",
           ("  cost     4.2319 ms -> 4.1415 ms (weight-only ops folded, as at inference), 1.022x (analytic model, "
            "rtx3090)",), ("stopped by the time budget",)),
    Figure("#   peak     7.51 MiB -> 8.92 MiB  (traced order)",
           ("  peak     7.51 MiB -> 8.92 MiB  (traced order)",), ("stopped by the time budget",)),
)

FIGURES: dict[str, tuple[Figure, ...]] = {  # README command -> the figures quoted as its output (bare variant)
    "magis verify bert_tiny": (Figure(VERIFY_BERT_TINY, (VERIFY_BERT_TINY,)),),
    # "`magis info` also prints the graph's resident floor ..., e.g. ..." -- bert.json.gz is bert_tiny here
    "magis info bert.json.gz [--device a100-80gb] [--json]": (Figure(RESIDENT_FLOOR, (RESIDENT_FLOOR,)),),
    "magis substitute sru --method sampling --max-steps 10 --time-budget 60 -o sru_sub.json.gz": SRU_SUBSTITUTE,
    "magis verify sru --graph sru_sub.json.gz": (
        Figure("# ok: max abs error 0, peak 8.92 MiB measured = simulated",
               ("ok: sru, ", ": max abs error 0, ", "  peak     8.92 MiB measured (CPU run), 8.92 MiB simulated (")),),
}

# the example's batch of 2 x 16 tokens, for the figure quoted next to its block
LLAMA_2X16 = f'''
import importlib.util

spec = importlib.util.spec_from_file_location("hf_causal_lm", {str(ROOT / "examples" / "hf_causal_lm.py")!r})
lm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lm)


def build():
    return lm.CausalLM(lm.build().module.config, batch=2, seq=16)
'''


@dataclass(frozen=True)
class Extra:
    """A command the docs name next to a block's command -- in its comment, or in the prose that quotes
    its figures -- but not as a line of the block; run after that command (the key of ``EXTRAS``)."""

    argv: tuple[str, ...]
    figures: tuple[Figure, ...]
    files: dict[str, str] = field(default_factory=dict)


EXTRAS: dict[str, tuple[Extra, ...]] = {
    # its comment: "[--methods magis,dtr] [--json]"
    "magis compare bert_tiny --time-budget 5 -o cmp.json.gz": (
        Extra(("magis", "compare", "bert_tiny", "--time-budget", "5", "-o", "cmp.json.gz", "--methods", "magis,dtr",
               "--json"), ()),
    ),
    "magis verify examples/hf_causal_lm.py:build": (
        Extra(("magis", "info", "llama.json.gz"), (
            Figure("`magis info` gives a 12.7 MiB peak over a resident floor of 0.06x (weights and gradients, 0.8 MiB)",
                   ("  baseline peak    12.7 MiB  (traced order",
                    "resident floor: 842.6 KiB (0.06x of the peak): weights 417.3 KiB, gradients 417.2 KiB")),)),
        Extra(("magis", "import", "llama_2x16.py:build", "-o", "llama_2x16.json.gz"), (), {"llama_2x16.py": LLAMA_2X16}),
        Extra(("magis", "info", "llama_2x16.json.gz"), (
            Figure("With a batch of 2 x 16 tokens the floor is 0.97x of the peak",
                   ("(0.97x of the peak): weights",)),)),
    ),
}


# ---- reading the docs ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    doc: str  # the doc's path relative to the repository
    line: int  # the line the command starts on
    words: tuple[str, ...]  # its words as the doc writes them

    @property
    def text(self) -> str:
        """The words single-spaced: the key of the tables."""
        return " ".join(self.words)

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def strip_comment(line: str) -> str:
    """``line`` without its shell comment: a ``#`` that starts a word outside quotes (``NAME#J`` is a word)."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def bash_blocks(text: str) -> list[tuple[int, list[str]]]:
    """The ```bash blocks of a Markdown text: (the line number of the block's first line, its lines)."""
    blocks, lines, start = [], None, 0
    for no, line in enumerate(text.splitlines(), 1):
        if lines is None:
            if re.fullmatch(r"\s*```bash\s*", line):
                lines, start = [], no + 1
        elif re.fullmatch(r"\s*```\s*", line):
            blocks.append((start, lines))
            lines = None
        else:
            lines.append(line)
    assert lines is None, f"a ```bash block opened on line {start - 1} is not closed"
    return blocks


def block_commands(doc: str, start: int, lines: list[str]) -> list[Command]:
    """The commands of one block: comments stripped, ``\\`` continuations joined, ``&&`` split."""
    out: list[Command] = []
    k = 0
    while k < len(lines):
        first, line = start + k, strip_comment(lines[k]).rstrip()
        while line.endswith("\\") and k + 1 < len(lines):
            k += 1
            line = line[:-1] + " " + strip_comment(lines[k]).strip()
        k += 1
        words = shlex.split(line)
        part: list[str] = []
        for w in [*words, "&&"]:
            if w != "&&":
                part.append(w)
            elif part:
                out.append(Command(doc, first, tuple(part)))
                part = []
    return out


def doc_commands() -> list[Command]:
    out: list[Command] = []
    for path in doc_files():
        rel = str(path.relative_to(ROOT))
        for start, lines in bash_blocks(path.read_text()):
            out += block_commands(rel, start, lines)
    return out


def variants(words: list[str]) -> list[list[str]]:
    """Without the ``[optional]`` arguments; and, when there are any, with all of them (placeholders
    replaced)."""
    bare, full, group = [], [], None
    for w in words:
        if group is None and w.startswith("["):
            group, w = [], w[1:]
        if group is None:
            bare.append(w)
            full.append(w)
            continue
        end = w.endswith("]")
        group.append(w[:-1] if end else w)
        if end:
            for g in group:
                assert g.startswith("-") or g in PLACEHOLDERS or not g.isupper(), \
                    f"the optional argument {g!r} needs a value in PLACEHOLDERS"
            full += [PLACEHOLDERS.get(g, g) for g in group]
            group = None
    assert group is None, f"an unclosed [ in {shlex.join(words)}"
    return [bare] if bare == full else [bare, full]


# ---- running them ----------------------------------------------------------------------------------

def magis_argv() -> list[str]:
    script = Path(sys.executable).with_name("magis")
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


def set_option(words: list[str], option: str, value: str) -> list[str]:
    if option in words:
        i = words.index(option)
        return [*words[:i + 1], value, *words[i + 2:]]
    return [*words, option, value]


def substitute(words: list[str], tiny: bool = True) -> tuple[list[str], dict[str, str]]:
    """The fast, runnable form of a doc command's words: (argv, extra environment); ``tiny=False``
    keeps full-size samples."""
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, _, value = words[0].partition("=")
        env[name] = str(ROOT) if (name, value) == ("PYTHONPATH", ".") else value
        words = words[1:]
    if tiny:
        words = [",".join(TINY.get(p, p) for p in w.split(",")) for w in words]
    words = [str(ROOT / w) if w.startswith("examples/") else w for w in words]
    prog, args = words[0], words[1:]
    if prog == "magis":
        sub = args[0]
        if sub in TIME_BUDGET_CAP:
            given = float(args[args.index("--time-budget") + 1]) if "--time-budget" in args else float("inf")
            args = set_option(args, "--time-budget", f"{min(given, TIME_BUDGET_CAP[sub]):g}")
        for option, value in OPTION_OVERRIDES.get(sub, {}).items():
            args = set_option(args, option, value)
        return [*magis_argv(), *args], env
    if prog == "python":
        return [sys.executable, *args], env
    raise AssertionError(f"don't know how to run {prog!r}: run it here, or list the command in NOT_RUN with the "
                         f"reason it cannot run")


def environment(cwd: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Offline, a private cache, and one torch thread per process: on a small machine shared with other
    jobs, torch's threads wait on each other's cores and a loop of small steps runs up to 50x slower;
    nothing checked here depends on the thread count."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MAGIS_CACHE=str(cwd / ".magis-cache"),
               OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra or {})
    return env


def run(argv: list[str], cwd: Path, env: dict[str, str], what: str) -> subprocess.CompletedProcess:
    t0 = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    print(f"{time.perf_counter() - t0:6.1f} s  status {r.returncode}  {what}: {shlex.join(argv[1:])}")
    return r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def serve(argv: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    """``magis app``: started, answering HTTP 200 on ``/`` and on its layout, then terminated."""
    port = free_port()
    argv = set_option(argv, "--port", str(port))
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(400):  # polls 0.3 s apart: the app answers within them or the test fails
            if http_status(base + "/") == 200:
                break
            assert proc.poll() is None, f"{what}: `{shlex.join(argv[1:])}` exited {proc.returncode}:\n{proc.stdout.read()}"
            time.sleep(0.3)
        else:
            raise AssertionError(f"{what}: the app does not answer on {base}/ after 400 polls")
        assert http_status(base + "/_dash-layout") == 200, f"{what}: the app's layout does not load"
        print(f"{time.perf_counter() - t0:6.1f} s  served   {what}: {shlex.join(argv[1:])}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_figures(figures: tuple[Figure, ...], out: str, docs_text: str, what: str) -> None:
    for f in figures:
        assert " ".join(f.quote.split()) in docs_text, f"{what}: the docs no longer quote {f.quote!r}: update FIGURES"
        for a in f.absent:
            assert a not in out, f"{what}: printed {a!r}, so the quoted figure {f.quote!r} may not hold"
        for p in f.printed:
            assert p in out, f"{what}: the docs quote {f.quote!r}, but the command prints:\n{out}"


def run_command(cmd: Command, cwd: Path, docs_text: str) -> None:
    for step in PREREQUISITES.get(cmd.text, ([], ""))[0]:
        if callable(step):
            step(cwd)
        else:
            argv, env = substitute(step)
            r = run(argv, cwd, environment(cwd, env), f"{cmd.where} (prerequisite)")
            assert r.returncode == 0, f"prerequisite of {cmd.where} failed: {shlex.join(step)}\n{r.stderr}"
    expected = EXPECTED_STATUS.get(cmd.text, (0, ""))[0]
    for k, words in enumerate(variants(list(cmd.words))):
        argv, env = substitute(words)
        env = environment(cwd, env)
        what = f"{cmd.where}{' (with its optional arguments)' if k else ''}"
        if words[:2] == ["magis", "app"]:
            serve(argv, cwd, env, what)
            continue
        r = run_checked(argv, cwd, env, what, cmd.text, expected)
        if k == 0:
            check_figures(FIGURES.get(cmd.text, ()), r.stdout, docs_text, what)
    for extra in EXTRAS.get(cmd.text, ()):
        for name, text in extra.files.items():
            (cwd / name).write_text(text)
        argv, env = substitute(list(extra.argv))
        what = f"{cmd.where} (named next to it)"
        r = run_checked(argv, cwd, environment(cwd, env), what, shlex.join(extra.argv), 0)
        check_figures(extra.figures, r.stdout, docs_text, f"`{shlex.join(extra.argv)}` after {cmd.where}")


def run_checked(argv: list[str], cwd: Path, env: dict[str, str], what: str, text: str,
                expected: int) -> subprocess.CompletedProcess:
    """Run a command and check its exit status, that it printed no traceback, and that ``--json``
    printed JSON."""
    r = run(argv, cwd, env, what)
    assert r.returncode == expected, (f"{what}: `{text}` ran as `{shlex.join(argv[1:])}` and exited "
                                      f"{r.returncode}, not {expected}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    assert "Traceback" not in r.stderr, f"{what}: a traceback\n{r.stderr}"
    if "--json" in argv:
        json.loads(r.stdout)
    if expected == 3:  # a plan or the rows written, a limit not reached: a warning, not an error
        assert "magis: warning: " in r.stderr and "not reached" in r.stderr and "magis: error" not in r.stderr, r.stderr
    return r


def docs_text() -> str:
    return " ".join(" ".join(p.read_text().split()) for p in doc_files())


# ---- the tests -------------------------------------------------------------------------------------

def test_reading_a_block():
    lines = ["magis info g.json.gz [--device a100-80gb] [--json]   # a comment && not a command",
             "# a line of comment",
             "magis transform g.json.gz --swap add#1:mm \\",
             "    --remat x:y -o h.json.gz",
             "magis import m.py:build --forward -o c.json.gz && magis fuse c.json.gz --buffer 1KiB -o f.json",
             "magis export g.json.gz --plan p.json.gz [--point K] -o s.py"]
    cmds = block_commands("X.md", 10, lines)
    assert [(c.line, c.text) for c in cmds] == [
        (10, "magis info g.json.gz [--device a100-80gb] [--json]"),
        (12, "magis transform g.json.gz --swap add#1:mm --remat x:y -o h.json.gz"),
        (14, "magis import m.py:build --forward -o c.json.gz"),
        (14, "magis fuse c.json.gz --buffer 1KiB -o f.json"),
        (15, "magis export g.json.gz --plan p.json.gz [--point K] -o s.py")]
    assert variants(list(cmds[0].words)) == [["magis", "info", "g.json.gz"],
                                       ["magis", "info", "g.json.gz", "--device", "a100-80gb", "--json"]]
    assert variants(list(cmds[4].words))[1][-4:] == ["--point", "1", "-o", "s.py"]
    assert variants(list(cmds[1].words)) == [list(cmds[1].words)]
    argv, env = substitute(["PYTHONPATH=.", "magis", "compare", "bert_base,vit_base", "--time-budget", "5", "-o", "c"])
    assert argv[-5:] == ["bert_tiny,vit_tiny", "--time-budget", "1", "-o", "c"] and env == {"PYTHONPATH": str(ROOT)}
    assert substitute(["magis", "optimize", "g", "--pareto", "-o", "p"])[0][-2:] == ["--time-budget", "2"]
    assert substitute(["magis", "fuse", "g", "--buffer", "1KiB", "-o", "f"])[0][-2:] == ["--explainer", "oracle"]
    with pytest.raises(AssertionError, match="NOT_RUN"):
        substitute(["make", "bench"])


def test_tables_name_commands_of_the_docs():
    """No stale entry: every command a table names is a command of the docs, every substituted sample
    exists, and every command of the docs is either run or listed in NOT_RUN with its reason."""
    texts = {c.text for c in doc_commands()}
    for table in (NOT_RUN, EXPECTED_STATUS, PREREQUISITES, FIGURES, EXTRAS):
        assert set(table) <= texts, set(table) - texts
    assert set(TINY) | set(TINY.values()) <= set(sample_graphs.NAMES)
    every = " ".join(texts)
    assert all(name in every for name in USER_FILES)
    assert all(reason for reason in NOT_RUN.values())
    for cmd in doc_commands():
        if cmd.text not in NOT_RUN:
            for words in variants(list(cmd.words)):
                substitute(words)  # raises for a program this file cannot run


@pytest.mark.slow
def test_the_docs_commands_run_and_print_what_they_quote(tmp_path):
    text = docs_text()
    for name, content in USER_FILES.items():
        (tmp_path / name).write_text(content)
    t0 = time.perf_counter()
    for cmd in doc_commands():
        if cmd.text not in NOT_RUN:
            run_command(cmd, tmp_path, text)
    print(f"{time.perf_counter() - t0:6.1f} s  in all")
    # what the block's last lines left behind is what they say they wrote
    with gzip.open(tmp_path / "sru_sub.json.gz") as f:
        assert len(json.load(f)["nodes"]) == 579


BTLM_ADAM = ("(`magis import btlm_3b --adam 1e-4`: 10,652 ops, eager peak 128.9 GiB) has a resident floor of 34.5 "
             "GiB (`magis info`)")

PROSE = (  # commands the prose names inline with the figures they print; full size (the figures are its)
    (("magis", "import", "btlm_3b", "--adam", "1e-4", "-o", "btlm_adam.json.gz"),
     Figure(BTLM_ADAM, ("btlm_3b, 10652 ops (train)", "  baseline peak    128.9 GiB  (traced order"))),
    (("magis", "info", "btlm_adam.json.gz"), Figure(BTLM_ADAM, ("  resident floor: 34.5 GiB (",))),
)


@pytest.mark.slow
def test_prose_figures(tmp_path):
    """Figures the prose quotes as what an inline command prints, on the full-size sample it names (a
    capture on fake tensors: about 20 s for BTLM-3B's 10k-op training step)."""
    text = docs_text()
    for words, figure in PROSE:
        argv, env = substitute(list(words), tiny=False)
        r = run_checked(argv, tmp_path, environment(tmp_path, env), "README (prose)", shlex.join(words), 0)
        check_figures((figure,), r.stdout, text, shlex.join(words))


TRAIN_WITH_PLAN = (  # quoted in the README's output of `PYTHONPATH=. python examples/train_with_plan.py`
    Figure("(0.487x of eager's 2.83 MiB), limit 0.5 = 1.42 MiB", ("of eager's 2.83 MiB), limit 0.5 = 1.42 MiB",)),
    Figure("loss: first 2.3774, last", ("loss: first 2.3774, last",)),  # the last one depends on the threads
    Figure("measured max over 30 steps", ("measured max over 30 steps",)),
    Figure("eager's simulated peak 2.83 MiB, eager measured 2.83 MiB",
           ("eager's simulated peak 2.83 MiB, eager measured 2.83 MiB",)),
    Figure("ok: the loss curve equals eager's and every measured peak is within the plan's simulated peak",
           ("ok: the loss curve equals eager's and every measured peak is within the plan's simulated peak",)),
)


@pytest.mark.slow
def test_train_with_plan_example(tmp_path):
    """``PYTHONPATH=. python examples/train_with_plan.py``, whose output the README quotes: its figures
    that depend neither on the time-bounded search nor on the number of threads (eager's peak, the
    limit, the first loss; the plan's last loss equals eager's), with the search capped at 3 s (its
    default is 10 s)."""
    argv, env = substitute(["PYTHONPATH=.", "python", "examples/train_with_plan.py", "--help"])
    r = run(argv, tmp_path, environment(tmp_path, env), "README: train_with_plan --help")
    assert r.returncode == 0 and "--steps" in r.stdout and "--time-budget" in r.stdout, r.stderr
    argv, env = substitute(["PYTHONPATH=.", "python", "examples/train_with_plan.py", "--time-budget", "3"])
    r = run(argv, tmp_path, environment(tmp_path, env), "README: train_with_plan")
    assert r.returncode == 0, r.stdout + r.stderr
    check_figures(TRAIN_WITH_PLAN, r.stdout, docs_text(), "examples/train_with_plan.py")
    last = re.search(r"loss: first \S+, last (\S+) \(eager (\S+)\)", r.stdout)
    assert last and last[1] == last[2], r.stdout
    assert "PYTHONPATH=. python examples/train_with_plan.py" in docs_text()

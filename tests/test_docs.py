"""The docs cannot go stale: every results table and quoted result figure of README.md and docs/ is
what ``bench/docs.py`` renders from ``bench/results/*.json``, and the site builds with
``mkdocs build --strict`` (which fails on a broken link or anchor)."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_docs", ROOT / "bench" / "docs.py")
docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs)


def test_committed_tables_and_figures_are_what_the_json_renders():
    stale = [f"{p.relative_to(ROOT)}: {d}" for p in docs.doc_files() for d in docs.differences(p.read_text())]
    assert not stale, "stale docs (run `make docs`):\n" + "\n".join(stale)


def test_every_renderer_has_a_table_in_the_docs():
    used = {m["name"] for p in docs.doc_files() for m in docs.BLOCK.finditer(p.read_text())}
    assert set(docs.RENDERERS) <= used, set(docs.RENDERERS) - used
    assert used <= set(docs.RENDERERS), used - set(docs.RENDERERS)


def test_an_edited_cell_is_reported():
    text = (ROOT / "docs" / "magis.md").read_text()
    m = next(m for m in docs.BLOCK.finditer(text) if m["name"] == "pareto")
    row = next(line for line in m["body"].splitlines() if line.startswith("| unet | magis |"))
    cells = row.split(" | ")
    assert cells[3].endswith("x")  # peak at <= 10%
    edited_row = " | ".join([*cells[:3], "0.001x", *cells[4:]])
    edited = text.replace(row, edited_row)
    assert edited != text
    found = docs.differences(edited)
    assert len(found) == 1 and found[0].startswith("results:pareto, line ") and "0.001x" in found[0], found
    line = int(found[0].split("line ")[1].split(":")[0])
    assert edited.splitlines()[line - 1] == edited_row
    assert docs.differences(docs.render(edited)) == []  # rendering puts the JSON's value back


def test_an_edited_figure_is_reported():
    text = (ROOT / "docs" / "corpus.md").read_text()
    tag = "<!-- fig:zoo.sd_unet.torch_mincut.peak_at_10pct -->"
    assert tag in text
    start = text.index(tag) + len(tag)
    value = text[start:text.index("<!-- /fig -->", start)]
    edited = text[:start] + "0.594x" + text[start + len(value):]
    found = docs.differences(edited)
    assert value != "0.594x" and len(found) == 1 and "0.594x" in found[0] and value in found[0], found


def test_every_named_figure_is_quoted_in_the_docs():
    used = {m["name"] for p in docs.doc_files() for m in docs.FIG.finditer(p.read_text())}
    assert set(docs.FIGURES) <= used, set(docs.FIGURES) - used


def test_a_prose_figure_follows_its_json(monkeypatch):
    """A changed result in the JSON makes the committed figure stale, and rendering writes the new one."""
    text = (ROOT / "docs" / "swapadvisor.md").read_text()
    tag = "<!-- fig:swapadvisor.btlm_3b.8.magis_pool -->"
    assert tag in text
    data = copy.deepcopy(docs.load("swapadvisor"))
    row = next(r for r in data["rows"] if r["workload"] == "btlm_3b" and r["fraction"] == "1/8")
    row["cells"]["magis_pool"]["throughput"] = 0.5
    real = docs.load
    monkeypatch.setattr(docs, "load", lambda name: data if name == "swapadvisor" else real(name))
    found = docs.differences(text)
    assert any(d.startswith("fig:swapadvisor.btlm_3b.8.magis_pool,") and "'0.50'" in d for d in found), found
    assert f"{tag}0.50<!-- /fig -->" in docs.render(text)


def test_the_k_scaling_table_has_every_run():
    rows = docs.load("substitutions")["k_scaling"]
    body = docs.RENDERERS["substitutions_k_scaling"]().splitlines()[2:]
    assert len(body) == len(rows) > 0
    for line, name in zip(body, rows, strict=True):
        graph, k = name.rsplit(" K=", 1)
        assert line.startswith(f"| {graph.replace('_', ' ')} | {k} |"), (line, name)


def test_an_unknown_figure_name_is_an_error():
    with pytest.raises(KeyError, match="no figure named"):
        docs.render("<!-- fig:pareto.nonesuch.magis.peak_at_10pct --><!-- /fig -->")
    with pytest.raises(KeyError, match="no figure named"):
        docs.figure("nonesuch")


def test_an_unknown_table_name_is_an_error():
    with pytest.raises(KeyError, match="no results table named"):
        docs.render("<!-- results:nonesuch -->\n<!-- /results:nonesuch -->")


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300)


def test_the_site_builds_in_strict_mode(tmp_path):
    r = mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "magis" / "index.html").exists()


def test_strict_mode_fails_on_a_broken_link(tmp_path):
    """The same configuration's checks on a two-page site: a good link builds, a broken one fails."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the other page](other.md#a-section).\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A section\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((ROOT / "mkdocs.yml").read_text().split("\nnav:")[0] + "\n")
    assert mkdocs(config, tmp_path / "ok").returncode == 0
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [a page](missing.md).\n")
    r = mkdocs(config, tmp_path / "broken")
    assert r.returncode != 0 and "missing.md" in r.stdout + r.stderr, r.stdout + r.stderr
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the other page](other.md#no-such-section).\n")
    r = mkdocs(config, tmp_path / "anchor")
    assert r.returncode != 0 and "no-such-section" in r.stdout + r.stderr, r.stdout + r.stderr

"""The command line as a new user first meets it (issue 27): verify a plan of one's own model file,
exit statuses that tell "limit not reached" and "verification failed" from bad input, verify's
summary, a mistyped sample name, and output piped into ``head``."""

from __future__ import annotations

import pytest

import sample_graphs
from app.cli import main


@pytest.mark.parametrize("args, message", [
    (["info", "bret_tiny"], "no sample or graph file named 'bret_tiny'; did you mean bert_tiny? (samples: "),
    (["optimize", "vit_tyni", "--memory-limit", "0.5", "-o", "p.json"],
     "no sample or graph file named 'vit_tyni'; did you mean vit_tiny? (samples: "),
    (["sweep", "resnet_50", "--memory-limits", "0.5", "-o", "out"],
     "no sample or graph file named 'resnet_50'; did you mean resnet50? (samples: "),
    (["info", "zzz"], "no sample or graph file named 'zzz' (samples: "),
    (["import", "bret_tiny", "-o", "x.json"], "unknown sample 'bret_tiny'; did you mean bert_tiny? (samples: "),
    (["verify", "unet_tinny"], "unknown sample 'unet_tinny'; did you mean unet_tiny? (samples: "),
])
def test_a_mistyped_sample_name_names_the_samples(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"magis: error: {message}")
    assert ", ".join(sample_graphs.NAMES) in err[-1]
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_missing_path_is_still_no_such_file(tmp_path, capsys):
    assert main(["info", str(tmp_path / "bert.json.gz")]) == 2
    assert capsys.readouterr().err.strip() == f"magis: error: {tmp_path / 'bert.json.gz'}: no such file"

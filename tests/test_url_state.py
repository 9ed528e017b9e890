"""The view in the page's address (``app.url_state``): encode / decode round trip, and a query with
unknown or malformed values gives the defaults (None) for those values, never an error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.url_state import TABS, decode, encode

MODELS = ["sample:bert_tiny", "sample:fig6_ftree", "upload:3f2a"]


@pytest.mark.parametrize("gid", MODELS)
@pytest.mark.parametrize("stop", [0, 1, 17])
@pytest.mark.parametrize("tab", TABS)
def test_round_trip(gid, stop, tab):
    q = encode(gid, stop, tab)
    assert q.startswith("?")
    want = {"gid": gid, "stop": stop, "tab": None if tab == "analysis" else tab}
    assert decode(q, MODELS) == want
    assert decode(q.removeprefix("?"), MODELS) == want  # with or without the "?"


def test_samples_are_written_by_name():
    assert encode("sample:bert_tiny", 3, "pareto") == "?sample=bert_tiny&stop=3&tab=pareto"
    assert encode("sample:bert_tiny", None, "analysis") == "?sample=bert_tiny"  # the default tab is left out
    assert encode(None) == ""


@pytest.mark.parametrize("query, want", [
    ("", {"gid": None, "stop": None, "tab": None}),
    (None, {"gid": None, "stop": None, "tab": None}),
    ("?sample=nope&stop=2&tab=pareto", {"gid": None, "stop": 2, "tab": "pareto"}),  # unknown model
    ("?model=sample:bert_tiny", {"gid": "sample:bert_tiny", "stop": None, "tab": None}),
    ("?sample=bert_tiny&stop=-1", {"gid": "sample:bert_tiny", "stop": None, "tab": None}),
    ("?sample=bert_tiny&stop=1.5&tab=nope", {"gid": "sample:bert_tiny", "stop": None, "tab": None}),
    ("?stop=%EF%BC%93", {"gid": None, "stop": None, "tab": None}),  # a full-width digit is not a stop
    ("?stop=99999999999999999999", {"gid": None, "stop": None, "tab": None}),
    ("?tab=steps&tab=swaps", {"gid": None, "stop": None, "tab": None}),  # repeated: ambiguous, dropped
    ("?%%%&&==&stop", {"gid": None, "stop": None, "tab": None}),
    ("?" + "&".join(f"k{i}=1" for i in range(50)), {"gid": None, "stop": None, "tab": None}),
])
def test_bad_values_fall_back_to_defaults(query, want):
    assert decode(query, MODELS) == want


@given(st.text(max_size=200))
def test_any_text_decodes_without_error(text):
    got = decode(text, MODELS)
    assert set(got) == {"gid", "stop", "tab"}
    assert got["gid"] in (None, *MODELS)
    assert got["tab"] in (None, *TABS)
    assert got["stop"] is None or (isinstance(got["stop"], int) and got["stop"] >= 0)

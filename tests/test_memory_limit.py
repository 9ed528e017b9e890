"""``core.search.limits.MemoryLimit``: a bare number is a fraction of the baseline peak in (0, 1], a
size needs a unit; anything else (1.5, 4096, 0, lots) is refused with a one-line message, never read
as bytes."""

from __future__ import annotations

import pickle

import pytest

from core.search.limits import MemoryLimit

PEAK = 10_000


@pytest.mark.parametrize("given, text, fraction, size, resolved", [
    ("0.5", "0.5", 0.5, None, 5_000),
    (" 0.25 ", "0.25", 0.25, None, 2_500),
    ("1", "1", 1.0, None, PEAK),
    (0.8, "0.8", 0.8, None, 8_000),
    (1, "1", 1.0, None, PEAK),
    ("1e-3", "1e-3", 1e-3, None, 10),
    ("8GiB", "8GiB", None, 8 << 30, 8 << 30),
    ("8 GiB", "8GiB", None, 8 << 30, 8 << 30),
    ("512MiB", "512MiB", None, 512 << 20, 512 << 20),
    ("1.5GB", "1.5GB", None, 1_500_000_000, 1_500_000_000),
    ("4096B", "4096B", None, 4096, 4096),
])
def test_fractions_and_sizes(given, text, fraction, size, resolved):
    lim = MemoryLimit.parse(given)
    assert (str(lim), lim.fraction, lim.size) == (text, fraction, size)
    assert lim.bytes(PEAK) == resolved and isinstance(lim.bytes(PEAK), int)
    assert MemoryLimit.parse(lim) is lim
    assert pickle.loads(pickle.dumps(lim)) == lim  # sweep jobs carry it to worker processes


def test_a_fraction_rounds_down_to_whole_bytes():
    assert MemoryLimit.parse("0.9").bytes(1001) == 900  # 900.9 bytes: a peak of 900 is within, 901 is not
    assert MemoryLimit.of_bytes(4096) == MemoryLimit.parse("4096B")


@pytest.mark.parametrize("given, words", [
    ("1.5", "'1.5' is not a memory limit: a fraction of the peak must be at most 1; for a size give units, "
            "e.g. 1.5GiB"),
    (1.5, "a fraction of the peak must be at most 1; for a size give units, e.g. 1.5GiB"),
    ("4096", "'4096' is not a memory limit: a fraction of the peak must be at most 1; for a size give units, "
             "e.g. 4096B"),
    ("0", "a fraction of the peak must be above 0 and at most 1"),
    ("-0.5", "a fraction of the peak must be above 0 and at most 1"),
    ("nan", "a fraction of the peak must be above 0 and at most 1"),
    ("inf", "a fraction of the peak must be above 0 and at most 1"),
    ("0GiB", "a size must be at least 1 byte"),
    ("lots", "'lots' is not a size (e.g. 8GiB, 512MiB) or a fraction of the peak (e.g. 0.5)"),
    ("", "is not a size"),
    ("-1GiB", "is not a size"),
    (True, "is not a memory limit"),
    (None, "is not a memory limit"),
])
def test_refused_limits_say_why_in_one_line(given, words):
    with pytest.raises(ValueError) as e:
        MemoryLimit.parse(given)
    assert words in str(e.value) and "\n" not in str(e.value)

"""The embedded broker's memory judged against its limit: sizes, growth, the time left, the levels."""

from __future__ import annotations

import pytest

from streamwarden.local.broker_memory import MIB, BrokerMemory, Level, parse_size


@pytest.mark.parametrize(("text", "size"), [("512m", 512 * MIB), ("2g", 2048 * MIB), ("1.5GiB", 1536 * MIB),
                                            ("4096", 4096), ("3 GB", 3072 * MIB)])
def test_sizes_are_read_in_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1g", "0", "2x"])
def test_a_bad_size_names_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size such as 512m"):
        parse_size(text)


def test_growth_and_time_left_come_from_the_last_ten_minutes() -> None:
    memory = BrokerMemory(limit=1000 * MIB)
    assert memory.add(0.0, 100 * MIB).growth is None  # one sample: no rate yet
    assert memory.add(30.0, 110 * MIB).growth is None  # under a minute apart: no rate yet
    reading = memory.add(3600.0, 400 * MIB)  # the first samples fall out of the window
    assert reading.growth is None
    reading = memory.add(3660.0, 401 * MIB)
    assert reading.growth == pytest.approx(MIB / 60)
    assert reading.seconds_left == pytest.approx(599 * 60)
    assert reading.level is Level.OK
    assert reading.describe() == "broker 401 MiB of 1000 MiB, +60 MiB/h, limit in ~10.0 h"


def test_levels_warn_at_eighty_percent_and_are_full_at_the_limit() -> None:
    memory = BrokerMemory(limit=1000)
    assert memory.add(0.0, 799).level is Level.OK
    assert memory.add(1.0, 800).level is Level.WARN
    assert memory.add(2.0, 1000).level is Level.FULL
    shrinking = BrokerMemory(limit=1000)
    shrinking.add(0.0, 500)
    assert shrinking.add(120.0, 400).seconds_left is None  # not growing: no limit ahead

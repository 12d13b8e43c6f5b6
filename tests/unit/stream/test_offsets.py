"""Offset documents and admission control of the Kafka source."""

from __future__ import annotations

import json

import pytest

from streamwarden.kafka.admin import TopicPartitionId as TP
from streamwarden.stream.source.offsets import from_doc, pack, spread_limit, to_doc


def test_documents_are_canonical_whatever_the_insertion_order() -> None:
    positions = {TP("b", 10): 5, TP("a", 2): 1, TP("b", 9): 7}
    assert json.dumps(to_doc(positions)) == '{"a": {"2": 1}, "b": {"9": 7, "10": 5}}'
    assert from_doc(to_doc(positions)) == positions


@pytest.mark.parametrize(("backlogs", "limit", "granted"), [
    ([100, 100, 100, 100], 100, [25, 25, 25, 25]),
    ([10, 100, 100], 90, [10, 40, 40]),  # a small backlog leaves its share to the others
    ([5, 5], 100, [5, 5]),  # the limit is not a target
    ([0, 50], 10, [0, 10]),
    ([3, 3, 3], 7, [3, 2, 2]),  # remainders are deterministic
])
def test_spread_limit_is_fair_and_capped(backlogs: list[int], limit: int, granted: list[int]) -> None:
    start = {TP("t", i): 1000 for i in range(len(backlogs))}
    latest = {TP("t", i): 1000 + n for i, n in enumerate(backlogs)}
    end = spread_limit(start, latest, limit)
    assert [end[TP("t", i)] - 1000 for i in range(len(backlogs))] == granted
    assert sum(end[tp] - start[tp] for tp in start) <= limit


def test_new_partitions_keep_their_entry_offset() -> None:
    end = spread_limit({TP("t", 0): 0}, {TP("t", 0): 50, TP("u", 0): 7}, 10)
    assert end == {TP("t", 0): 10, TP("u", 0): 7}


def test_pack_balances_ranges_over_tasks_and_keeps_every_one() -> None:
    sizes = [100, 1, 50, 50, 30, 20, 5]
    packed = pack(sizes, lambda n: n, 3)
    assert sorted(n for task in packed for n in task) == sorted(sizes)
    assert [sum(task) for task in packed] == [100, 80, 76]
    assert pack(sizes, lambda n: n, 0) == pack(sizes, lambda n: n, 7) == [[n] for n in sizes]

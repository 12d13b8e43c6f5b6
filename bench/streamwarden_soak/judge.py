"""The soak's verdict on the data: every offset exactly once across the tables, every session's table as its
producer meant it, every gap and malformed record where it belongs.

Read after the platform stopped, through each table's Delta log (``verify_table`` checks the log against the
files, and each table alone for duplicates), against the end offsets the broker answered once the producers had
stopped and the producers' own reports (the final table of every session still open at their end).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]

from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.testing.exactly_once import verify_table
from streamwarden.testing.replay import final_tables, read_table
from streamwarden.wire import DEMO_SCHEMA, Table

_SHOWN = 10


@dataclass
class OffsetVerdict:
    partitions: int = 0
    expected: int = 0
    found: int = 0
    lost: int = 0
    duplicated: int = 0
    in_both_tables: int = 0
    table_problems: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


@dataclass
class SessionVerdict:
    expected_sessions: int = 0
    output_sessions: int = 0
    compared: int = 0
    gapped_left_out: int = 0
    cells_compared: int = 0
    cells_wrong: int = 0
    sessions_wrong: int = 0
    missing: int = 0  # open at the producers' end, not in the output
    extra: int = 0  # open in the output, ended (or never sent) by the producers
    left_out_producers: list[str] = field(default_factory=list)  # run ids whose messages were not all delivered
    examples: list[str] = field(default_factory=list)


@dataclass
class InputVerdict:
    gaps_injected: int = 0
    gaps_quarantined: int = 0  # gapped sessions with a SEQUENCE_GAP row in quarantine
    malformed_sent: int = 0
    malformed_quarantined: int = 0
    examples: list[str] = field(default_factory=list)


@dataclass
class DataVerdict:
    offsets: OffsetVerdict
    sessions: SessionVerdict
    inputs: InputVerdict

    @property
    def problems(self) -> list[str]:
        o, s, i = self.offsets, self.sessions, self.inputs
        found = [f"{o.lost:,} offset(s) lost" if o.lost else "", f"{o.duplicated:,} offset(s) duplicated"
                 if o.duplicated else "", *o.table_problems,
                 f"{s.cells_wrong:,} session cell(s) wrong in {s.sessions_wrong} session(s), {s.missing} missing, "
                 f"{s.extra} extra" if s.cells_wrong or s.missing or s.extra else "",
                 f"{i.gaps_injected - i.gaps_quarantined} gapped session(s) without a SEQUENCE_GAP in quarantine"
                 if i.gaps_quarantined < i.gaps_injected else "",
                 f"{i.malformed_sent - i.malformed_quarantined} malformed record(s) not in quarantine"
                 if i.malformed_quarantined < i.malformed_sent else ""]
        if o.expected == 0:
            found.append("no end offsets: the broker was not asked before the stop")
        return [line for line in found if line]

    def to_json(self) -> dict[str, Any]:
        return {"offsets": asdict(self.offsets), "sessions": asdict(self.sessions), "inputs": asdict(self.inputs),
                "problems": self.problems}


KEYS = {SESSION_ROWS: ["topic", "partition", "offset", "row_id"], QUARANTINE: ["topic", "partition", "offset"]}
"""What identifies one row: a snapshot's offset holds a row per table row (``row_id``), an offset in quarantine one."""


def judge_offsets(output: Path, ends: dict[str, dict[str, int]]) -> OffsetVerdict:
    """Per site partition: every offset below its end in exactly one of the two tables, no row twice."""
    verdict = OffsetVerdict()
    distinct = []
    for name, keys in KEYS.items():
        report = verify_table(output / name)  # the log against the files, every row inside a committed run
        verdict.table_problems += [f"{name}: {problem}" for problem in report.problems]
        rows = read_table(output / name, keys, absent=pa.schema(
            [("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("row_id", pa.string())]))
        unique = rows.group_by(keys).aggregate([])
        verdict.duplicated += rows.num_rows - unique.num_rows
        if rows.num_rows > unique.num_rows:
            verdict.examples.append(f"{name}: {rows.num_rows - unique.num_rows:,} row(s) more than once")
        offsets = unique.group_by(["topic", "partition", "offset"]).aggregate([]).cast(
            pa.schema([("topic", pa.string()), ("partition", pa.int64()), ("offset", pa.int64())]))
        distinct.append(offsets)
    both = pa.concat_tables(distinct)
    counted = both.group_by(["topic", "partition"]).aggregate(
        [("offset", "count"), ("offset", "count_distinct"), ("offset", "min"), ("offset", "max")])
    found = {(r["topic"], r["partition"]): r for r in counted.to_pylist()}
    for topic, partitions in sorted(ends.items()):
        for partition, end in sorted(partitions.items()):
            verdict.partitions += 1
            verdict.expected += end
            row = found.pop((topic, int(partition)), None)
            if row is None:
                verdict.lost += end
                _example(verdict.examples, f"{topic}[{partition}]: none of its {end:,} offsets in the tables")
                continue
            count, unique_offsets = row["offset_count"], row["offset_count_distinct"]
            verdict.found += unique_offsets
            verdict.in_both_tables += count - unique_offsets
            if row["offset_min"] < 0 or row["offset_max"] >= end:
                _example(verdict.examples, f"{topic}[{partition}]: offsets {row['offset_min']}.."
                                           f"{row['offset_max']} beyond the log's 0..{end - 1}")
            inside = min(unique_offsets, end)
            if inside < end:
                verdict.lost += end - inside
                _example(verdict.examples, f"{topic}[{partition}]: {inside:,} of its {end:,} offsets in the tables")
    verdict.duplicated += verdict.in_both_tables
    for (topic, partition), row in found.items():
        _example(verdict.examples, f"{topic}[{partition}]: {row['offset_count']:,} offsets of a partition the "
                                   "broker did not list")
    return verdict


def _tables_of(reports: Iterable[dict[str, Any]]) -> tuple[dict[str, Table], set[str], set[str]]:
    """The producers' reference tables, the sessions they gapped, and the run ids whose reference is incomplete: a
    producer counts an event once it has queued it, so one whose messages were not all delivered (a burst during a
    broker pause, purged at its end) meant tables the broker never got. Their offsets are still judged."""
    expected: dict[str, Table] = {}
    gapped: set[str] = set()
    incomplete: set[str] = set()
    for report in reports:
        if report.get("undelivered") or report.get("delivery_errors"):
            incomplete.add(str(report["run_id"]))
            continue
        expected.update(report.get("expected_tables") or {})
        gapped |= {gap["session_id"] for gap in report.get("gaps_injected", [])}
    return expected, gapped, incomplete


def _run_of(session: str) -> str:
    return session.split("-")[1] if session.count("-") >= 2 else ""


def judge_sessions(output: Path, reports: list[dict[str, Any]]) -> SessionVerdict:
    """Every session open at its producer's end against the output's final table of it, cell by cell."""
    verdict = SessionVerdict()
    expected, gapped, incomplete = _tables_of(reports)
    got = {session: table for session, table in final_tables(read_table(output / SESSION_ROWS), DEMO_SCHEMA).items()
           if _run_of(session) not in incomplete}
    verdict.left_out_producers = sorted(incomplete)
    verdict.expected_sessions, verdict.output_sessions = len(expected), len(got)
    verdict.gapped_left_out = len(gapped)
    columns = DEMO_SCHEMA.names
    for session in sorted(set(expected) | set(got)):
        if session in gapped:
            continue
        if session not in got:
            verdict.missing += 1
            _example(verdict.examples, f"{session}: open at its producer's end, not in the output")
            continue
        if session not in expected:
            verdict.extra += 1
            _example(verdict.examples, f"{session}: open in the output, not at its producer's end")
            continue
        verdict.compared += 1
        want, have = expected[session], got[session]
        wrong = 0
        for row_id in set(want) | set(have):
            for column in columns:
                verdict.cells_compared += 1
                if (want.get(row_id) or {}).get(column) != (have.get(row_id) or {}).get(column):
                    wrong += 1
        if wrong:
            verdict.sessions_wrong += 1
            verdict.cells_wrong += wrong
            _example(verdict.examples, f"{session}: {wrong} cell(s) differ")
    return verdict


def judge_inputs(output: Path, reports: list[dict[str, Any]], malformed: list[tuple[str, int, int]]) -> InputVerdict:
    """Each injected gap and each malformed record seen by the stream where it belongs: in quarantine."""
    verdict = InputVerdict()
    _, gapped, _ = _tables_of(reports)
    quarantine = read_table(output / QUARANTINE, ["topic", "partition", "offset", "key", "error_class"],
                            absent=pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                                              ("offset", pa.int64()), ("key", pa.binary()),
                                              ("error_class", pa.string())]))
    gap_rows = quarantine.filter(pc.equal(quarantine.column("error_class"), "SEQUENCE_GAP"))
    gap_keys = {key.decode(errors="replace") if isinstance(key, bytes) else str(key)
                for key in gap_rows.column("key").to_pylist() if key is not None}
    verdict.gaps_injected = len(gapped)
    verdict.gaps_quarantined = len(gapped & gap_keys)
    for session in sorted(gapped - gap_keys)[:_SHOWN]:
        verdict.examples.append(f"gap in {session}: no SEQUENCE_GAP row in quarantine")
    where = set(zip(quarantine.column("topic").to_pylist(), quarantine.column("partition").to_pylist(),
                    quarantine.column("offset").to_pylist(), strict=True))
    verdict.malformed_sent = len(malformed)
    verdict.malformed_quarantined = sum(1 for record in malformed if record in where)
    for record in [r for r in malformed if r not in where][:_SHOWN]:
        verdict.examples.append(f"malformed record {record[0]}[{record[1]}]@{record[2]} not in quarantine")
    return verdict


def _example(examples: list[str], line: str) -> None:
    if len(examples) < _SHOWN:
        examples.append(line)


def producer_reports(results: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(results.glob("producer-*.json"))]


def judge_data(output: Path, results: Path, ends: dict[str, dict[str, int]],
               malformed: list[tuple[str, int, int]]) -> DataVerdict:
    reports = producer_reports(results)
    return DataVerdict(judge_offsets(output, ends), judge_sessions(output, reports),
                       judge_inputs(output, reports, malformed))

"""The data checks with Great Expectations on real Delta tables committed by the real DeltaSink, with real GX.

The tables have the columns the session job writes (``session_rows``: the Kafka coordinates, the session
columns, ``op``, ``row_id`` and the demo ``STREAMWARDEN_TABLE_SCHEMA``; ``quarantine`` with its Kafka
timestamp): every fifth offset is quarantined, the others are a snapshot of two rows. Faults are written
into chosen offsets, and each expectation must fail with its class, naming those offsets.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
import pytest

from fixtures import TESTS
from fixtures.stream_output import add_copy, commit_batch, committed_paths, settings_for, write_checkpoint
from streamwarden.failures import ConfigError
from streamwarden.settings import Settings
from streamwarden.stream.sink.delta_sink import DeltaSink
from streamwarden.tables.location import QUARANTINE, RECORDS, SESSION_ROWS, TableLocation
from streamwarden.tables.ranges import OffsetRanges
from streamwarden.validation.coverage import check_coverage
from streamwarden.validation.findings import Finding, FindingClass
from streamwarden.validation.request import Check, Rows, ValidationRequest
from streamwarden.validation.settings import ValidationSettings, load_validation_settings
from streamwarden.validation.snapshot import pin
from streamwarden.validation.steps import run

BATCH: OffsetRanges = {"sites-a": {0: (0, 50), 1: (0, 20)}, "sites-b": {0: (0, 15)}}
PARTITION_BY = ["source_topic"]
UTC_US = pa.timestamp("us", tz="UTC")
SCHEMAS = {
    SESSION_ROWS: pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                             ("session_id", pa.string()), ("seq", pa.int64()), ("event_ts", UTC_US),
                             ("op", pa.string()), ("row_id", pa.string()), ("price", pa.float64()),
                             ("qty", pa.int64()), ("status", pa.string()), ("venue", pa.string()),
                             ("active", pa.bool_()), ("source_topic", pa.string())]),
    QUARANTINE: pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                           ("key", pa.binary()), ("value", pa.binary()), ("kafka_timestamp", UTC_US),
                           ("error_class", pa.string()), ("error_message", pa.string()),
                           ("source_topic", pa.string())]),
}
NOW = datetime.now(UTC)
Row = dict[str, Any]
Fault = Callable[[str, int, int, list[Row]], list[Row]]
OFFLINE = ValidationSettings(kafka=False)
DATA = frozenset({Check.COVERAGE, Check.EXPECTATIONS})


def session_rows(topic: str, partition: int, offset: int) -> list[Row]:
    """A snapshot of two rows, as the built-in handler writes it."""
    return [{"topic": topic, "partition": partition, "offset": offset, "session_id": f"s{offset % 7}",
             "seq": offset, "event_ts": datetime.now(UTC) - timedelta(minutes=2), "op": "snapshot", "row_id": f"r{i}",
             "price": 10.0 + i, "qty": 1, "status": "open", "venue": "x", "active": True} for i in range(2)]


def quarantine_row(topic: str, partition: int, offset: int) -> Row:
    return {"topic": topic, "partition": partition, "offset": offset, "key": b"k", "value": b"{",
            "kafka_timestamp": datetime.now(UTC) - timedelta(minutes=1), "error_class": "invalid_json",
            "error_message": "bad"}


def commit(settings: Settings, ranges: OffsetRanges, batch_id: int, fault: Fault | None = None,
           schemas: dict[str, pa.Schema] = SCHEMAS) -> None:
    """Both tables of ``ranges`` committed as the job commits them (every fifth offset quarantined); ``fault``
    rewrites the rows of one offset of session_rows."""
    for name in (SESSION_ROWS, QUARANTINE):
        schema = schemas[name]
        sink = DeltaSink(TableLocation.of(settings, name), schema, PARTITION_BY)
        plan = sink.plan(ranges, batch_id)
        for topic, parts in plan.covers.items():
            folder = Path(plan.write_dir) / f"source_topic={topic}"
            folder.mkdir(parents=True, exist_ok=True)
            for partition, intervals in parts.items():
                rows: list[Row] = []
                for start, end in intervals:
                    for offset in range(start, end):
                        if name == QUARANTINE and offset % 5 == 0:
                            rows.append(quarantine_row(topic, partition, offset))
                        elif name == SESSION_ROWS and offset % 5:
                            made = session_rows(topic, partition, offset)
                            rows += fault(topic, partition, offset, made) if fault else made
                file_schema = pa.schema([f for f in schema if f.name != "source_topic"])
                pq.write_table(pa.Table.from_pylist(rows, file_schema), folder / f"part-{partition}.parquet")
        sink.commit(plan)


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return settings_for(tmp_path)


def request(*tables: str) -> ValidationRequest:
    return ValidationRequest(tables or (SESSION_ROWS, QUARANTINE), DATA)


def of(findings: tuple[Finding, ...] | list[Finding], text: str) -> list[Finding]:
    return [f for f in findings if text in f.detail]


def test_clean_tables_pass_and_the_report_links_the_data_docs(settings: Settings) -> None:
    commit(settings, BATCH, 0)
    write_checkpoint(settings, [BATCH])
    recorded = run(settings, OFFLINE, ValidationRequest((SESSION_ROWS, QUARANTINE), frozenset(Check) - {
        Check.KAFKA, Check.AUDIT}))
    report = recorded.report
    assert report.passed, report.text()
    assert Check.EXPECTATIONS.value in report.checks and recorded.last_validated is not None
    docs = Path(str(report.data_docs))
    assert docs == settings.run_paths.data_docs / "index.html" and docs.is_file()
    assert set(report.data_docs_pages) == {SESSION_ROWS, f"{SESSION_ROWS}.schema", QUARANTINE,
                                           f"{QUARANTINE}.schema", "partitions"}
    assert all(Path(page).is_file() for page in report.data_docs_pages.values())
    written = json.loads(recorded.path.read_text())
    assert written["data_docs"] == str(docs) and written["data_docs_pages"] == report.data_docs_pages
    summary = report.summary(recorded.path)
    assert summary["data_docs"] == str(docs) and summary["data_docs_pages"]["partitions"].endswith(".html")
    assert f"Data Docs: {docs}" in report.text()
    index = docs.read_text()
    for page in report.data_docs_pages.values():  # each page linked from a plain HTML table, no script needed
        assert f'<a href="{Path(page).relative_to(docs.parent).as_posix()}">' in index
    assert "<script" not in index
    for page in docs.parent.rglob("*.html"):  # nothing fetched from another host: readable offline
        assert not re.search(r"<(link|script|img)\b[^>]*(href|src)=\"(https?:)?//", page.read_text()), page


def test_each_expectation_of_the_suite_fails_naming_its_offsets(settings: Settings) -> None:
    def fault(topic: str, partition: int, offset: int, rows: list[Row]) -> list[Row]:
        if (topic, partition) != ("sites-a", 0):
            return rows
        if offset in (3, 4):
            return [{**r, "session_id": None} for r in rows]  # a key null
        if offset == 6:
            return [*rows, rows[0]]  # a row twice
        if offset in (7, 8, 9):
            return [{**r, "op": "upsrt"} for r in rows]  # not an op
        if offset == 11:
            return [{**r, "price": -1.0} for r in rows]  # out of the configured range
        return rows

    commit(settings, BATCH, 0, fault)
    validation = ValidationSettings(kafka=False, ranges={"price": [0, 1000], "session_rows.qty": [0, None]},
                                    quarantine_share=0.1, freshness="1h")
    report = run(settings, validation, request()).report
    failed = [f for f in report.findings if f.finding_class is FindingClass.EXPECTATION_FAILED]
    assert {f.table for f in failed} == {SESSION_ROWS, f"{SESSION_ROWS}+{QUARANTINE}"}, report.text()

    (null,) = of(failed, "expect_column_values_to_not_be_null(session_id)")
    assert (null.topic, null.partition, null.ranges, null.count) == ("sites-a", 0, ((3, 5),), 4)
    assert "4 row(s) at 2 offset(s) fail" in null.detail and "[suite]" in null.detail
    (twice,) = of(failed, "expect_compound_columns_to_be_unique(topic, partition, offset, row_id, ignore_row_if=")
    assert (twice.topic, twice.partition, twice.ranges, twice.count) == ("sites-a", 0, ((6, 7),), 2)
    (op,) = of(failed, "expect_column_values_to_be_in_set(op")
    assert op.ranges == ((7, 10),) and op.count == 6 and "op='upsrt'" in op.detail
    (price,) = of(failed, "expect_column_values_to_be_between(price, min_value=0.0, max_value=1000.0)")
    assert price.ranges == ((11, 12),) and price.count == 2 and "price=-1.0" in price.detail
    assert not of(failed, "(qty")  # within its half-open range
    shares = of(failed, "expect_column_values_to_be_between(quarantine_share")
    assert {(f.topic, f.partition, f.count) for f in shares} == {("sites-a", 0, 10), ("sites-a", 1, 4),
                                                                 ("sites-b", 0, 3)}
    assert "20.00% of the topic-partition's" in shares[0].detail
    assert not [f for f in report.findings if f.finding_class is FindingClass.STALE]  # fresh rows

    page = Path(report.data_docs_pages[SESSION_ROWS]).read_text()
    for shown in ("topic", "partition", "offset", "sites-a", "upsrt"):
        assert shown in page


def test_a_type_unlike_the_schema_fails_and_either_tables_newest_row_counts(settings: Settings) -> None:
    def old(topic: str, partition: int, offset: int, rows: list[Row]) -> list[Row]:
        return [{**r, "event_ts": NOW - timedelta(hours=3)} for r in rows]

    schemas = {**SCHEMAS, SESSION_ROWS: SCHEMAS[SESSION_ROWS].set(
        SCHEMAS[SESSION_ROWS].get_field_index("qty"), pa.field("qty", pa.float64()))}
    commit(settings, BATCH, 0, old, schemas)
    report = run(settings, ValidationSettings(kafka=False, freshness="2h"), request(SESSION_ROWS)).report
    # the newest row of a topic-partition is the newer of session_rows' event_ts (3 h old) and quarantine's
    # kafka_timestamp (1 minute old), whichever tables the rows checks were asked for: none is stale
    (typed,) = report.findings
    assert (typed.finding_class, typed.table, typed.topic, typed.partition) == (
        FindingClass.EXPECTATION_FAILED, SESSION_ROWS, "*", -1)
    assert "(qty, type_='int64')" in typed.detail and "observed 'float64'" in typed.detail


def test_freshness_is_stale_naming_the_newest_offset(settings: Settings) -> None:
    def old(topic: str, partition: int, offset: int, rows: list[Row]) -> list[Row]:
        return [{**r, "event_ts": NOW - timedelta(hours=3)} for r in rows]

    commit(settings, {"sites-a": {0: (1, 5)}}, 0, old)  # no quarantined offset: session_rows alone
    tables = pin(settings, [SESSION_ROWS, QUARANTINE])
    from streamwarden.validation.expectations.run import check_expectations

    outcome = check_expectations(settings, ValidationSettings(kafka=False, freshness="2h"), tables,
                                 checked=[SESSION_ROWS], partitions=check_coverage(tables).partitions, run_id="t")
    (stale,) = outcome.findings
    assert (stale.finding_class, stale.topic, stale.partition, stale.ranges) == (
        FindingClass.STALE, "sites-a", 0, ((4, 5),))
    age = re.search(r"the newest row \(event_ts [0-9-]+ [0-9:.]+\+00:00\) is ([0-9]+) minutes old", stale.detail)
    assert age is not None and int(age.group(1)) >= 180  # NOW is the module's import time: later runs see more
    at_commit = check_expectations(settings, ValidationSettings(kafka=False, freshness="2h"), tables,
                                   checked=[SESSION_ROWS], partitions=check_coverage(tables).partitions,
                                   run_id="t", reference=NOW - timedelta(hours=2))
    assert at_commit.findings == ()  # a pinned version is judged at its commit
    off = check_expectations(settings, ValidationSettings(kafka=False, freshness="none"), tables,
                             checked=[SESSION_ROWS], partitions=check_coverage(tables).partitions, run_id="t")
    assert off.findings == ()


def test_records_rows_are_unique_by_offset(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, pipeline="records")
    commit_batch(settings, BATCH, 0, tables=(RECORDS,))
    report = run(settings, OFFLINE, ValidationRequest((RECORDS,), DATA)).report
    # no quarantine to share offsets with, and no timestamp in these rows: no per-partition batch
    assert report.passed and set(report.data_docs_pages) == {RECORDS, f"{RECORDS}.schema"}
    (copied,) = [p for p in committed_paths(settings, RECORDS) if "sites-b" in p and p.endswith("0-7-b.zstd.parquet")]
    add_copy(settings, RECORDS, copied)  # offsets 7-14 of sites-b[0] committed again
    found = run(settings, OFFLINE, ValidationRequest((RECORDS,), DATA, rows=Rows.ALL)).report.findings
    (twice,) = [f for f in found if f.finding_class is FindingClass.EXPECTATION_FAILED]
    assert (twice.table, twice.topic, twice.partition, twice.ranges, twice.count) == (RECORDS, "sites-b", 0,
                                                                                      ((7, 15),), 16)


def test_a_run_checks_the_rows_committed_since_the_last_validated_version(settings: Settings) -> None:
    def bad_op(topic: str, partition: int, offset: int, rows: list[Row]) -> list[Row]:
        return [{**r, "op": "upsrt"} for r in rows] if (topic, partition, offset) == ("sites-a", 0, 52) else rows

    commit(settings, BATCH, 0)
    first = run(settings, OFFLINE, request())
    assert first.report.passed and first.last_validated is not None
    assert first.report.rows_checked[SESSION_ROWS].startswith(f"{SESSION_ROWS}: 136 rows checked, every row of v")
    validated = first.last_validated["tables"][SESSION_ROWS]["version"]

    commit(settings, {"sites-a": {0: (50, 55)}}, 1, bad_op)  # 4 offsets of rows (50 is quarantined), 8 rows
    second = run(settings, OFFLINE, request()).report
    assert second.rows_checked[SESSION_ROWS] == (f"{SESSION_ROWS}: 8 rows checked, rows committed after "
                                                 f"v{validated} (the last validated version) up to v{validated + 1}")
    (op,) = of(second.findings, "expect_column_values_to_be_in_set(op")
    assert (op.topic, op.partition, op.ranges, op.count) == ("sites-a", 0, ((52, 53),), 2)
    # a failed run leaves the last validated version where it was: the next run reads the same rows again
    third = run(settings, OFFLINE, request()).report
    assert of(third.findings, "expect_column_values_to_be_in_set(op") and "rows committed after v" in \
        third.rows_checked[SESSION_ROWS]
    every = run(settings, OFFLINE, ValidationRequest((SESSION_ROWS,), DATA, rows=Rows.ALL)).report
    assert every.rows_checked[SESSION_ROWS].startswith(f"{SESSION_ROWS}: 144 rows checked, every row of v")
    assert set(every.rows_checked) == {SESSION_ROWS}  # quarantine's rows were not asked for


def test_rows_read_in_batches_find_what_one_batch_finds(settings: Settings) -> None:
    def faults(topic: str, partition: int, offset: int, rows: list[Row]) -> list[Row]:
        if (topic, partition) == ("sites-a", 0) and offset in (3, 4):
            return [{**r, "session_id": None} for r in rows]
        if (topic, partition) == ("sites-b", 0) and offset == 11:
            return [{**r, "op": "upsrt"} for r in rows]
        return rows

    for batch_id, start in enumerate((0, 10, 20)):  # three commits, a file per topic-partition each
        commit(settings, {"sites-a": {0: (start, start + 10)}, "sites-b": {0: (start, start + 10)}}, batch_id, faults)
    whole = run(settings, OFFLINE, request(SESSION_ROWS)).report
    batched = run(settings, ValidationSettings(kafka=False, batch_rows=20), request(SESSION_ROWS)).report
    assert sorted(f.line() for f in batched.findings) == sorted(f.line() for f in whole.findings)
    assert len(whole.findings) == 2, whole.text()
    assert batched.rows_checked[SESSION_ROWS] == f"{SESSION_ROWS}: 96 rows checked, every row of v3, in 6 batches"
    pages = {name for name in batched.data_docs_pages if name.startswith(f"{SESSION_ROWS}.")}
    assert pages == {f"{SESSION_ROWS}.{i}-of-6" for i in range(1, 7)} | {f"{SESSION_ROWS}.schema"}


def test_the_steps_and_the_package_import_no_gx_and_build_no_frame() -> None:
    """What the DAG imports when it is parsed: GX is imported by a run that checks rows, not before."""
    script = ("import sys; import streamwarden.validation.steps, streamwarden.validation.expectations; "
              "print('great_expectations' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"


def write(path: Path, document: Any) -> Path:
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def test_the_users_expectations_join_the_suite_and_name_their_rows(settings: Settings, tmp_path: Path) -> None:
    def priced(topic: str, partition: int, offset: int, rows: list[Row]) -> list[Row]:
        return [{**r, "price": 500.0} for r in rows] if (topic, offset) == ("sites-b", 3) else rows

    commit(settings, BATCH, 0, priced)
    path = write(tmp_path / "mine.yaml", textwrap.dedent("""\
        - table: session_rows
          expectation: expect_column_values_to_be_between
          kwargs: {column: price, max_value: 100}
        - table: quarantine
          expectation: ExpectColumnValuesToBeInSet
          kwargs: {column: error_class, value_set: [invalid_json, oversized]}
        - table: session_rows
          expectation: ExpectColumnValuesToNotBeNull
          kwargs: {column: row_id, row_condition: 'col("op")=="upsert"', condition_parser: great_expectations}
        """))
    report = run(settings, ValidationSettings(kafka=False, expectations=path), request()).report
    (price,) = report.findings
    assert (price.topic, price.partition, price.ranges, price.count) == ("sites-b", 0, ((3, 4),), 2)
    assert "expect_column_values_to_be_between(price, max_value=100" in price.detail
    assert "[mine.yaml entry 0]" in price.detail
    page = Path(report.data_docs_pages[SESSION_ROWS]).read_text()
    assert "sites-b" in page and "500.0" in page


def test_a_whole_table_expectation_and_one_gx_cannot_evaluate_are_findings_of_the_table(settings: Settings,
                                                                                       tmp_path: Path) -> None:
    commit(settings, BATCH, 0)
    path = write(tmp_path / "mine.json", [
        {"table": "session_rows", "expectation": "ExpectColumnMeanToBeBetween",
         "kwargs": {"column": "price", "min_value": 100, "max_value": 200}},
        {"table": "session_rows", "expectation": "ExpectColumnValuesToBeBetween",
         "kwargs": {"column": "status", "min_value": 1, "max_value": 5}}])
    report = run(settings, ValidationSettings(kafka=False, expectations=path), request(SESSION_ROWS)).report
    (mean,) = of(report.findings, "expect_column_mean_to_be_between")
    (typed,) = of(report.findings, "could not be evaluated")
    assert len(report.findings) == 2
    assert (mean.topic, mean.partition, mean.ranges) == ("*", -1, ())
    assert mean.detail.startswith("expect_column_mean_to_be_between(price, min_value=100") and \
        mean.detail.endswith("[mine.json entry 0] failed: observed 10.5")
    assert typed.finding_class is FindingClass.EXPECTATION_FAILED and (typed.topic, typed.partition) == ("*", -1)
    assert "[mine.json entry 1] could not be evaluated: " in typed.detail and "same type" in typed.detail


@pytest.mark.parametrize(("document", "message"), [
    ({"table": "session_rows"}, "expected a list of entries {table, expectation, kwargs}, got dict"),
    ("[{", "not valid JSON (Expecting property name enclosed in double quotes at line 1, column 3)"),
    ([{"table": "sessions", "expectation": "ExpectColumnValuesToNotBeNull", "kwargs": {"column": "op"}}],
     "entry 0: unknown table 'sessions' (this pipeline's tables: session_rows, quarantine)"),
    ([{"table": "session_rows", "expectation": "ExpectColumnValuesToBeBetwen", "kwargs": {"column": "op"}}],
     "entry 0: unknown expectation 'ExpectColumnValuesToBeBetwen'; did you mean ExpectColumnValuesToBeBetween?"),
    ([{"table": "session_rows", "expectation": "ExpectColumnValuesToNotBeNull", "kwargs": {"column": "op"}},
      {"table": "session_rows", "expectation": "ExpectColumnValuesToBeBetween", "kwargs": {"column": "price"}}],
     "entry 1: ExpectColumnValuesToBeBetween: bad kwargs: min_value and max_value cannot both be None"),
    ([{"table": "session_rows", "expectation": "ExpectColumnValuesToBeBetween",
       "kwargs": {"column": "price", "min_value": 0, "colour": "red"}}],
     "entry 0: ExpectColumnValuesToBeBetween: bad kwargs: colour: extra fields not permitted"),
    ([{"table": "session_rows", "expectation": "UnexpectedRowsExpectation", "kwargs": {}}],
     "entry 0: expectation UnexpectedRowsExpectation is not accepted: it runs an SQL query"),
    ([{"table": "session_rows", "expectation": "ExpectColumnValuesToNotBeNull",
       "kwargs": {"column": "row_id", "row_condition": "op == 'upsert'"}}],
     "a row_condition string is only accepted with \"condition_parser\": \"great_expectations\""),
    ([{"table": "session_rows", "expectation": "ExpectColumnValuesToNotBeNull", "kwargs": {"column": "op"},
       "python": "os.system('id')"}], "entry 0: unknown key(s) python"),
    ([["session_rows"]], "entry 0: expected an object {table, expectation, kwargs}, got ['session_rows']"),
])
def test_a_bad_file_is_refused_naming_the_file_the_entry_and_the_fault(settings: Settings, tmp_path: Path,
                                                                       document: Any, message: str) -> None:
    from streamwarden.validation.expectations.user_file import load_user_expectations

    path = write(tmp_path / "bad.json", document)
    with pytest.raises(ConfigError) as refused:
        load_user_expectations(path, (SESSION_ROWS, QUARANTINE))
    assert refused.value.message.startswith(f"STREAMWARDEN_VALIDATION_EXPECTATIONS={path}: ")
    assert message in refused.value.message


def test_a_missing_file_or_a_column_the_table_lacks_fails_the_run_as_config(settings: Settings,
                                                                             tmp_path: Path) -> None:
    commit(settings, BATCH, 0)
    missing = tmp_path / "nowhere.json"
    with pytest.raises(ConfigError, match=f"{missing}: cannot read the expectations file"):
        run(settings, ValidationSettings(kafka=False, expectations=missing), request())
    path = write(tmp_path / "mine.json", [{"table": "quarantine", "expectation": "ExpectColumnValuesToNotBeNull",
                                           "kwargs": {"column": "price"}}])
    with pytest.raises(ConfigError, match=r"entry 0: expect_column_values_to_not_be_null: no column price in "
                                          r"quarantine \(its columns: topic, partition, offset, key"):
        run(settings, ValidationSettings(kafka=False, expectations=path), request())


def test_the_settings_are_checked_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamwarden.settings_loading import SettingsError

    monkeypatch.setenv("STREAMWARDEN_VALIDATION_RANGES", '{"price": [10, 1], "qty": [0, 5]}')
    with pytest.raises(SettingsError, match=r"STREAMWARDEN_VALIDATION_RANGES=.*price: min 10\.0 is above max 1\.0"):
        load_validation_settings()
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_RANGES", '{"price": "cheap"}')
    with pytest.raises(SettingsError, match=r"price: expected \[min, max\]"):
        load_validation_settings()
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_RANGES", '{"event_ts": ["2026-01-01T00:00:00", null]}')
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_QUARANTINE_SHARE", "2")
    with pytest.raises(SettingsError, match=r"STREAMWARDEN_VALIDATION_QUARANTINE_SHARE=.*less than or equal to 1"):
        load_validation_settings()
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_QUARANTINE_SHARE", "0.01")
    monkeypatch.setenv("STREAMWARDEN_VALIDATION_FRESHNESS", "none")
    loaded = load_validation_settings()
    assert loaded.ranges == {"event_ts": ("2026-01-01T00:00:00", None)} and loaded.freshness == 0
    assert loaded.quarantine_share == 0.01 and loaded.expectations is None


def test_no_connection_is_attempted_and_analytics_are_off(settings: Settings, tmp_path: Path) -> None:
    """In a fresh interpreter (GX imported there first), with an audit hook on every socket event."""
    commit(settings, BATCH, 0)
    script = textwrap.dedent(f"""
        import json, os, sys
        events = []
        sys.addaudithook(lambda event, args: events.append((event, repr(args)[:120]))
                         if event.startswith("socket.") else None)
        os.environ.pop("GX_ANALYTICS_ENABLED", None)
        sys.path.insert(0, {str(TESTS)!r})
        from fixtures.stream_output import settings_for
        from streamwarden.validation.expectations.run import check_expectations
        from streamwarden.validation.settings import ValidationSettings
        from streamwarden.validation.snapshot import pin
        from streamwarden.validation.coverage import check_coverage
        settings = settings_for(__import__("pathlib").Path({str(tmp_path)!r}))
        tables = pin(settings, ["session_rows", "quarantine"])
        outcome = check_expectations(settings, ValidationSettings(kafka=False), tables,
                                     checked=["session_rows", "quarantine"],
                                     partitions=check_coverage(tables).partitions, run_id="net")
        print(os.environ["GX_ANALYTICS_ENABLED"], outcome.evaluated, outcome.data_docs is not None,
              json.dumps(events))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GX_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    analytics, evaluated, docs, events = done.stdout.strip().splitlines()[-1].split(" ", 3)
    assert analytics == "False" and int(evaluated) > 20 and docs == "True"
    reached = [(event, args) for event, args in json.loads(events)
               if event in ("socket.connect", "socket.getaddrinfo", "socket.sendto", "socket.sendmsg")]
    assert reached == [], events

"""The data checks of one validation run: validate each batch with GX, collect findings, build the Data Docs.

:func:`check_expectations` is what :mod:`streamwarden.validation.steps` calls after the offset checks, on
the same pinned versions. Per checked table two batches are validated (its rows, its schema), then one of a
row per topic-partition (quarantine share, freshness). GX runs on pandas over only the columns the suite
reads (see ``docs/validation.md`` for the engines measured).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from streamwarden.failures import ConfigError
from streamwarden.settings import Settings
from streamwarden.tables.committed import TopicPartition
from streamwarden.tables.location import pipeline_tables
from streamwarden.validation.coverage import PartitionCoverage
from streamwarden.validation.expectations import docs, results
from streamwarden.validation.expectations.frames import (
    Newest,
    newest_in_frame,
    newest_in_table,
    partition_frame,
    schema_frame,
)
from streamwarden.validation.expectations.gx import (
    EphemeralDataContext,
    ExpectationSuiteValidationResult,
    RunIdentifier,
    ValidationResultIdentifier,
    calc_validation_statistics,
    context,
    convert_to_json_serializable,
    gx,
)
from streamwarden.validation.expectations.increment import RowsToCheck, frames, rows_to_check
from streamwarden.validation.expectations.suite import (
    PARTITIONS,
    TIME_COLUMNS,
    columns_of,
    partition_suite,
    table_suite,
    unmatched_ranges,
)
from streamwarden.validation.expectations.user_file import VARIABLE, UserExpectation, load_user_expectations
from streamwarden.validation.findings import Finding
from streamwarden.validation.settings import ValidationSettings
from streamwarden.validation.snapshot import PinnedTable

if TYPE_CHECKING:
    from great_expectations.expectations.expectation import Expectation

SCHEMA_SUFFIX = ".schema"


@dataclass(frozen=True)
class ExpectationsOutcome:
    """What the data checks found, what they skipped, and where their Data Docs are."""

    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    data_docs: Path | None = None  # the site's index.html
    pages: dict[str, Path] = field(default_factory=dict)  # batch -> its page of this run
    evaluated: int = 0  # expectations evaluated
    seconds: float = 0.0
    rows: dict[str, str] = field(default_factory=dict)  # checked table -> the rows read, since which version


def check_expectations(settings: Settings, validation: ValidationSettings, tables: Sequence[PinnedTable], *,
                       checked: Sequence[str], partitions: Sequence[PartitionCoverage], run_id: str,
                       since: Mapping[str, int] | None = None, reference: datetime | None = None,
                       docs_root: Path | None = None) -> ExpectationsOutcome:
    """Validate the rows and schema of the ``checked`` tables among ``tables`` (pinned), and the quarantine
    share and freshness per topic-partition (``partitions``: check 1's figures), at ``reference`` (now when
    None; the pinned versions' commit for older versions). Of a table named in ``since`` only the rows
    committed after that version are read (:mod:`.increment`), of the others every row, in batches. Data Docs
    go to ``docs_root`` (default ``<run_root>/data_docs``). A bad user expectations file raises
    :class:`ConfigError`."""
    started = time.perf_counter()
    at = datetime.now(UTC)
    reference = reference or at
    user = load_user_expectations(validation.expectations, pipeline_tables(settings))
    ctx = context(docs_root or settings.run_paths.data_docs)
    source = ctx.data_sources.add_pandas("streamwarden")
    run = _Run(ctx, source, run_id, at, validation.max_ranges)
    pinned = {t.name: t for t in tables}
    schemas = {name: pinned[name].dataset().schema for name in checked if name in pinned}
    notes = [f"expectations: no Delta table {name} yet, not checked" for name in checked if name not in pinned]
    notes += unmatched_ranges(validation, schemas)
    newest: dict[TopicPartition, Newest] = {}
    rows: dict[str, str] = {}
    for name, schema in schemas.items():
        suite = table_suite(name, schema, settings, validation)
        suite.rows += _user_expectations(name, schema.names, user, validation.expectations)
        notes += suite.notes
        check = rows_to_check(pinned[name], (since or {}).get(name), validation.batch_rows)
        seen, read = _validate_rows(run, pinned[name], check, columns=suite.columns(schema.names),
                                    expectations=suite.rows, validation=validation)
        rows[name] = check.line(read)
        run.validate(f"{name}{SCHEMA_SUFFIX}", name, schema_frame(schema), suite.schema)
        _merge(newest, seen)
    for name, table in pinned.items():
        if name not in schemas:
            _merge(newest, _newest(table, validation))
    if partitions:
        names = list(pinned)
        frame = partition_frame(partitions, names, newest, reference)
        expectations = partition_suite(validation, quarantine="quarantine" in pinned, freshness=bool(newest))
        run.validate(PARTITIONS, "+".join(names), frame, expectations)
    timed = sorted(f"{n}.{TIME_COLUMNS[n]}" for n, t in pinned.items() if TIME_COLUMNS.get(n) in t.columns())
    if validation.freshness > 0 and timed and not newest:
        notes.append(f"freshness not checked: no row has a time yet ({', '.join(timed)})")
    site = docs.build(ctx, docs_root or settings.run_paths.data_docs, run.keys) if run.keys else None
    if site is not None:
        notes += site.notes()
    return ExpectationsOutcome(tuple(run.findings), tuple(notes), None if site is None else site.index,
                               {} if site is None else site.pages, run.evaluated,
                               round(time.perf_counter() - started, 2), rows)


def _validate_rows(run: _Run, table: PinnedTable, check: RowsToCheck, *, columns: Sequence[str],
                   expectations: list[Expectation], validation: ValidationSettings
                   ) -> tuple[dict[TopicPartition, Newest], int]:
    """Validate ``check``'s rows batch by batch (one batch: named as the table; more: ``table.i-of-n``); the
    newest row per topic-partition (of those without a row in the batches, from the whole table) and the rows
    read."""
    column = TIME_COLUMNS.get(table.name) if validation.freshness > 0 else None
    newest: dict[TopicPartition, Newest] = {}
    read = 0
    count = len(check.batches)
    for number, frame in enumerate(frames(table, check, columns), start=1):
        run.validate(table.name if count == 1 else f"{table.name}.{number}-of-{count}", table.name, frame, expectations)
        read += len(frame)
        if column is not None and column in frame.columns:
            _merge(newest, newest_in_frame(frame, column))
        del frame
    if column is not None and column in table.columns():
        _merge(newest, newest_in_table(table, column, set(table.known_claims()) - set(newest)))
    return newest, read


def _user_expectations(table: str, columns: Sequence[str], user: Sequence[UserExpectation],
                       path: Path | None) -> list[Expectation]:
    """The user's expectations on ``table``; one naming a column the pinned version lacks is refused."""
    mine = []
    for entry in user:
        if entry.table != table:
            continue
        missing = sorted(columns_of(entry.expectation, columns) - set(columns))
        if missing:
            raise ConfigError(f"{VARIABLE}={path}: entry {entry.entry}: {entry.expectation.expectation_type}: "
                              f"no column {', '.join(missing)} in {table} (its columns: {', '.join(columns)})")
        mine.append(entry.expectation)
    return mine


def _newest(table: PinnedTable, validation: ValidationSettings) -> dict[TopicPartition, Newest]:
    """The newest row per topic-partition of a table whose rows are not checked."""
    column = TIME_COLUMNS.get(table.name)
    if validation.freshness <= 0 or column is None or column not in table.columns():
        return {}
    return newest_in_table(table, column)


def _merge(newest: dict[TopicPartition, Newest], more: dict[TopicPartition, Newest]) -> None:
    for tp, seen in more.items():
        if tp not in newest or seen.at > newest[tp].at:
            newest[tp] = seen


class _Run:
    """The batches validated so far, their findings and their keys in the results store."""

    def __init__(self, ctx: EphemeralDataContext, source: Any, run_id: str, at: datetime, max_ranges: int) -> None:
        self.ctx, self.source, self.run_id, self.at, self.max_ranges = ctx, source, run_id, at, max_ranges
        self.findings: list[Finding] = []
        self.keys: dict[str, ValidationResultIdentifier] = {}
        self.evaluated = 0

    def validate(self, name: str, table: str, frame: pd.DataFrame, expectations: list[Expectation]) -> None:
        """Validate ``expectations`` on ``frame`` as the batch ``name``; findings name ``table``."""
        if not expectations:
            return
        batch = self.source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe("whole")
        # copies: a suite takes an expectation as its own, and a table's rows may be validated in several batches
        suite = self.ctx.suites.add(gx.ExpectationSuite(name=name, expectations=[copy.copy(e) for e in expectations]))
        validator = self.ctx.get_validator(batch_request=batch.build_batch_request(
            batch_parameters={"dataframe": frame}))
        configurations = validator.process_expectations_for_validation(
            [e.configuration for e in suite.expectations], None)
        found = validator.graph_validate(configurations=configurations,
                                         runtime_configuration={"result_format": dict(results.RESULT_FORMAT)})
        by_id = {e.id: e for e in suite.expectations}
        for result in found:
            expectation = by_id[result.expectation_config.id if result.expectation_config else None]
            rows = None
            if not result.success:
                if results.raised(result) is None:
                    rows = results.failing_rows(validator, expectation, frame)
                self.findings += results.findings(table, expectation, result, rows, max_ranges=self.max_ranges)
            results.for_docs(result, rows, expectation)
        self.evaluated += len(found)
        statistics = calc_validation_statistics(found)
        document = ExpectationSuiteValidationResult(
            results=found, success=statistics.success, suite_name=name,
            statistics={"evaluated_expectations": statistics.evaluated_expectations,
                        "successful_expectations": statistics.successful_expectations,
                        "unsuccessful_expectations": statistics.unsuccessful_expectations,
                        "success_percent": statistics.success_percent},
            meta={"great_expectations_version": gx.__version__,
                  "batch_spec": convert_to_json_serializable(validator.active_batch_spec),
                  "batch_markers": validator.active_batch_markers,
                  "active_batch_definition": convert_to_json_serializable(validator.active_batch_definition),
                  "run_id": RunIdentifier(run_name=self.run_id, run_time=self.at), "validation_time": self.at,
                  "streamwarden_table": table},
            batch_id=validator.active_batch_id)
        self.keys[name] = docs.store(self.ctx, document, self.run_id, self.at)

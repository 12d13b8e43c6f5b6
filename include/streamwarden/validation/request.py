"""What one validation run is asked to check: the validated form of ``validate_output``'s Params.

A run reads every table of the pipeline at its newest version, or pinned: at given versions (``versions``,
e.g. ``{"session_rows": 41, "quarantine": 40}``, one for each table: ``session_rows`` and ``quarantine``
account for the offsets together) or as they were at a time (``as_of``, each table at its newest version
committed by then). Pinned tables describe the past, so only the checks that read the tables alone run on
them (offset coverage and data expectations); the checkpoint and Kafka describe the present. ``tables``
chooses the tables whose rows the data expectations check; offsets are always reconciled over them all.
``rows`` chooses which of their rows: ``new`` (those committed since the table's last validated version; every
row before any run passed, and on pinned tables) or ``all``.

    >>> request_from_params({"tables": ["session_rows"], "checks": ["coverage"], "rows": "all"}, settings, validation)
    ValidationRequest(tables=('session_rows',), checks=frozenset({<Check.COVERAGE...>}), ..., rows=<Rows.ALL...>)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from streamwarden.failures import ConfigError
from streamwarden.params import as_of_param
from streamwarden.settings import Settings
from streamwarden.tables.location import pipeline_tables, requested_tables
from streamwarden.validation.settings import ValidationSettings


class Check(StrEnum):
    """The checks a run can make (all by default)."""

    COVERAGE = "coverage"  # 1: offsets covered by rows, without gap or duplicate
    CHECKPOINT = "checkpoint"  # 2: the checkpoint agrees with the tables
    KAFKA = "kafka"  # 3: log start and end, expired offsets, lag, staleness
    AUDIT = "audit"  # 4: per-hour counts in Kafka against the tables
    EXPECTATIONS = "expectations"  # data checks (Great Expectations)
    EXPOSURE = "exposure"  # 5: each site's time since a clean session start, against the restart schedule
    CONTENT = "content"  # 6: data files' bytes against the hashes recorded at their commits


class Rows(StrEnum):
    """Which rows of a table the data expectations read."""

    NEW = "new"  # those committed since the table's last validated version
    ALL = "all"


PRESENT_ONLY = frozenset({Check.CHECKPOINT, Check.KAFKA, Check.AUDIT, Check.EXPOSURE})
"""Checks that compare the tables with the present (the checkpoint, Kafka, the clock): not made on pinned
tables."""


@dataclass(frozen=True)
class ValidationRequest:
    """Tables, the versions to read, and the checks of one run, every value checked."""

    tables: tuple[str, ...]
    checks: frozenset[Check]
    versions: dict[str, int] = field(default_factory=dict)
    as_of: datetime | None = None
    rows: Rows = Rows.NEW

    @property
    def pinned(self) -> bool:
        """The tables are read at given versions or a given time, not their newest versions."""
        return bool(self.versions) or self.as_of is not None

    def wants(self, check: Check) -> bool:
        return check in self.checks and not (self.pinned and check in PRESENT_ONLY)

    def to_json(self) -> dict[str, Any]:
        return {"tables": list(self.tables), "checks": sorted(c.value for c in self.checks),
                "versions": dict(self.versions), "as_of": None if self.as_of is None else self.as_of.isoformat(),
                "rows": self.rows.value}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ValidationRequest:
        as_of = document.get("as_of")
        return cls(tuple(document["tables"]), frozenset(Check(c) for c in document["checks"]),
                   {str(k): int(v) for k, v in (document.get("versions") or {}).items()},
                   None if as_of is None else datetime.fromisoformat(as_of), Rows(document.get("rows", Rows.NEW)))


def default_request(settings: Settings, validation: ValidationSettings) -> ValidationRequest:
    """Every table at its newest version, every check the settings allow (a scheduled run)."""
    return ValidationRequest(pipeline_tables(settings), _allowed(set(Check), validation))


def _allowed(checks: set[Check], validation: ValidationSettings) -> frozenset[Check]:
    if not validation.kafka:
        checks -= {Check.KAFKA, Check.AUDIT}
    if not validation.audit_hours:
        checks.discard(Check.AUDIT)
    return frozenset(checks)


def skipped_because(check: Check, validation: ValidationSettings) -> str:
    """Why a default run leaves ``check`` out, or that the Params left it out."""
    if check in (Check.KAFKA, Check.AUDIT) and not validation.kafka:
        return "STREAMWARDEN_VALIDATION_KAFKA=false"
    if check is Check.AUDIT and not validation.audit_hours:
        return "STREAMWARDEN_VALIDATION_AUDIT_HOURS=0"
    return "not asked for (Param checks)"


def request_from_params(params: Mapping[str, Any], settings: Settings,
                        validation: ValidationSettings) -> ValidationRequest:
    """Check the Params of a run; a CONFIG error names each bad one. Absent or empty Params mean the default.

    Params: ``tables`` (list, for the data expectations; empty: every table of the pipeline), ``checks``
    (list of :class:`Check` values; empty: all), ``versions`` (``{table: version}``, one per table),
    ``as_of`` (an ISO 8601 time; without a zone, UTC), ``rows`` (``new`` or ``all``). ``versions`` and
    ``as_of`` exclude each other.
    Checks turned off by the settings (``STREAMWARDEN_VALIDATION_KAFKA=false``, ``AUDIT_HOURS=0``) stay off.
    """
    problems: list[str] = []
    known = pipeline_tables(settings)
    tables = requested_tables(params.get("tables"), settings, problems)
    names = [str(c) for c in params.get("checks") or [c.value for c in Check]]
    bad_checks = [c for c in names if c not in {k.value for k in Check}]
    if bad_checks:
        problems.append(f"Param checks: unknown {', '.join(bad_checks)} (known: {', '.join(c.value for c in Check)})")
    versions = _versions(params.get("versions") or {}, known, problems)
    if versions and set(versions) != set(known):
        problems.append(f"Param versions: give a version of each of {', '.join(known)} (they account for the "
                        f"offsets together), or use as_of")
    as_of = as_of_param(params.get("as_of"), problems)
    rows = params.get("rows") or Rows.NEW.value
    if rows not in {r.value for r in Rows}:
        problems.append(f"Param rows: expected {' or '.join(r.value for r in Rows)}, got {rows!r}")
    if versions and as_of is not None:
        problems.append("Params versions and as_of: give one of them, not both")
    if problems:
        raise ConfigError("; ".join(problems), details={"params": dict(params)})
    checks = _allowed({Check(c) for c in names}, validation)
    return ValidationRequest(tables, checks, versions, as_of, Rows(rows))


def _versions(given: Any, tables: tuple[str, ...], problems: list[str]) -> dict[str, int]:
    if not isinstance(given, Mapping):
        problems.append(f"Param versions: expected an object {{table: version}}, got {given!r}")
        return {}
    versions: dict[str, int] = {}
    for name, version in given.items():
        if name not in tables:
            problems.append(f"Param versions: table {name!r} is not among this pipeline's tables ({', '.join(tables)})")
        elif not isinstance(version, int) or isinstance(version, bool) or version < 0:
            problems.append(f"Param versions: {name}: expected a table version (a whole number >= 0), got "
                            f"{version!r}")
        else:
            versions[str(name)] = version
    return versions



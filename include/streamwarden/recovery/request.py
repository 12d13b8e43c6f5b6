"""What a ``recover_stream`` run is asked to do: the target to recover to, dry run or not, and why.

The target is one of:

* ``last_validated`` (the default): each table's last version that passed ``validate_output``;
* ``versions``: a version of each table, e.g. ``{"session_rows": 41, "quarantine": 40}``;
* ``as_of``: a time; each table's newest version committed by then;
* ``offsets``: explicit offsets per topic-partition to resume from, e.g. ``{"sites-0": {"0": 1200}}``; the
  tables are left as they are (their rows past these offsets stay, and the stream skips them on replay).

Every Param is checked here, before anything is read or changed, and every bad one is named at once
(CONFIG). What needs the tables or the broker (a version that exists, an offset Kafka still holds) is
checked by the plan, also before any change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from streamwarden.failures import ConfigError
from streamwarden.params import as_of_param, dry_and_reason
from streamwarden.settings import Settings
from streamwarden.settings_loading import validate_topic_name
from streamwarden.tables.location import pipeline_tables

OffsetTarget = dict[str, dict[int, int]]
"""Offsets to resume from: topic -> partition -> offset."""


class Target(StrEnum):
    """What to recover to."""

    LAST_VALIDATED = "last_validated"
    VERSIONS = "versions"
    AS_OF = "as_of"
    OFFSETS = "offsets"


@dataclass(frozen=True)
class RecoveryRequest:
    """The checked Params of one run; only the field of its ``target`` is set."""

    target: Target
    versions: dict[str, int] = field(default_factory=dict)
    as_of: datetime | None = None
    offsets: OffsetTarget = field(default_factory=dict)
    dry_run: bool = True
    reason: str = ""

    def describe(self) -> str:
        """The target in words."""
        if self.target is Target.VERSIONS:
            return "versions " + ", ".join(f"{name} v{version}" for name, version in sorted(self.versions.items()))
        if self.target is Target.AS_OF and self.as_of is not None:
            return f"the tables as of {self.as_of.isoformat()}"
        if self.target is Target.OFFSETS:
            return "offsets " + ", ".join(f"{t}[{p}]@{o}" for t, parts in sorted(self.offsets.items())
                                          for p, o in sorted(parts.items()))
        return "the last validated versions"

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target.value, "versions": dict(self.versions),
                "as_of": None if self.as_of is None else self.as_of.isoformat(),
                "offsets": {t: {str(p): o for p, o in parts.items()} for t, parts in self.offsets.items()},
                "dry_run": self.dry_run, "reason": self.reason}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RecoveryRequest:
        as_of = document.get("as_of")
        return cls(Target(document["target"]), {str(k): int(v) for k, v in document["versions"].items()},
                   None if as_of is None else datetime.fromisoformat(as_of),
                   {t: {int(p): int(o) for p, o in parts.items()} for t, parts in document["offsets"].items()},
                   bool(document["dry_run"]), str(document["reason"]))


def request_from_params(params: Mapping[str, Any], settings: Settings) -> RecoveryRequest:
    """Check a run's Params; a CONFIG error names each bad one. Absent or empty Params mean the default.

    Params: ``target`` (one of :class:`Target`), then the one its value names: ``versions`` (table ->
    version), ``as_of`` (ISO-8601 time, UTC when no zone is given) or ``offsets`` (topic -> partition ->
    offset); ``dry_run`` (default true: plan only) and ``reason``.
    """
    problems: list[str] = []
    given = params.get("target") or Target.LAST_VALIDATED.value
    target = Target(given) if given in set(Target) else None
    if target is None:
        problems.append(f"Param target: {given!r} is not one of {', '.join(t.value for t in Target)}")
    for name, kind in (("versions", Target.VERSIONS), ("as_of", Target.AS_OF), ("offsets", Target.OFFSETS)):
        if params.get(name) and target is not None and target is not kind:
            problems.append(f"Param {name}: given, but target is {target.value} (set target to {kind.value})")
    versions = _versions(params.get("versions") or {}, pipeline_tables(settings), problems) \
        if target is Target.VERSIONS else {}
    as_of = as_of_param(params.get("as_of"), problems, required=True) if target is Target.AS_OF else None
    offsets = _offsets(params.get("offsets") or {}, settings, problems) if target is Target.OFFSETS else {}
    dry_run, reason = dry_and_reason(params, problems)
    if problems or target is None:
        raise ConfigError("; ".join(problems), details={"params": dict(params)})
    return RecoveryRequest(target, versions, as_of, offsets, dry_run, reason)


def _versions(given: Any, tables: tuple[str, ...], problems: list[str]) -> dict[str, int]:
    if not isinstance(given, Mapping) or not given:
        problems.append(f"Param versions: expected a version of each table, e.g. {{\"{tables[0]}\": 41}}, "
                        f"got {given!r}")
        return {}
    versions = {}
    for name, version in given.items():
        if name not in tables:
            problems.append(f"Param versions: {name!r} is not a table of this pipeline ({', '.join(tables)})")
        elif isinstance(version, bool) or not isinstance(version, int) or version < 0:
            problems.append(f"Param versions: {name} must be a version number (0 or more), got {version!r}")
        else:
            versions[str(name)] = version
    missing = sorted(set(tables) - set(given))
    if missing:
        problems.append(f"Param versions: no version for {', '.join(missing)} (every table is recovered together)")
    return versions


def _offsets(given: Any, settings: Settings, problems: list[str]) -> OffsetTarget:
    if not isinstance(given, Mapping) or not given:
        problems.append(f"Param offsets: expected topic -> partition -> offset, e.g. {{\"sites-0\": {{\"0\": 1200}}}}, "
                        f"got {given!r}")
        return {}
    offsets: OffsetTarget = {}
    for topic, parts in given.items():
        try:
            validate_topic_name(str(topic))
        except ValueError as exc:
            problems.append(f"Param offsets: {exc}")
            continue
        if not re.fullmatch(settings.topic_pattern, str(topic)):
            problems.append(f"Param offsets: {topic!r} is not a topic of this stream (STREAMWARDEN_TOPIC_PATTERN is "
                            f"{settings.topic_pattern!r})")
            continue
        if not isinstance(parts, Mapping) or not parts:
            problems.append(f"Param offsets: {topic} must map partitions to offsets, got {parts!r}")
            continue
        for partition, offset in parts.items():
            number = str(partition)
            if not number.isdigit():
                problems.append(f"Param offsets: {topic} partition {partition!r} is not a partition number")
            elif isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                problems.append(f"Param offsets: {topic}[{number}] must be an offset (0 or more), got {offset!r}")
            else:
                offsets.setdefault(str(topic), {})[int(number)] = offset
    return offsets

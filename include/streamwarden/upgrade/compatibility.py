"""Can the stream continue on its checkpoint and tables with a release's settings? Checked before anything changes.

1. **Settings**: none that a release may not change differs (:data:`~.release.PINNED`, and the ``spark_conf``
   keys the state depends on).
2. **State layout**: the release's session handler loads, its output columns are valid, and its fingerprint
   (handler name, ``state_version``, ``state_schema``, and the checkpoint's own ``session_buckets`` -- unless
   set -- ``session_slots`` and the codec of its slots) equals the one pinned in
   ``<checkpoint>/streamwarden_handler.json``: the state in the checkpoint was written in that layout, and the
   job refuses another one at start (CONFIG). A new handler class keeps the layout by declaring the old
   ``handler_name`` with the same ``state_version`` and ``state_schema``.
3. **Table schema**, column by column *by name*: the columns the release's job would write against those of the
   table. A column added and nullable is allowed (Delta schema evolution: rows written before read it as null);
   a column dropped, retyped, or added as not nullable is refused, naming the column and why.

Built without Spark: ``session_rows``'s Arrow schema is the job's frame as :func:`session_rows_schema` spells it
(``tests/integration/upgrade`` checks it against Spark's own conversion).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from streamwarden.atomic import read_json
from streamwarden.failures import ConfigError
from streamwarden.runfiles.handler_pin import HANDLER_FILE, layout_buckets, layout_fingerprint
from streamwarden.secrets import redact
from streamwarden.session_handler import load_checked_handler
from streamwarden.settings import SECRET_FIELDS, Settings
from streamwarden.tables.location import SESSION_ROWS, TableLocation
from streamwarden.upgrade.release import PINNED, PINNED_SPARK_CONF
from streamwarden.wire import ColumnType, TableSchema

ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
_FRAMEWORK_HEAD = [("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                   ("session_id", pa.string()), ("seq", pa.int64()), ("event_ts", pa.timestamp("us", tz="UTC")),
                   ("boundary", pa.string()), ("restart_request", pa.string())]
_FOLDER_COLUMNS = ("source_topic", "event_date", "event_hour")


def session_rows_schema(columns: Sequence[tuple[str, ColumnType]]) -> pa.Schema:
    """The Arrow schema the session job writes to ``session_rows`` for a handler's output ``columns``: the Kafka
    and session columns, the handler's, then the three folder columns (every one nullable, as Spark has them)."""
    fields = [*_FRAMEWORK_HEAD, *((name, ARROW_TYPES[type_]) for name, type_ in columns),
              *((name, pa.string()) for name in _FOLDER_COLUMNS)]
    return pa.schema([pa.field(name, type_, nullable=True) for name, type_ in fields])


@dataclass(frozen=True)
class ColumnChange:
    """One column that differs between a table and what the release would write."""

    table: str
    column: str
    change: str  # added | dropped | retyped | nullability
    before: str | None
    after: str | None
    allowed: bool
    why: str

    def text(self) -> str:
        verdict = "allowed" if self.allowed else "REFUSED"
        return f"{self.table}.{self.column}: {self.change} ({self.before or '-'} -> {self.after or '-'}): " \
               f"{verdict}, {self.why}"


def _kind(field_: pa.Field) -> str:
    return f"{field_.type}{'' if field_.nullable else ' not null'}"


def column_changes(table: str, recorded: pa.Schema, wanted: pa.Schema) -> list[ColumnChange]:
    """The columns of ``wanted`` (what the job would write) that differ from ``recorded`` (the table), by name."""
    have = {f.name: f for f in recorded}
    want = {f.name: f for f in wanted}
    changes = []
    for name, new in want.items():
        old = have.get(name)
        if old is None:
            if new.nullable:
                changes.append(ColumnChange(table, name, "added", None, _kind(new), True,
                                            "added to the table by Delta schema evolution; rows written before "
                                            "read it as null"))
            else:
                changes.append(ColumnChange(table, name, "added", None, _kind(new), False,
                                            "a new column must be nullable: the rows already in the table have no "
                                            "value for it"))
        elif old.type != new.type:
            changes.append(ColumnChange(table, name, "retyped", _kind(old), _kind(new), False,
                                        f"the files already written hold {old.type}; a type change needs a new "
                                        "table (a new output root)"))
        elif old.nullable != new.nullable:
            changes.append(ColumnChange(table, name, "nullability", _kind(old), _kind(new), False,
                                        "the nullability of a column is pinned by the table"))
    for name, old in have.items():
        if name not in want:
            changes.append(ColumnChange(table, name, "dropped", _kind(old), None, False,
                                        "the table keeps the column and every reader expects it; the release would "
                                        "write files without it (keep the column in the handler or the table "
                                        "schema)"))
    return changes


@dataclass(frozen=True)
class Compatibility:
    """What the check found; ``refusals`` empty means the release may be started on this checkpoint."""

    release: str
    settings_changed: dict[str, list[Any]]
    state: dict[str, Any]
    columns: list[ColumnChange] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    @property
    def compatible(self) -> bool:
        return not self.refusals

    def added(self, table: str) -> list[ColumnChange]:
        """The allowed added columns of ``table`` (what schema evolution adds)."""
        return [c for c in self.columns if c.table == table and c.change == "added" and c.allowed]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "compatible": self.compatible}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Compatibility:
        return cls(document["release"], dict(document["settings_changed"]), dict(document["state"]),
                   [ColumnChange(**c) for c in document["columns"]], list(document["refusals"]))

    def text(self) -> str:
        """The check as a person reads it."""
        lines = [f"release {self.release}: {'compatible' if self.compatible else 'REFUSED'}",
                 f"state layout: {self.state.get('verdict', '-')}"]
        lines += [f"setting {name}: {old!r} -> {new!r}" for name, (old, new) in sorted(self.settings_changed.items())]
        lines += [f"column {c.text()}" for c in self.columns] or ["columns: unchanged"]
        lines += [f"refused: {r}" for r in self.refusals]
        return "\n".join(lines)


def _settings_changed(current: Settings, new: Settings) -> dict[str, list[Any]]:
    changed: dict[str, list[Any]] = {}
    old_values, new_values = current.model_dump(mode="json"), new.model_dump(mode="json")
    for name in Settings.model_fields:
        if old_values[name] != new_values[name]:
            shown = ([redact(old_values[name]), redact(new_values[name])] if name not in SECRET_FIELDS
                     else ["(secret)", "(secret, changed)"])
            changed[name] = shown
    return changed


def _pinned_conf(current: Settings, new: Settings) -> list[str]:
    keys = {k for k in (*current.spark_conf, *new.spark_conf) if k.startswith(PINNED_SPARK_CONF)}
    return [f"spark_conf {key!r} may not change in a release: the checkpoint's state depends on it"
            for key in sorted(keys) if current.spark_conf.get(key) != new.spark_conf.get(key)]


def _state(current: Settings, new: Settings, refusals: list[str]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Step 2: the pinned fingerprint against the release's; the release handler's output columns."""
    try:
        handler, columns = load_checked_handler(new.session_handler, TableSchema.parse(new.table_schema))
    except ConfigError as exc:
        refusals.append(f"the release's session handler: {exc.message}")
        return {"verdict": "the release's handler does not load"}, []
    recorded = read_json(current.checkpoint_location / HANDLER_FILE)
    configured = layout_fingerprint(handler, recorded, layout_buckets(recorded, new.session_buckets,
                                                                      new.state_buckets),
                                    new.session_slots, new.state_partitions)
    state: dict[str, Any] = {"recorded": recorded, "configured": configured}
    if recorded is None:
        state["verdict"] = "no state pinned yet (a new checkpoint): any handler"
    elif recorded["fingerprint"] == configured["fingerprint"]:
        state["verdict"] = f"unchanged ({configured['handler']}, state_version {configured['state_version']})"
    else:
        state["verdict"] = "CHANGED"
        differs = [k for k in ("handler", "state_version", "state_schema", "session_buckets")
                   if recorded.get(k) != configured.get(k)]
        changes = ", ".join(f"{k} {recorded.get(k)!r} -> {configured.get(k)!r}" for k in differs)
        refusals.append(
            f"the state layout changes ({changes}): the checkpoint's state was written as {recorded['handler']} "
            f"state_version {recorded['state_version']} and the release's handler could not read it. Keep the "
            "layout (declare handler_name, state_version and state_schema of the old handler when the encoding "
            "is the same), or recover onto a new checkpoint from the last snapshots (docs/sessions.md)")
    return state, list(columns)


def check_compatibility(current: Settings, new: Settings, release: str) -> Compatibility:
    """Steps 1-3 for the stream configured as ``current`` and the release ``release`` configured as ``new``."""
    refusals: list[str] = []
    changed = _settings_changed(current, new)
    refusals += [f"{name} may not change in a release: it pins {PINNED[name]}" for name in changed if name in PINNED]
    refusals += _pinned_conf(current, new)
    if new.pipeline != "sessions":
        return Compatibility(release, changed, {"verdict": "no session state (records pipeline)"}, [], refusals)
    state, columns = _state(current, new, refusals)
    changes: list[ColumnChange] = []
    if columns:
        location = TableLocation.of(current, SESSION_ROWS)
        table = location.open_or_none()
        if table is not None:
            recorded = pa.schema(table.schema().to_arrow())
            changes = column_changes(SESSION_ROWS, recorded, session_rows_schema(columns))
            refusals += [f"column {c.table}.{c.column} {c.change} ({c.before or '-'} -> {c.after or '-'}): {c.why}"
                         for c in changes if not c.allowed]
    return Compatibility(release, changed, state, changes, refusals)

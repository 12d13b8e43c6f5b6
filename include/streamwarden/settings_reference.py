"""The settings reference, ``docs/settings.md``, written from the settings models' fields (one source for each
setting's name, default and meaning).

    python -m streamwarden.settings_reference > docs/settings.md

``tests/unit/test_settings_reference.py`` fails when the file differs from what this writes, when a setting has no
description, and when a document or DAG names a ``STREAMWARDEN_*`` variable that is no setting.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from streamwarden.maintenance.settings import MaintenanceSettings
from streamwarden.session_restarts.settings import RestartSettings
from streamwarden.settings import Settings
from streamwarden.settings_loading import (
    ENV_PREFIX,
    MAINTENANCE_ENV_PREFIX,
    OTHER_VARIABLES,
    RESTART_ENV_PREFIX,
    VALIDATION_ENV_PREFIX,
    WARDEN_ENV_PREFIX,
    parse_duration,
    parse_duration_or_zero,
)
from streamwarden.validation.settings import ValidationSettings
from streamwarden.warden.settings import WardenSettings

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


@dataclass(frozen=True)
class Section:
    """One settings model: its heading, its variables' prefix, and who reads it."""

    title: str
    model: type[BaseSettings]
    prefix: str
    readers: str


SECTIONS = (
    Section("The stream", Settings, ENV_PREFIX,
            "The job, the command line and every DAG read these: they must agree on where things are."),
    Section("The warden (`stream_supervisor`)", WardenSettings, WARDEN_ENV_PREFIX,
            "How the supervisor judges the stream's health, restarts it, and whom it alerts."),
    Section("Table maintenance (`maintain_tables`)", MaintenanceSettings, MAINTENANCE_ENV_PREFIX,
            "When the tables are compacted and vacuumed, and how much history they keep."),
    Section("Validation (`validate_output`)", ValidationSettings, VALIDATION_ENV_PREFIX,
            "When the output is checked against the broker and the checkpoint, and what it must satisfy."),
    Section("Session restarts (`restart_sessions`)", RestartSettings, RESTART_ENV_PREFIX,
            "When the collection sites are asked for new sessions, and how long they have to answer."),
)


def setting_names() -> frozenset[str]:
    """Every settings variable: ``STREAMWARDEN_<FIELD>`` of each model, under the model's prefix."""
    return frozenset(f"{s.prefix}{name.upper()}" for s in SECTIONS for name in s.model.model_fields)


def known_names() -> frozenset[str]:
    """Every ``STREAMWARDEN_*`` variable a document may name: the settings and the other variables."""
    return setting_names() | OTHER_VARIABLES


def duration_text(seconds: float) -> str:
    """``seconds`` in the largest unit that divides it: ``7d``, ``1h``, ``2m``, ``3s``, ``500ms``."""
    if seconds == 0:
        return "0"
    for unit, size in _UNITS:
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds * 1000:g}ms"


def _is_duration(field: FieldInfo) -> bool:
    return any(getattr(m, "func", None) in (parse_duration, parse_duration_or_zero) for m in field.metadata)


def _value_text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def default_text(field: FieldInfo) -> str:
    """The field's default as a person would set it, with the allowed values of a choice."""
    value = field.get_default(call_default_factory=True)
    text = duration_text(value) if _is_duration(field) and isinstance(value, float) else _value_text(value)
    shown = "unset" if text == "unset" else f"`{text}`"
    if get_origin(field.annotation) is Literal:
        others = [f"`{v}`" for v in get_args(field.annotation) if v != value]
        shown += f" (or {', '.join(others)})" if others else ""
    return shown


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def section_text(section: Section) -> str:
    """One model's table: variable, default, what it sets."""
    rows = [f"## {section.title}", "", section.readers, "", "| variable | default | what it sets |",
            "|---|---|---|"]
    for name, field in section.model.model_fields.items():
        rows.append(f"| `{section.prefix}{name.upper()}` | {_cell(default_text(field))} | "
                    f"{_cell(field.description or '')} |")
    return "\n".join(rows) + "\n"


def reference() -> str:
    """The whole of ``docs/settings.md``."""
    head = f"""# Settings

<!-- Written by `python -m streamwarden.settings_reference > docs/settings.md`; edit the models' field
descriptions, not this file (tests/unit/test_settings_reference.py compares them). -->

Every setting is an environment variable; the stream's may also be keys of a YAML file named by
`{ENV_PREFIX}CONFIG_FILE` (the key is the variable's name after `{ENV_PREFIX}`, in lower case; the environment
wins). Durations are written `500ms`, `10s`, `2m`, `6h` or `7d` (a bare number is seconds). A variable under
`{ENV_PREFIX}` that names no setting is refused with the closest name, and an invalid value stops the program
at start with one line naming the variable and what is allowed; values that may hold credentials are never
echoed.
"""
    return "\n".join([head, *(section_text(s) for s in SECTIONS)])


def main() -> None:
    sys.stdout.write(reference())


if __name__ == "__main__":
    main()

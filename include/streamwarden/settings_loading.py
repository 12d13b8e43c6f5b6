"""How settings are loaded and checked: the names, the value parsers, the error that names a bad setting.

The stream's own model is :mod:`streamwarden.settings`; each DAG beside it has its own (``warden``, ``maintenance``,
``validation``, ``restarts``), loaded with :func:`load_sibling_settings`. Every ``STREAMWARDEN_*`` variable is one of
theirs or one of :data:`OTHER_VARIABLES`: a name that is neither is refused with the closest one
(:func:`unknown_names`), and an invalid value stops the program with one line naming the variable
(:func:`describe_validation_error`). ``docs/settings.md`` is generated from the models
(:mod:`streamwarden.settings_reference`).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BeforeValidator, ValidationError
from pydantic_settings import BaseSettings

from streamwarden.secrets import scrub

ENV_PREFIX = "STREAMWARDEN_"
CONFIG_FILE_ENV = "STREAMWARDEN_CONFIG_FILE"
WARDEN_ENV_PREFIX = "STREAMWARDEN_WARDEN_"
MAINTENANCE_ENV_PREFIX = "STREAMWARDEN_MAINTENANCE_"
VALIDATION_ENV_PREFIX = "STREAMWARDEN_VALIDATION_"
RESTART_ENV_PREFIX = "STREAMWARDEN_SESSION_RESTART_"
SIBLING_ENV_PREFIXES = (WARDEN_ENV_PREFIX, MAINTENANCE_ENV_PREFIX, VALIDATION_ENV_PREFIX, RESTART_ENV_PREFIX)
"""Prefixes of the settings of the DAGs beside the stream: each has its own model, checked by its own loader."""
OTHER_VARIABLES = frozenset({CONFIG_FILE_ENV, "STREAMWARDEN_REPO", "STREAMWARDEN_CHAOS_KILL_AT",
                             "STREAMWARDEN_CHAOS_RAISE_AT"})
"""``STREAMWARDEN_*`` variables that are not settings: the config file, the checkout, test fault points."""
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?|m|min|minutes?|h|hours?|d|days?)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
                 "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600,
                 "d": 86400, "day": 86400, "days": 86400}
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
SiblingSettings = TypeVar("SiblingSettings", bound=BaseSettings)


class SettingsError(ValueError):
    """Invalid settings; the message names each bad setting by its environment variable."""


def parse_duration(value: Any) -> float:
    """Seconds from ``5``, ``"5"``, ``"500ms"``, ``"10 seconds"``, ``"2m"``, ``"7d"``."""
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"expected a duration such as '10s', '500ms', '2m' or '7d', got {value!r}")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
    if seconds <= 0:
        raise ValueError("must be greater than zero")
    return seconds


def parse_duration_or_zero(value: Any) -> float:
    """Seconds as :func:`parse_duration` reads them, or 0 for ``0``, ``0s``, ``none``, ``off`` or ``false`` (the
    setting is off)."""
    return 0.0 if str(value).strip().lower() in ("0", "0s", "none", "off", "false") else parse_duration(value)


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""A setting in seconds, given as ``10s``, ``500ms``, ``2m``, ``7d`` or a number of seconds."""
DurationOrOff = Annotated[float, BeforeValidator(parse_duration_or_zero)]
"""A :data:`Duration` that may also be ``0``, ``none`` or ``off``: off."""


def validate_topic_name(name: str) -> str:
    """A legal Kafka topic name, or ``ValueError`` saying why not."""
    if not _TOPIC.match(name) or name in {".", ".."}:
        raise ValueError(f"{name!r} is not a valid Kafka topic name (1-249 of A-Z a-z 0-9 . _ -)")
    return name


def expanded_path(path: Path, name: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded, or a ValueError naming the setting."""
    try:
        return path.expanduser()
    except RuntimeError as exc:  # ~user of a user this machine does not have
        raise ValueError(f"invalid setting {ENV_PREFIX}{name.upper()}={str(path)!r}: {path.parts[0]} names no "
                         "user whose home folder this machine knows; give an absolute path") from exc


def load_sibling_settings(model: type[SiblingSettings], prefix: str, **overrides: Any) -> SiblingSettings:
    """Settings of a DAG beside the stream from ``<prefix>*`` variables (the warden's, maintenance's).

    A variable under ``prefix`` that names no field, and an invalid value, raise :class:`SettingsError`
    naming the variable.
    """
    known = {f"{prefix}{name.upper()}" for name in model.model_fields}
    problems = unknown_names([n for n in os.environ if n.startswith(prefix)], known, "environment variable")
    if problems:
        raise SettingsError("\n".join(problems))
    try:
        return model(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_validation_error(exc, prefix)) from None


MOVED_NAMES = {"STREAMWARDEN_EXPECTATIONS": "STREAMWARDEN_VALIDATION_EXPECTATIONS"}
"""Names a reader may expect (the issue tracker's, older docs') and the setting that holds the value."""


def unknown_names(given: list[str], known: set[str] | frozenset[str], what: str) -> list[str]:
    """One line for each name in ``given`` that is not ``known``, with the setting it means or the closest
    known name if any."""
    lines = []
    for name in sorted(set(given) - set(known)):
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
        hint = (f"; the setting is {MOVED_NAMES[name]}" if name in MOVED_NAMES else
                f"; did you mean {close[0]}?" if close else "")
        lines.append(f"unknown {what} {name}{hint}")
    return lines


def read_config_file(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The mapping in ``STREAMWARDEN_CONFIG_FILE`` (empty when unset); a missing, unreadable or malformed
    file, or one that is not a mapping of setting names, is a :class:`SettingsError` naming it."""
    path = (os.environ if environ is None else environ).get(CONFIG_FILE_ENV)
    if not path:
        return {}
    where = f"{CONFIG_FILE_ENV}={path!r}"
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise SettingsError(f"{where}: cannot read the config file ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SettingsError(f"{where}: not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    if document is None:
        return {}
    if not isinstance(document, dict) or not all(isinstance(k, str) for k in document):
        raise SettingsError(f"{where}: must be a mapping of setting names to values, got "
                            f"{type(document).__name__}")
    return document


class _JsonObject(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in order, so a key given twice can be refused."""


def parse_string_map(value: Any) -> dict[str, str]:
    """A ``{str: str}`` from a mapping or its JSON text; scalar values become strings, a key given twice
    or a nested value is refused."""
    if isinstance(value, str):
        try:
            pairs = json.loads(value, object_pairs_hook=_JsonObject)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                             'expected an object such as {"key": "value"}') from None
        if not isinstance(pairs, _JsonObject):
            raise ValueError('expected a JSON object such as {"key": "value"}')
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        raise ValueError(f"expected a mapping of names to values, got {type(value).__name__}")
    result: dict[str, str] = {}
    for key, item in pairs:
        if key in result:
            raise ValueError(f"key {key!r} is given twice")
        if not isinstance(item, str | int | float):
            kind = "an object" if isinstance(item, _JsonObject | Mapping) else type(item).__name__
            raise ValueError(f"key {key!r}: expected a string or number, got {kind}")
        result[str(key)] = str(item).lower() if isinstance(item, bool) else str(item)
    return result


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot serve as a folder of ours (None when it can): the filesystem root, a file, or
    under something that is not a writable folder."""
    if path == Path(path.anchor):
        return "must not be the filesystem root"
    if path.exists():
        return None if path.is_dir() else "exists and is not a folder"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot be created: {parent} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be created: {parent} is not writable"
    return None


def describe_validation_error(exc: ValidationError, prefix: str = ENV_PREFIX,
                              secrets: frozenset[str] = frozenset()) -> str:
    """One line per bad setting, named as the user sets it (the environment variable under ``prefix``).

    The given value is shown, except for ``secrets`` (settings that may hold credentials); every line
    is scrubbed.
    """
    lines = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:  # a check across settings: its message names them
            lines.append(scrub(message))
            continue
        name = str(error["loc"][0])
        given = error.get("input")
        shown = "" if isinstance(given, dict) or name in secrets else f"={given!r}"
        lines.append(scrub(f"invalid setting {prefix}{name.upper()}{shown}: {message}"))
    return "\n".join(lines)

"""Your own expectations, from the file ``STREAMWARDEN_VALIDATION_EXPECTATIONS`` names: checked, or refused.

The file is a JSON (or YAML) list of entries, each naming a table of the pipeline, a GX expectation class
(``ExpectColumnValuesToBeBetween`` or ``expect_column_values_to_be_between``) and its keyword arguments::

    [{"table": "session_rows", "expectation": "ExpectColumnValuesToBeBetween",
      "kwargs": {"column": "price", "min_value": 0, "max_value": 100000}}]

The file is parsed as data only (``json``, ``yaml.safe_load``): no class is looked up outside
``great_expectations.expectations`` and nothing in it is executed. Expectations that run SQL or read another
table, and row conditions written as pandas queries (pandas would evaluate them), are refused; a row
condition in GX's own syntax (``"condition_parser": "great_expectations"``) or as a condition object is
fine. A bad file is a :class:`~streamwarden.failures.ConfigError` naming the file, the entry and the fault.
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from streamwarden.failures import ConfigError
from streamwarden.validation.expectations.gx import expectations
from streamwarden.validation.expectations.suite import SOURCE_KEY

if TYPE_CHECKING:
    from great_expectations.expectations.expectation import Expectation

VARIABLE = "STREAMWARDEN_VALIDATION_EXPECTATIONS"
MAX_BYTES = 1024 * 1024
REFUSED = {
    "Expectation": "the abstract base class",
    "UnexpectedRowsExpectation": "it runs an SQL query",
    "ExpectQueryResultsToMatchComparison": "it runs SQL queries",
    "ExpectTableRowCountToEqualOtherTable": "it reads another table",
}
ENTRY_KEYS = {"table", "expectation", "kwargs"}


@dataclass(frozen=True)
class UserExpectation:
    """One entry of the file: the table and the expectation (``meta`` names the file's entry)."""

    table: str
    expectation: Expectation
    entry: int  # its index in the file, from 0


def known_expectations() -> dict[str, type[Expectation]]:
    """The expectation classes an entry may name, by class name."""
    found: dict[str, type[Expectation]] = {}
    for name, cls in vars(expectations).items():
        if inspect.isclass(cls) and issubclass(cls, expectations.Expectation) and name not in REFUSED:
            found[name] = cls  # type: ignore[assignment]  # a class of GX's, checked above
    return found


def load_user_expectations(path: Path | None, tables: Sequence[str]) -> list[UserExpectation]:
    """The expectations of the file at ``path`` (none when None), each on one of ``tables``."""
    if path is None:
        return []
    document = _read(path)
    where = f"{VARIABLE}={path}"
    if not isinstance(document, list):
        raise ConfigError(f"{where}: expected a list of entries {{table, expectation, kwargs}}, got "
                          f"{type(document).__name__}")
    known = known_expectations()
    loaded: list[UserExpectation] = []
    problems: list[str] = []
    for index, entry in enumerate(document):
        try:
            loaded.append(_entry(index, entry, tables, known, path))
        except ValueError as exc:
            problems.append(f"entry {index}: {exc}")
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems), details={"file": str(path), "problems": problems})
    return loaded


def _read(path: Path) -> Any:
    where = f"{VARIABLE}={path}"
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(f"{where}: {size:,} bytes, more than the {MAX_BYTES:,} an expectations file may hold")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the expectations file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise ConfigError(f"{where}: not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                          "a .yaml or .yml file is read as YAML") from None


def _entry(index: int, entry: Any, tables: Sequence[str], known: dict[str, type[Expectation]],
           path: Path) -> UserExpectation:
    if not isinstance(entry, dict):
        raise ValueError(f"expected an object {{table, expectation, kwargs}}, got {entry!r}")
    unknown = sorted(set(map(str, entry)) - ENTRY_KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} (an entry has {', '.join(sorted(ENTRY_KEYS))})")
    table = entry.get("table")
    if table not in tables:
        raise ValueError(f"unknown table {table!r} (this pipeline's tables: {', '.join(tables)})")
    name = entry.get("expectation")
    if not isinstance(name, str) or not name:
        raise ValueError("missing expectation: the GX class, e.g. ExpectColumnValuesToBeBetween")
    key = name.replace("_", "").lower()  # ExpectColumnValuesToBeBetween or expect_column_values_to_be_between
    cls = {n.lower(): c for n, c in known.items()}.get(key)
    if cls is None:
        refused = {n.lower(): why for n, why in REFUSED.items()}.get(key)
        if refused is not None:
            raise ValueError(f"expectation {name} is not accepted: {refused}")
        close = difflib.get_close_matches(_class_name(name), sorted(known), n=1, cutoff=0.7)
        raise ValueError(f"unknown expectation {name!r}" + (f"; did you mean {close[0]}?" if close else ""))
    kwargs = entry.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise ValueError(f"{name}: kwargs must be an object of argument -> value, got {kwargs!r}")
    condition = kwargs.get("row_condition")
    if isinstance(condition, str) and kwargs.get("condition_parser") != "great_expectations":
        raise ValueError(f"{name}: a row_condition string is only accepted with \"condition_parser\": "
                         "\"great_expectations\" (a pandas query would be evaluated by pandas)")
    meta = kwargs.get("meta") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"{name}: meta must be an object, got {meta!r}")
    try:
        expectation = cls(**{**kwargs, "meta": {**meta, SOURCE_KEY: f"{path.name} entry {index}"}})
    except (ValueError, TypeError) as exc:  # GX expectations are pydantic models: a ValidationError is a ValueError
        raise ValueError(f"{name}: bad kwargs: {_one_line(exc)}") from None
    return UserExpectation(str(table), expectation, index)


def _class_name(name: str) -> str:
    """``expect_column_values_to_be_betwen`` -> ``ExpectColumnValuesToBeBetwen``, to suggest the closest class."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_")) if "_" in name else name


def _one_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) > 1 and re.match(r"^\d+ validation errors? for ", lines[0]):
        lines = lines[1:]  # pydantic: "field" then "  message (type=...)" pairs
        pairs = [f"{lines[i]}: {lines[i + 1]}" if i + 1 < len(lines) else lines[i] for i in range(0, len(lines), 2)]
        return "; ".join(re.sub(r" \(type=[\w.]+\)$", "", p.replace("__root__: ", "")) for p in pairs)
    return " ".join(lines)

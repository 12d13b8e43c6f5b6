"""Typed, versioned commands to collection points, and their JSON encoding on the control topic.

One command exists: ``restart_session`` (version 1) asks a site to end every session it has open and open
new ones, each with a full snapshot naming the command's ``request_id`` (``restart_request``), at or after
``not_before`` and so that the new sessions are in the output by ``deadline``. ``site`` is the site's
topic, or ``*`` for every site. The message key is the site (so one site's commands stay in order).
See ``docs/wire-format.md`` ("Control topic") for the contract a real collection point follows.

Example::

    >>> command = RestartSession("r-20261124T0400-1", "sites-0", "scheduled restart",
    ...                          issued_at=t0, not_before=t0, deadline=t0 + timedelta(minutes=10))
    >>> decode_command(b"sites-0", encode_command(command)) == command
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from streamwarden.wire import format_ts

CONTROL_VERSION = 1
ALL_SITES = "*"
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
MAX_REASON = 500
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$")


class ControlFormatError(ValueError):
    """A control message that breaks the contract; ``field`` names the culprit when there is one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UnsupportedCommandError(ControlFormatError):
    """A well-formed command of a type or version this reader does not know: to be skipped, not obeyed."""


@dataclass(frozen=True)
class RestartSession:
    """``restart_session``: end the site's open sessions and open new ones with full snapshots."""

    request_id: str
    site: str
    reason: str
    issued_at: datetime
    not_before: datetime
    deadline: datetime
    type: Literal["restart_session"] = field(default="restart_session", init=False)
    version: int = field(default=CONTROL_VERSION, init=False)

    def __post_init__(self) -> None:
        if not REQUEST_ID.match(self.request_id):
            raise ValueError(f"request_id {self.request_id!r}: expected 1-64 of A-Z a-z 0-9 . _ : -")
        if not self.site:
            raise ValueError("site must not be empty (a site's topic, or * for every site)")
        if len(self.reason) > MAX_REASON:
            raise ValueError(f"reason is {len(self.reason)} characters; at most {MAX_REASON}")
        for name in ("issued_at", "not_before", "deadline"):
            if getattr(self, name).tzinfo is None:
                raise ValueError(f"{name} has no time zone")
        if not self.issued_at <= self.not_before < self.deadline:
            times = ", ".join(t.isoformat() for t in (self.issued_at, self.not_before, self.deadline))
            raise ValueError(f"expected issued_at <= not_before < deadline, got {times}")

    def targets(self, site: str) -> bool:
        """Whether this command is for ``site`` (a site's topic)."""
        return self.site in (ALL_SITES, site)

    @property
    def key(self) -> bytes:
        return self.site.encode()


def encode_command(command: RestartSession) -> bytes:
    """Compact UTF-8 JSON of a command, ``type`` and ``version`` first; times as RFC 3339 UTC."""
    return msgspec.json.encode({
        "type": command.type, "version": command.version, "request_id": command.request_id,
        "site": command.site, "reason": command.reason, "issued_at": format_ts(command.issued_at),
        "not_before": format_ts(command.not_before), "deadline": format_ts(command.deadline),
    })


def decode_command(key: bytes | None, value: bytes | None) -> RestartSession:
    """The command in a control message, or :class:`ControlFormatError` naming what is wrong.

    A command of another ``type`` or a ``version`` above :data:`CONTROL_VERSION` raises
    :class:`UnsupportedCommandError`: readers skip it (and say so) rather than guess.
    """
    if value is None:
        raise ControlFormatError("null value (tombstone)")
    try:
        document = msgspec.json.decode(value)
    except ValueError as exc:
        raise ControlFormatError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ControlFormatError(f"value must be a JSON object, not {type(document).__name__}")
    type_ = _field(document, "type", str)
    version = _field(document, "version", int)
    if type_ != "restart_session":
        raise UnsupportedCommandError(f"unknown command type {type_!r}; known: restart_session", "type")
    if isinstance(version, bool) or not 1 <= version <= CONTROL_VERSION:
        raise UnsupportedCommandError(f"restart_session version {version} is not supported (1..{CONTROL_VERSION})",
                                 "version")
    site = _field(document, "site", str)
    if key is None or key.decode(errors="replace") != site:
        shown = None if key is None else key.decode(errors="replace")
        raise ControlFormatError(f"key {shown!r} is not the site {site!r}", "site")
    try:
        return RestartSession(
            request_id=_field(document, "request_id", str), site=site, reason=_field(document, "reason", str),
            issued_at=_time(document, "issued_at"), not_before=_time(document, "not_before"),
            deadline=_time(document, "deadline"))
    except ValueError as exc:
        if isinstance(exc, ControlFormatError):
            raise
        raise ControlFormatError(str(exc)) from None


def _field(document: dict[str, Any], name: str, type_: type[Any]) -> Any:
    if name not in document:
        raise ControlFormatError(f"missing field {name!r}", name)
    value = document[name]
    if not isinstance(value, type_) or (type_ is int and isinstance(value, bool)):
        raise ControlFormatError(f"{name} must be {type_.__name__}, not {type(value).__name__}", name)
    return value


def _time(document: dict[str, Any], name: str) -> datetime:
    text = _field(document, name, str)
    if not _ISO.match(text):
        raise ControlFormatError(f"{name} must be ISO-8601 with a UTC offset, got {text!r}", name)
    return datetime.fromisoformat(text).astimezone(UTC)

"""What a ``restart_sessions`` run is asked to do: which sites, why, how spread out, how long they have.

A scheduled run restarts every site with the settings' jitter and deadline; a manual run's Params narrow
it. Every Param is checked before anything is sent, and every bad one is named at once (CONFIG).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from streamwarden.control.commands import MAX_REASON
from streamwarden.failures import ConfigError
from streamwarden.session_restarts.settings import RestartSettings
from streamwarden.settings import Settings
from streamwarden.settings_loading import parse_duration, validate_topic_name

SCHEDULED_REASON = "scheduled restart (STREAMWARDEN_SESSION_RESTART_SCHEDULE)"


@dataclass(frozen=True)
class RestartRequest:
    """The checked request: ``sites`` named, or a ``pattern`` (full match) over the stream's topics, or all."""

    sites: tuple[str, ...]
    pattern: str | None
    reason: str
    jitter: float
    deadline: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RestartRequest:
        return cls(tuple(document["sites"]), document["pattern"], document["reason"], float(document["jitter"]),
                   float(document["deadline"]))

    def describe(self) -> str:
        """Which sites, in words."""
        if self.sites:
            return f"sites {', '.join(self.sites)}"
        return f"sites matching {self.pattern!r}" if self.pattern else "every site"


def request_from_params(params: Mapping[str, Any], settings: Settings, restarts: RestartSettings
                        ) -> RestartRequest:
    """Check a run's Params; a CONFIG error names each bad one. Absent or empty Params mean the default.

    Params: ``sites`` (list of site topics; empty: all), ``pattern`` (a regex the site topics must fully
    match; not with ``sites``), ``reason`` (text sent with the command), ``jitter`` and ``deadline``
    (durations such as ``2m``; empty: the settings').
    """
    problems: list[str] = []
    sites = _sites(params.get("sites") or [], settings, problems)
    pattern = _pattern(params.get("pattern") or None, problems)
    if sites and pattern:
        problems.append("Params sites and pattern: give one of them, not both")
    reason = params.get("reason") or SCHEDULED_REASON
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        problems.append(f"Param reason: expected text of at most {MAX_REASON} characters")
    jitter = _duration(params.get("jitter"), "jitter", restarts.jitter, problems, zero=True)
    deadline = _duration(params.get("deadline"), "deadline", restarts.deadline, problems, zero=False)
    if problems:
        raise ConfigError("; ".join(problems), details={"params": dict(params)})
    return RestartRequest(tuple(sites), pattern, str(reason), jitter, deadline)


def _sites(given: Any, settings: Settings, problems: list[str]) -> list[str]:
    if not isinstance(given, list | tuple) or not all(isinstance(s, str) for s in given):
        problems.append(f"Param sites: expected a list of site topics, got {given!r}")
        return []
    sites = []
    for site in given:
        try:
            validate_topic_name(site)
        except ValueError as exc:
            problems.append(f"Param sites: {exc}")
            continue
        if not re.fullmatch(settings.topic_pattern, site):
            problems.append(f"Param sites: {site!r} is not a site of this stream (STREAMWARDEN_TOPIC_PATTERN is "
                            f"{settings.topic_pattern!r})")
            continue
        sites.append(site)
    if len(set(sites)) != len(sites):
        problems.append(f"Param sites: a site is named twice in {sites}")
    return sites


def _pattern(given: Any, problems: list[str]) -> str | None:
    if given is None:
        return None
    if not isinstance(given, str):
        problems.append(f"Param pattern: expected a regular expression, got {given!r}")
        return None
    try:
        re.compile(given)
    except re.error as exc:
        problems.append(f"Param pattern: {given!r} is not a valid regular expression: {exc}")
        return None
    return given


def _duration(given: Any, name: str, default: float, problems: list[str], *, zero: bool) -> float:
    if given in (None, ""):
        return default
    if zero and str(given).strip() in ("0", "0s"):
        return 0.0
    try:
        return parse_duration(given)
    except ValueError as exc:
        problems.append(f"Param {name}: {exc}")
        return default

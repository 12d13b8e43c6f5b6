"""What an ``upgrade_stream`` run is asked to do: which release, how long to watch it, check only or not, why.

Every Param is checked here, before anything is read from the stream or changed, and every bad one is named at
once (CONFIG): the release must be a plain name whose file is in the releases folder and holds valid settings
a release may change (:mod:`.release`); ``health_minutes`` a number of minutes within the bounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamwarden.failures import ConfigError
from streamwarden.params import dry_and_reason
from streamwarden.settings import Settings
from streamwarden.upgrade.release import Release, read_release

MIN_HEALTH_MINUTES = 0.25
MAX_HEALTH_MINUTES = 240.0
DEFAULT_HEALTH_MINUTES = 10.0
ARCHIVE = "archive"
"""Folder under the checkpoint root holding checkpoint copies (never a query's checkpoint)."""


@dataclass(frozen=True)
class UpgradeRequest:
    """The checked Params of one run."""

    release: Release
    health_minutes: float
    dry_run: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release.to_json(), "health_minutes": self.health_minutes, "dry_run": self.dry_run,
                "reason": self.reason}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> UpgradeRequest:
        return cls(Release.from_json(document["release"]), float(document["health_minutes"]),
                   bool(document["dry_run"]), str(document["reason"]))

    def describe(self) -> str:
        what = "check" if self.dry_run else f"upgrade to, watched {self.health_minutes:g} min:"
        return f"{what} release {self.release.name!r} (digest {self.release.digest})"


def request_from_params(params: Mapping[str, Any], settings: Settings) -> UpgradeRequest:
    """Check a run's Params; a CONFIG error names each bad one.

    Params: ``release`` (the name of a file in ``<home>/releases/``, without ``.yaml``), ``health_minutes``
    (how long the new version must stay healthy, 0.25-240, default 10), ``dry_run`` (default true: check the
    release and the compatibility, change nothing), ``reason`` (text, kept in the report and the alert).
    """
    problems: list[str] = []
    release: Release | None = None
    name = params.get("release")
    if not name:
        problems.append("Param release: required (the name of a release file in the releases folder)")
    else:
        try:
            release = read_release(settings, name)
        except ConfigError as exc:
            problems.append(f"Param release: {exc.message}")
    minutes = params.get("health_minutes", DEFAULT_HEALTH_MINUTES)
    if minutes is None or minutes == "":
        minutes = DEFAULT_HEALTH_MINUTES
    try:
        health = float(minutes)
        if isinstance(minutes, bool) or not math.isfinite(health) or \
                not MIN_HEALTH_MINUTES <= health <= MAX_HEALTH_MINUTES:
            raise ValueError
    except (TypeError, ValueError):
        problems.append(f"Param health_minutes: expected a number of minutes from {MIN_HEALTH_MINUTES:g} to "
                        f"{MAX_HEALTH_MINUTES:g}, got {minutes!r}")
        health = DEFAULT_HEALTH_MINUTES
    dry_run, reason = dry_and_reason(params, problems)
    if settings.query_name == ARCHIVE:
        problems.append(f"STREAMWARDEN_QUERY_NAME {ARCHIVE!r} is the folder of the checkpoint copies under the "
                        "checkpoint root; an upgrade cannot copy this checkpoint")
    if problems or release is None:
        raise ConfigError("; ".join(problems), details={"params": {k: params[k] for k in sorted(params)}})
    return UpgradeRequest(release, health, dry_run, reason)

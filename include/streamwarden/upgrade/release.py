"""Releases: operator-installed files of settings, and the active release every launch of the stream applies.

A *release* is a YAML file ``<home>/releases/<name>.yaml`` mapping setting names to values, in the format of
``STREAMWARDEN_CONFIG_FILE`` (``session_handler: mypkg.handlers:Sessions``, ``table_schema: {...}``). Only an
operator installs one: it may name code (the session handler) and pass-through client settings, so a DAG run's
Params only name a release, never its content or a path. A release may not change what identifies the
stream's data (:data:`PINNED`): its folders, the query, the pipeline, the partitioning, and what the checkpoint's
state layout depends on.

The *active release* is ``<run_root>/release/active.json``: its name, its settings, and the release it replaced
(what a rollback returns to). :func:`load_release_settings` builds the settings of the stream as the environment
and the config file give them with the active release's settings over them; whatever launches the stream uses
it (the Airflow hook), so a restart by the warden runs the active release, not the one before it.

Example::

    >>> release = read_release(settings, "v2")        # <home>/releases/v2.yaml, checked
    >>> activate(settings, release, owner="upgrade_stream/manual__2026-11-24")
    >>> load_release_settings().session_handler       # the environment's settings with v2's over them
    'mypkg.handlers:SessionsV2'
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import ConfigError
from streamwarden.settings import Settings, load_settings
from streamwarden.settings_loading import SettingsError, unknown_names

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PINNED: dict[str, str] = {
    "home": "the folders of the tables, the checkpoint and the run files",
    "output_root": "the tables' folder",
    "checkpoint_root": "the checkpoint's folder",
    "state_root": "the state store's scratch folder",
    "run_root": "the run files' folder (heartbeat, hold, the active release)",
    "query_name": "the checkpoint the stream continues",
    "pipeline": "which tables the stream writes",
    "output_partition_by": "the tables' partitioning (pinned when they were created)",
    "session_buckets": "where each session's state lives (fixed once a checkpoint exists)",
    "shuffle_partitions": "the state's partitions (fixed once a checkpoint exists)",
    "session_slots": "how each bucket's session states are laid out (fixed once a checkpoint exists)",
}
"""Settings a release may not change, and what each one pins."""
PINNED_SPARK_CONF = ("spark.sql.shuffle.partitions", "spark.sql.streaming.stateStore.")
"""``spark_conf`` keys (or prefixes) a release may not change: the checkpoint's state depends on them."""


@dataclass(frozen=True)
class Release:
    """A checked release file: its name, its settings and a digest of its text (``path`` where it was read)."""

    name: str
    overrides: dict[str, Any]
    digest: str
    path: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "overrides": self.overrides, "digest": self.digest, "path": self.path}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Release:
        return cls(str(document["name"]), dict(document["overrides"]), str(document["digest"]),
                   str(document.get("path", "")))


def installed_releases(settings: Settings) -> list[str]:
    """The names of the releases installed under the releases folder, sorted (none when it does not exist)."""
    folder = settings.home_paths.releases
    return sorted(p.stem for p in folder.glob("*.yaml") if p.is_file() and NAME.match(p.stem)) \
        if folder.is_dir() else []


def release_path(settings: Settings, name: str) -> Path:
    """The file of release ``name``; CONFIG error for a name that is not a plain file name or a file that
    resolves outside the releases folder (a symbolic link elsewhere)."""
    if not isinstance(name, str) or not NAME.match(name) or ".." in name:
        raise ConfigError(f"release {name!r} is not a release name (1-64 of A-Z a-z 0-9 . _ -, starting with a "
                          "letter or digit; no path)")
    folder = settings.home_paths.releases.resolve()
    path = (folder / f"{name}.yaml").resolve()
    if path.parent != folder:
        raise ConfigError(f"release {name!r} resolves to {path}, outside the releases folder {folder}")
    return path


def read_release(settings: Settings, name: str) -> Release:
    """Release ``name`` read and checked: a mapping of known settings, none pinned, valid with the environment's
    settings under it. Every problem is named at once (CONFIG)."""
    path = release_path(settings, name)
    where = f"release {name!r} ({path})"
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file; install it under {settings.home_paths.releases}") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(document, dict) or not document or not all(isinstance(k, str) for k in document):
        raise ConfigError(f"{where}: must be a non-empty mapping of setting names to values")
    try:
        json.dumps(document)
    except TypeError as exc:
        raise ConfigError(f"{where}: values must be text, numbers, booleans, lists or mappings ({exc})") from None
    problems = unknown_names(list(document), set(Settings.model_fields), f"setting in {where}")
    problems += [f"{where}: {key} may not change in a release: it pins {PINNED[key]}"
                 for key in sorted(document) if key in PINNED]
    if not problems:
        try:
            load_settings(**document)
        except SettingsError as exc:
            problems += [f"{where}: {line}" for line in str(exc).splitlines()]
    if problems:
        raise ConfigError("; ".join(problems), details={"release": name})
    return Release(name, document, hashlib.sha256(text.encode()).hexdigest()[:16], str(path))


@dataclass(frozen=True)
class ActiveRelease:
    """The release in force, who made it so and when, and the one it replaced (None: the base settings)."""

    release: Release
    activated_at: str
    by: str
    previous: Release | None

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release.to_json(), "activated_at": self.activated_at, "by": self.by,
                "previous": None if self.previous is None else self.previous.to_json()}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ActiveRelease:
        previous = document.get("previous")
        return cls(Release.from_json(document["release"]), str(document["activated_at"]), str(document["by"]),
                   None if previous is None else Release.from_json(previous))


def read_active(settings: Settings) -> ActiveRelease | None:
    """The active release, or None when the base settings are in force."""
    document = read_json(settings.run_paths.active_release)
    return None if document is None else ActiveRelease.from_json(document)


def activate(settings: Settings, release: Release | None, *, owner: str) -> ActiveRelease | None:
    """Make ``release`` the active one (None: the base settings), keeping the one it replaces as ``previous``.
    Activating the release already active changes nothing (a re-run)."""
    current = read_active(settings)
    if release is None:
        settings.run_paths.active_release.unlink(missing_ok=True)
        return None
    if current is not None and current.release == release:
        return current
    active = ActiveRelease(release, datetime.now(UTC).isoformat(timespec="seconds"), owner,
                           None if current is None else current.release)
    write_json_atomic(settings.run_paths.active_release, active.to_json())
    return active


def settings_of(base: Settings, release: Release | None) -> Settings:
    """The settings ``base`` came from (the environment and the config file) with ``release``'s over them."""
    if release is None:
        return base
    try:
        return load_settings(**release.overrides)
    except SettingsError as exc:
        raise SettingsError(f"the active release {release.name!r} ({base.run_paths.active_release}) is no longer "
                            f"valid with these settings:\n{exc}") from None


def load_release_settings() -> Settings:
    """The stream's settings: the environment and the config file, with the active release's over them."""
    base = load_settings()
    active = read_active(base)
    return settings_of(base, None if active is None else active.release)

"""One ``upgrade_stream`` run, as its DAG calls it, step by step; each step idempotent through the journal.

1. **check**: the release's settings against the stream's checkpoint and tables (:mod:`.compatibility`).
2. **hold_and_drain**: the run holds the stream (:mod:`streamwarden.runfiles.hold`: the warden, the launcher
   and maintenance leave it alone), then stops it gracefully (drain, then signals).
3. **copy_checkpoint**: the rollback point: a copy of the checkpoint in ``<checkpoint_root>/archive/``, each
   table's Delta version and the release in force.
4. **evolve_schema**: the added nullable columns, added to ``session_rows`` (``DeltaTable.alter.add_columns``).
5. **activate_release**: the release becomes the active one (what every launch applies).
6. **start_new**: the hold released, the stream started with the release, the hold taken again for the watch.
7. **watch**: the warden's verdict, until the new version has been running healthy for the window (the hold is
   then released), or it is FAILED, HUNG or DEAD, or it committed no batch while records waited.
8. **rollback** (when a step from 2 on failed): the stream held and stopped; each table restored to its
   rollback version *with the offsets it claims* (:func:`~streamwarden.tables.restore.restore_table`: a plain
   Delta restore would make the replay be skipped as committed); the new version's checkpoint moved to the
   archive and the copy put back; the previous release active again; the hold released, the old version
   started and confirmed running.

How the stream is started and stopped is passed in (the Airflow hook's spark-submit); a start builds its
settings when called, so it runs the release active at that moment.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from deltalake import CommitProperties
from deltalake.schema import Schema as DeltaSchema

from streamwarden.failures import ConfigError, FailureClass, StreamwardenError
from streamwarden.runfiles.checkpoint import commit_batches
from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.hold import read_hold, release_hold, take_hold
from streamwarden.session_handler import load_checked_handler
from streamwarden.settings import Settings
from streamwarden.tables.location import SESSION_ROWS, TableLocation, pipeline_tables
from streamwarden.tables.restore import restore_table
from streamwarden.upgrade.compatibility import Compatibility, check_compatibility, session_rows_schema
from streamwarden.upgrade.journal import Journal
from streamwarden.upgrade.release import Release, activate, read_active, settings_of
from streamwarden.upgrade.request import ARCHIVE, UpgradeRequest
from streamwarden.warden.health import HealthVerdict, Overall, assess
from streamwarden.warden.launcher import StreamAlreadyRunningError, read_launch_record, running_holder
from streamwarden.warden.settings import WardenSettings
from streamwarden.warden.stop import StopOutcome
from streamwarden.wire import TableSchema

log = logging.getLogger("streamwarden.upgrade")
ENVIRONMENT_RESTARTS = 3
"""Times the watch starts a new version again that failed with ENVIRONMENT before it blames the release."""
StartStream = Callable[[], int]
"""Starts the stream with the settings in force when called (the active release); the driver's pid."""
StopStream = Callable[[], StopOutcome]
UPGRADE_KEY = "streamwarden.upgrade"


class UnhealthyError(StreamwardenError):
    """A version of the stream was judged unhealthy by the warden's verdict; its class is the stream's own
    failure's when it failed with one (BUG for a handler that raises), else BUG (hung, dead, no batch)."""

    def __init__(self, message: str, failure_class: FailureClass = FailureClass.BUG,
                 details: dict[str, Any] | None = None) -> None:
        self.failure_class = failure_class
        super().__init__(message, details=details)


class NotHeldError(ConfigError):
    """A step that changes the checkpoint or the tables found the stream not held by this run, or running."""


def new_settings(current: Settings, release: Release) -> Settings:
    """The settings of the stream under ``release`` (the environment's, with the release's over them)."""
    return settings_of(current, release)


def check(current: Settings, request: UpgradeRequest) -> Compatibility:
    """Step 1: the compatibility of the release with the stream's checkpoint and tables; CONFIG when refused."""
    result = check_compatibility(current, new_settings(current, request.release), request.release.name)
    log.info("compatibility of release %s:\n%s", request.release.name, result.text())
    if not result.compatible:
        raise ConfigError(f"release {request.release.name!r} is not compatible: " + "; ".join(result.refusals),
                          details={"compatibility": result.to_json()})
    return result


def _running(settings: Settings) -> bool:
    record = read_launch_record(settings)
    return running_holder(settings) is not None or (record is not None and record.leader_alive())


def hold_and_drain(settings: Settings, journal: Journal, *, owner: str, reason: str,
                   stop: StopStream) -> dict[str, Any]:
    """Step 2: hold the stream for ``owner``, then stop it (drain first). Re-run: the hold is ours already, the
    stream stopped (NOT_RUNNING); whether it ran before the upgrade is kept from the first run."""
    was_running = _running(settings)
    take_hold(settings, owner, reason)
    held = journal.get("hold")
    if held is None:
        held = {"owner": owner, "was_running": was_running, "at": datetime.now(UTC).isoformat(timespec="seconds")}
        journal.put("hold", held)
    outcome = stop()
    if running_holder(settings) is not None:
        raise NotHeldError("the stream still runs after the stop; nothing was changed")
    drained = journal.get("drained") or outcome.to_json()
    journal.put("drained", drained)
    log.info("stream held by %s and stopped (%s)", owner, drained["method"])
    return {**held, "stopped": drained}


def _require_held(settings: Settings, owner: str, what: str) -> None:
    hold = read_hold(settings)
    if hold is None or hold.owner != owner:
        raise NotHeldError(f"{what} refused: the stream is not held by {owner} "
                           f"({hold.describe() if hold else 'no hold'})")
    if running_holder(settings) is not None:
        raise NotHeldError(f"{what} refused: the stream is running")


def archive_folder(settings: Settings) -> Path:
    return settings.root("checkpoint") / ARCHIVE


def _copy_tree(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` whole or not at all (a partial copy of a killed run is made again)."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, partial, symlinks=True)
    partial.rename(target)


def table_versions(settings: Settings) -> dict[str, int | None]:
    """Each of the pipeline's tables' newest Delta version (None: not created yet)."""
    versions: dict[str, int | None] = {}
    for name in pipeline_tables(settings):
        table = TableLocation.of(settings, name).open_or_none()
        versions[name] = None if table is None else table.version()
    return versions


def copy_checkpoint(settings: Settings, journal: Journal, *, owner: str) -> dict[str, Any]:
    """Step 3: the rollback point. Re-run: a recorded point whose copy exists is kept; a copy renamed into place by
    a killed run is complete (the stream is held stopped: nothing changed since)."""
    point: dict[str, Any] | None = journal.get("rollback_point")
    if point is not None and (point["checkpoint_copy"] is None or Path(point["checkpoint_copy"]).is_dir()):
        return point
    _require_held(settings, owner, "copying the checkpoint")
    target = archive_folder(settings) / f"{journal.stamp}-upgrade-{journal.key}"
    source = settings.checkpoint_location
    copied: str | None = None
    if source.is_dir():
        if not target.is_dir():
            _copy_tree(source, target)
        copied = str(target)
    active = read_active(settings)
    commits = commit_batches(source)
    point = {"checkpoint": str(source), "checkpoint_copy": copied, "versions": table_versions(settings),
             "release": None if active is None else active.release.to_json(),
             "last_commit": commits[-1] if commits else None}
    journal.put("rollback_point", point)
    log.info("rollback point: checkpoint copy %s, table versions %s, release %s", copied, point["versions"],
             active.release.name if active else "(base settings)")
    return point


def evolve_schema(current: Settings, request: UpgradeRequest, journal: Journal, *, owner: str) -> dict[str, Any]:
    """Step 4: the release's added columns added to ``session_rows``; a column already there is left (re-run)."""
    new = new_settings(current, request.release)
    if new.pipeline != "sessions":
        journal.put("evolved", {})
        return {}
    _require_held(current, owner, "evolving the table schema")
    location = TableLocation.of(current, SESSION_ROWS)
    table = location.open_or_none()
    if table is None:
        journal.put("evolved", {})
        return {}
    _, columns = load_checked_handler(new.session_handler, TableSchema.parse(new.table_schema))
    have = set(pa.schema(table.schema().to_arrow()).names)
    missing = [f for f in session_rows_schema(columns) if f.name not in have]
    if any(not f.nullable for f in missing):
        raise ConfigError(f"columns {[f.name for f in missing if not f.nullable]} would be added as not nullable")
    if missing:
        with location.reaching():
            table.alter.add_columns(DeltaSchema.from_arrow(pa.schema(missing)).fields,
                                    commit_properties=CommitProperties(custom_metadata={UPGRADE_KEY: journal.key}))
    evolved = {SESSION_ROWS: {"added": [f"{f.name} {f.type}" for f in missing],
                              "version": location.open().version()}}
    journal.put("evolved", evolved)
    log.info("schema of %s: added %s", SESSION_ROWS, evolved[SESSION_ROWS]["added"] or "nothing")
    return evolved


def activate_release(settings: Settings, request: UpgradeRequest, journal: Journal, *, owner: str) -> dict[str, Any]:
    """Step 5: the release is the active one (a re-run finds it active and changes nothing)."""
    _require_held(settings, owner, "activating the release")
    active = activate(settings, request.release, owner=owner)
    assert active is not None
    document = active.to_json()
    journal.put("activated", document)
    log.info("release %s is active (previous: %s)", request.release.name,
             active.previous.name if active.previous else "the base settings")
    return document


def _start_held(settings: Settings, *, owner: str, reason: str, start: StartStream) -> tuple[int, bool]:
    """Release the hold, start the stream (the active release applies), hold it again: the driver's pid, and
    whether this call started it (False: it was running already)."""
    holder = running_holder(settings)
    if holder is not None:
        return holder.pid, False
    release_hold(settings, owner)
    try:
        pid, started = start(), True
    except StreamAlreadyRunningError as exc:  # started meanwhile (the warden, with the same active release)
        if exc.holder is None:
            raise
        pid, started = exc.holder.pid, False
    finally:
        take_hold(settings, owner, reason)
    return pid, started


def start_new(settings: Settings, journal: Journal, *, owner: str, reason: str, start: StartStream) -> dict[str, Any]:
    """Step 6: the new version started and held for the watch; a re-run finds it running and leaves it."""
    hold = read_hold(settings)
    if hold is None or hold.owner != owner:
        raise NotHeldError(f"starting the new version refused: the stream is not held by {owner}")
    commits = commit_batches(settings.checkpoint_location)
    pid, started = _start_held(settings, owner=owner, reason=reason, start=start)
    entry = journal.get("started") or {"pid": pid, "at": time.time(), "last_commit": commits[-1] if commits else None}
    entry = {**entry, "pid": pid, "launched": started or bool(entry.get("launched"))}
    journal.put("started", entry)
    log.info("new version running: pid %d", pid)
    return dict(entry)


@dataclass(frozen=True)
class WatchResult:
    """One look at the new version: ``done`` when the watch has its answer, ``healthy`` the answer."""

    done: bool
    healthy: bool
    reason: str
    verdict: HealthVerdict

    def to_json(self) -> dict[str, Any]:
        return {"done": self.done, "healthy": self.healthy, "reason": self.reason, "verdict": self.verdict.to_json()}


BAD = (Overall.FAILED, Overall.HUNG, Overall.DEAD)
RUNNING = (Overall.HEALTHY, Overall.DEGRADED)


def watch(settings: Settings, warden: WardenSettings, journal: Journal, *, minutes: float,
          now: float | None = None, restart: Callable[[], int] | None = None) -> WatchResult:
    """Step 7, one look: FAILED, HUNG or DEAD is unhealthy at once; the window counts from the first look at a
    running (HEALTHY or DEGRADED) stream; at its end the stream must be running and, if records wait, must have
    committed a batch since it started (while its first batch still runs, the watch waits: the verdict turns
    HUNG once that batch outlasts the start-up grace).

    A new version that failed with ENVIRONMENT (the broker or the store did not answer) says nothing about the
    release: ``restart`` starts it again, up to :data:`ENVIRONMENT_RESTARTS` times, and its window starts anew.
    (Without this, a broker that paused for a minute while the new version started rolled back a good release.)"""
    now = time.time() if now is None else now
    assessment = assess(settings, warden, now)
    assessment.commit()
    verdict = assessment.verdict
    started = journal.get("started") or {}
    if verdict.overall in BAD:
        failure = verdict.failure
        restarted = int(journal.get("environment_restarts") or 0)
        if (restart is not None and failure is not None and failure.failure_class is FailureClass.ENVIRONMENT
                and restarted < ENVIRONMENT_RESTARTS):
            journal.put("environment_restarts", restarted + 1)
            journal.put("watch_from", None)
            pid = restart()
            return WatchResult(False, False, f"the new version failed with ENVIRONMENT, not the release's doing "
                               f"({failure.message}); started again (pid {pid}, {restarted + 1} of "
                               f"{ENVIRONMENT_RESTARTS})", verdict)
        return WatchResult(True, False, f"the new version is {verdict.label}: {'; '.join(verdict.reasons)}", verdict)
    if verdict.overall not in RUNNING:
        return WatchResult(False, False, f"{verdict.label}: {'; '.join(verdict.reasons)}", verdict)
    since = journal.get("watch_from")
    if since is None:
        since = now
        journal.put("watch_from", since)
    left = since + minutes * 60 - now
    if left > 0:
        return WatchResult(False, False, f"{verdict.label} for {now - since:.0f}s of {minutes * 60:.0f}s", verdict)
    commits = commit_batches(settings.checkpoint_location)
    last = commits[-1] if commits else None
    moved = last is not None and (started.get("last_commit") is None or last > started["last_commit"])
    if not moved and verdict.lag.total_lag > 0:
        if verdict.heartbeat.last_batch_id is None:  # the first batch warms up: the start-up grace is its limit
            return WatchResult(False, False, f"{verdict.label}: the new version's first batch is still running "
                               f"(it may take the start-up grace, {warden.startup_grace:g}s)", verdict)
        return WatchResult(True, False, f"no batch committed in {minutes:g} min while {verdict.lag.total_lag} "
                           "records wait", verdict)
    return WatchResult(True, True, f"{verdict.label} for {minutes:g} min; last committed batch {last}", verdict)


def restart_for_watch(settings: Settings, *, owner: str, start: StartStream) -> int:
    """The new version started again for the watch (the hold released for the launch and taken again)."""
    pid, _ = _start_held(settings, owner=owner, reason="upgrade: the new version started again after an "
                         "ENVIRONMENT failure", start=start)
    return pid


def finish_watch(settings: Settings, journal: Journal, result: WatchResult, *, owner: str) -> None:
    """A healthy watch: recorded, and the hold released (the warden supervises the new version from now)."""
    journal.put("watched", result.to_json())
    release_hold(settings, owner)


def unhealthy(result: WatchResult) -> UnhealthyError:
    """The error of an unhealthy watch, with the verdict and the stream's failure document as details."""
    failure = result.verdict.failure
    return UnhealthyError(result.reason, failure.failure_class if failure else FailureClass.BUG,
                          details={"verdict": result.verdict.to_json(),
                                   "stream_failure": failure.to_json() if failure else None})


def _restore_checkpoint(settings: Settings, journal: Journal, point: dict[str, Any]) -> dict[str, Any]:
    """The new version's checkpoint to the archive, the copy back in its place; each move journalled before."""
    done: dict[str, Any] = journal.get("rollback_checkpoint") or {}
    if done.get("restored"):
        return done
    live = settings.checkpoint_location
    aside = done.get("archived") or str(archive_folder(settings) / f"{journal.stamp}-rolledback-{journal.key}")
    if not done.get("archived"):
        journal.put("rollback_checkpoint", {"archived": aside, "restored": False})
    if live.exists() and not Path(aside).exists():
        Path(aside).parent.mkdir(parents=True, exist_ok=True)
        live.rename(aside)
    if not live.exists() and point["checkpoint_copy"] is not None:
        _copy_tree(Path(point["checkpoint_copy"]), live)
    done = {"archived": aside if Path(aside).exists() else None, "restored": True,
            "from": point["checkpoint_copy"]}
    journal.put("rollback_checkpoint", done)
    return done


def rollback(settings: Settings, warden: WardenSettings, journal: Journal, *, owner: str, reason: str,
             start: StartStream, stop: StopStream, confirm_timeout: float | None = None) -> dict[str, Any] | None:
    """Step 8: back to the rollback point and the previous release, the old version started and confirmed running.
    None when this run changed nothing (it never held the stream). Each part is journalled; a re-run resumes."""
    if journal.get("hold") is None:
        return None
    take_hold(settings, owner, reason)
    stopped = stop()
    point = journal.get("rollback_point")
    restored: dict[str, Any] = {}
    checkpoint: dict[str, Any] | None = None
    if point is not None:
        for name, version in point["versions"].items():
            location = TableLocation.of(settings, name)
            table = location.open_or_none()
            if version is None or table is None:
                restored[name] = {"table": name, "note": "no version to restore to (the table did not exist)"}
                continue
            if table.version() == version:
                restored[name] = {"table": name, "target": version, "version": version, "already": True, "undone": {}}
                continue
            restored[name] = restore_table(location, version, f"upgrade-{journal.key}").to_json()
        checkpoint = _restore_checkpoint(settings, journal, point)
        old = point["release"]
        activate(settings, None if old is None else Release.from_json(old), owner=owner)
    journal.put("rollback", {"stopped": stopped.to_json(), "tables": restored, "checkpoint": checkpoint,
                             "release": None if point is None else (point["release"] or {}).get("name")})
    started: dict[str, Any] = {"pid": None, "started": False,
                               "new_version_failure": _set_aside_new_version_failure(settings, journal)}
    if (journal.get("hold") or {}).get("was_running", True):  # a stream that was not running stays stopped
        pid, launched = _start_held(settings, owner=owner, reason=reason, start=start)
        started = {"pid": pid, "started": launched}
        confirm = warden.startup_grace if confirm_timeout is None else confirm_timeout
        verdict = _confirm_running(settings, warden, pid, confirm)
        started["verdict"] = verdict.label
    release_hold(settings, owner)
    entry = {**journal.get("rollback"), "old_version": started}
    journal.put("rollback", entry)
    log.info("rolled back: tables %s, checkpoint %s, old version %s", restored, checkpoint, started)
    return dict(entry)


def _set_aside_new_version_failure(settings: Settings, journal: Journal) -> str | None:
    """The failure document the rolled-back release wrote is the new version's, not the old one's: it goes into the
    run's folder (where the report names it), so that the warden judges the old version by its own state. Without
    this, an old version that was not running when the upgrade began (it had just died) stayed stopped after the
    rollback, and the warden, reading the new version's BUG, escalated to a person instead of restarting it. A
    failure the old version had written before the upgrade (moved aside when the new version took the lease) is
    put back. Where the document went, or None when there was none of the new version's."""
    hold = journal.get("hold") or {}
    since = datetime.fromisoformat(hold["at"]) if hold.get("at") else None
    paths = settings.run_paths
    failure = read_failure(paths.failure)
    if failure is None or since is None or datetime.fromisoformat(failure.occurred_at) < since:
        return None
    kept = journal.path.parent / "new_version_failure.json"
    paths.failure.replace(kept)
    earlier = paths.previous_failure
    before = read_failure(earlier)
    if before is not None and datetime.fromisoformat(before.occurred_at) < since:
        earlier.replace(paths.failure)
    log.info("the new version's failure document (%s, pid %d) moved to %s", failure.failure_class, failure.pid, kept)
    return str(kept)


def _confirm_running(settings: Settings, warden: WardenSettings, pid: int, timeout: float) -> HealthVerdict:
    """Waits until the old version runs (HEALTHY or DEGRADED, its own heartbeat); raises when it fails or dies."""
    deadline = time.monotonic() + timeout
    while True:
        verdict = assess(settings, warden).verdict
        if verdict.overall in RUNNING and verdict.pid == pid:
            return verdict
        if verdict.overall in BAD:
            raise UnhealthyError(f"the old version did not come back: {verdict.label}: {'; '.join(verdict.reasons)}",
                                 verdict.failure_class or FailureClass.BUG, details={"verdict": verdict.to_json()})
        if time.monotonic() > deadline:
            raise UnhealthyError(f"the old version is still {verdict.label} after {timeout:.0f}s",
                                 details={"verdict": verdict.to_json()})
        time.sleep(2)

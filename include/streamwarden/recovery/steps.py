"""One ``recover_stream`` run, as its DAG calls it: plan, then (approved) hold and stop, archive, restore, seed.

Each step is idempotent: it looks at what is there (the hold, the archive, the Delta history, the seeded
file) before acting, so a kill -9 of any step and a re-run finish the recovery, and a re-run of a finished
step changes nothing. Everything a run writes is under ``<run_root>/recoveries/<recovery id>/``.

1. **plan**: the blast radius (:mod:`.plan`), written to ``plan.json`` and logged as tables.
2. **hold_and_stop**: the stream held (:mod:`streamwarden.runfiles.hold`: the warden, the launcher and
   maintenance keep off), stopped (drained); then planned again with the approved target versions, since the
   stream kept committing until it stopped. More offsets lost than approved is refused (CONFIG). The plan
   executed is ``executed.json`` (a re-run uses it).
3. **archive_checkpoint**: the checkpoint renamed to ``<checkpoint_root>/archive/<plan time>-<id>/`` (never
   deleted) and ``last_failure.json`` moved into the recovery's folder.
4. **restore_tables**: each table restored to its target with its offset claims, in one commit each
   (:func:`~streamwarden.tables.restore.restore_table`), under its maintenance lock; then the last validated
   versions follow the restore (a restored table's validated content is at the restore commit).
5. **seed_checkpoint**: a new, empty checkpoint holding only the offsets the stream starts from; the
   recovery appended once to ``<run_root>/recoveries.jsonl`` (what was undone, replayed and lost).

Then the DAG releases the hold, starts the stream (a new checkpoint: a new query id and new batch folders),
waits until it has caught up with what the plan saw in Kafka (:func:`caught_up`), and validates.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import (
    ConfigError,
    DataLossError,
    EnvironmentFailure,
    FailureClass,
    IntegrityError,
    MalformedDataError,
    StreamwardenError,
)
from streamwarden.maintenance.compaction import finish_pending
from streamwarden.maintenance.steps import maintenance_folder
from streamwarden.recovery.plan import RecoveryPlan, make_plan
from streamwarden.recovery.request import RecoveryRequest, Target
from streamwarden.runfiles.checkpoint import INITIAL_OFFSETS_FILE, committed_offsets, initial_offsets
from streamwarden.runfiles.failure_file import read_failure
from streamwarden.runfiles.hold import take_hold
from streamwarden.settings import Settings
from streamwarden.tables.location import TableLocation
from streamwarden.tables.lock import table_lock
from streamwarden.tables.restore import Restored, restore_table
from streamwarden.validation.report import LAST_VALIDATED, last_validated
from streamwarden.warden.launcher import running_holder

log = logging.getLogger("streamwarden.recovery")
_CLASSES: dict[FailureClass, type[StreamwardenError]] = {
    error.failure_class: error for error in (EnvironmentFailure, DataLossError, IntegrityError, MalformedDataError,
                                             ConfigError)}


def recovery_id(run_key: str, now: datetime) -> str:
    """A recovery's id: the plan's time and a digest of the run that made it."""
    return f"{now.astimezone(UTC):%Y%m%dT%H%M%S}-{hashlib.sha256(run_key.encode()).hexdigest()[:8]}"


def _finish_pending_compactions(settings: Settings) -> None:
    """A maintenance run killed mid-compaction left its journal: prove its commit (or revert it, INTEGRITY) as the next
    maintain_tables run would, under the table's lock, so the plan reads proven versions. A compaction still running
    holds the lock: ENVIRONMENT (``TableBusyError``) naming it, to be retried once it is done."""
    folder = maintenance_folder(settings)
    for journal in sorted((folder / "pending").glob("*.json")):
        location = TableLocation.of(settings, journal.stem)
        with table_lock(folder / "locks", location.name):
            done = finish_pending(location, folder)
        if done is not None:
            log.warning("%s: a maintenance run stopped mid-compaction of %s; %s before planning", location.name,
                        done.partition, "its commit is proven" if done.version is not None else
                        "it had committed nothing (its journal is removed)")


def plan(settings: Settings, request: RecoveryRequest, *, run_key: str, now: datetime | None = None
         ) -> RecoveryPlan:
    """Step 1: the plan of ``request``, written and logged; nothing else changes."""
    if settings.source_impl != "python":
        raise ConfigError("recover_stream needs STREAMWARDEN_SOURCE_IMPL=python: the JVM Kafka source does not "
                          "start a new checkpoint from the recovery's offsets")
    _finish_pending_compactions(settings)
    moment = now or datetime.now(UTC)
    made = make_plan(settings, request, recovery_id=recovery_id(run_key, moment), now=moment)
    folder = settings.run_paths.recovery(made.recovery_id)
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "plan.json", made.to_json())
    log.info("recovery plan (%s):\n%s", "dry run: nothing changes" if request.dry_run else "waits for approval",
             made.text())
    return made


def hold_and_stop(settings: Settings, approved: RecoveryPlan, *, owner: str, stop: Callable[[], object]
                  ) -> RecoveryPlan:
    """Step 2: hold, stop, plan again with the approved versions; the plan to execute."""
    take_hold(settings, owner, f"recover_stream {approved.recovery_id} to {approved.request.describe()}")
    folder = settings.run_paths.recovery(approved.recovery_id)
    executed = read_json(folder / "executed.json")
    if executed is not None:
        log.info("re-run: executing the plan made after the stop (%s)", folder / "executed.json")
        return RecoveryPlan.from_json(executed)
    log.info("stopping the stream: %s", stop())
    request = approved.request
    if approved.tables:
        request = replace(request, target=Target.VERSIONS, versions=approved.table_targets())
    again = make_plan(settings, request, recovery_id=approved.recovery_id, now=datetime.now(UTC))
    again = replace(again, request=replace(again.request, target=approved.request.target))
    if again.lost > approved.lost or again.sessions_lost > approved.sessions_lost:
        raise ConfigError(f"after the stop the recovery would lose {again.lost:,} records and "
                          f"{again.sessions_lost:,} sessions, the approved plan {approved.lost:,} and "
                          f"{approved.sessions_lost:,}: nothing was changed; trigger recover_stream again to "
                          "approve the new plan", details={"approved": approved.to_json(), "now": again.to_json()})
    write_json_atomic(folder / "executed.json", again.to_json())
    log.info("plan to execute (the stream stopped):\n%s", again.text())
    return again


def archive_path(settings: Settings, executed: RecoveryPlan) -> Path:
    stamp = executed.created_at.astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    return settings.root("checkpoint") / "archive" / f"{stamp}-{executed.recovery_id}" / settings.query_name


def archive_checkpoint(settings: Settings, executed: RecoveryPlan) -> Path | None:
    """Step 3: the checkpoint into the archive (None when there was none), the last failure moved aside."""
    holder = running_holder(settings)
    if holder is not None:
        raise ConfigError(f"the stream runs again (pid {holder.pid} on {holder.host}) although the recovery holds "
                          "it: stop it, then re-run this task", details={"pid": holder.pid})
    target = archive_path(settings, executed)
    source = settings.checkpoint_location
    if settings.run_paths.failure.exists():
        os.replace(settings.run_paths.failure, settings.run_paths.recovery(executed.recovery_id) / "last_failure.json")
    if target.exists():
        log.info("checkpoint already archived at %s", target)
    elif source.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(source, target)
        log.info("checkpoint archived: %s -> %s", source, target)
    else:
        log.info("no checkpoint at %s: nothing to archive", source)
        return None
    return target


def restore_tables(settings: Settings, executed: RecoveryPlan) -> list[Restored]:
    """Step 4: every table to its target with its claims; the last validated versions follow."""
    restored = []
    for undo in executed.tables:
        location = TableLocation.of(settings, undo.table)
        with table_lock(maintenance_folder(settings) / "locks", undo.table):
            done = restore_table(location, undo.target, executed.recovery_id)
        log.info("%s: version %d restored as version %d%s", undo.table, undo.target, done.version,
                 " (by an earlier run)" if done.already else "")
        restored.append(done)
    _follow_restore(settings, restored)
    return restored


def _follow_restore(settings: Settings, restored: list[Restored]) -> None:
    """A restored table's validated version moves to the restore commit when the target was the validated one;
    validated versions after the target are dropped (their content is undone)."""
    folder = settings.run_paths.validation
    document = last_validated(folder)
    if document is None:
        return
    for done in restored:
        entry = document["tables"].get(done.table)
        if entry is None or entry["version"] == done.version:
            continue
        if entry["version"] == done.target:
            document["tables"][done.table] = {**entry, "version": done.version, "restored_from": done.target}
        elif entry["version"] > done.target:
            del document["tables"][done.table]
    write_json_atomic(folder / LAST_VALIDATED, document)


def seed_checkpoint(settings: Settings, executed: RecoveryPlan) -> dict[str, dict[str, int]]:
    """Step 5: a new checkpoint starting at the plan's offsets; the recovery recorded once."""
    checkpoint = settings.checkpoint_location
    wanted = executed.resume_offsets()
    seeded = initial_offsets(checkpoint)
    if seeded is not None and seeded != wanted:
        raise IntegrityError(f"{checkpoint / INITIAL_OFFSETS_FILE} starts at {seeded}, this recovery at {wanted}: "
                             "another run changed the checkpoint", details={"seeded": seeded, "wanted": wanted})
    if seeded is None:
        if checkpoint.exists() and any(checkpoint.iterdir()):
            raise IntegrityError(f"{checkpoint} is not empty although the recovery archived it: another process "
                                 "wrote it; move it aside, then re-run this task",
                                 details={"checkpoint": str(checkpoint)})
        staged = checkpoint.with_name(f"{checkpoint.name}.seeding-{executed.recovery_id}")
        shutil.rmtree(staged, ignore_errors=True)  # a killed run's half-made one
        staged.mkdir(parents=True)
        write_json_atomic(staged / INITIAL_OFFSETS_FILE, wanted)
        if checkpoint.exists():
            checkpoint.rmdir()  # empty: checked above
        os.rename(staged, checkpoint)  # the checkpoint appears whole, or not at all
    log.info("new checkpoint %s starts at %s", checkpoint, json.dumps(wanted, sort_keys=True))
    _record(settings, executed)
    return wanted


def _record(settings: Settings, executed: RecoveryPlan) -> None:
    path = settings.run_paths.recoveries_log
    if path.exists() and any(json.loads(line).get("recovery_id") == executed.recovery_id
                             for line in path.read_text().splitlines() if line.strip()):
        return
    entry = {"recovery_id": executed.recovery_id, "recorded_at": datetime.now(UTC).isoformat(),
             "request": executed.request.to_json(), "tables": {t.table: {"from": t.newest, "to": t.target,
                                                                          "rows_undone": t.rows_undone}
                                                               for t in executed.tables},
             "resume": executed.resume_offsets(), "replayed": executed.replayed, "lost": executed.lost,
             "sessions_lost": executed.sessions_lost,
             "lost_offsets": {f"{p.topic}[{p.partition}]": p.lost for p in executed.partitions if p.lost}}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry, sort_keys=True) + "\n")


def caught_up(settings: Settings, executed: RecoveryPlan) -> tuple[bool, dict[str, Any]]:
    """Whether the new checkpoint has committed up to every partition's log end the plan saw (a partition with
    nothing to replay needs no batch); the partitions still behind. A stream that stopped with a failure
    document raises its class at once (there is nothing to wait for); one that stopped without one is left to
    the warden, which restarts it."""
    failure = read_failure(settings.run_paths.failure)
    if failure is not None and running_holder(settings) is None:
        raise _CLASSES.get(failure.failure_class, StreamwardenError)(
            f"the stream stopped during the replay: {failure.message}", topic=failure.topic,
            partition=failure.partition, offset=failure.offset, details={"failure": failure.to_json()})
    committed = committed_offsets(settings.checkpoint_location) or {}
    behind = {f"{p.topic}[{p.partition}]": {"committed": committed.get(p.topic, {}).get(str(p.partition)),
                                             "needed": p.log_end}
              for p in executed.partitions
              if p.log_end > p.resume and committed.get(p.topic, {}).get(str(p.partition), -1) < p.log_end}
    return not behind, behind


def write_report(settings: Settings, planned: dict[str, Any] | None, outcome: dict[str, Any]) -> Path:
    """The run's outcome as ``report.json`` in the recovery's folder (``<run_root>/recoveries/`` without a plan)."""
    recovery = planned["recovery_id"] if planned else "unplanned-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    path = settings.run_paths.recovery(recovery) / "report.json"
    write_json_atomic(path, {"plan": planned, **outcome, "reported_at": datetime.now(UTC).isoformat()})
    return path

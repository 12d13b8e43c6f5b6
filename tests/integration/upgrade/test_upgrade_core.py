"""The upgrade's core without Spark or a stream: Params and release files, the active release, the compatibility
check (state layout, columns by name), and the journal's idempotence (rollback point, schema evolution, the
checkpoint put back)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pytest

from fixtures import REPO
from streamwarden.atomic import write_json_atomic
from streamwarden.failures import ConfigError, FailureClass, FailureDocument
from streamwarden.runfiles.failure_file import read_failure, write_failure
from streamwarden.runfiles.handler_pin import HANDLER_FILE, fingerprint
from streamwarden.runfiles.hold import read_hold, take_hold
from streamwarden.settings import Settings, load_settings
from streamwarden.stream.sessions.table_handler import TableReconstruction
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS, TableLocation
from streamwarden.upgrade import steps
from streamwarden.upgrade.compatibility import check_compatibility, column_changes, session_rows_schema
from streamwarden.upgrade.journal import Journal, run_key
from streamwarden.upgrade.release import (
    activate,
    installed_releases,
    load_release_settings,
    read_active,
    read_release,
)
from streamwarden.upgrade.request import UpgradeRequest, request_from_params
from streamwarden.warden.settings import load_warden_settings
from streamwarden.warden.stop import StopMethod, StopOutcome
from streamwarden.wire import DEMO_SCHEMA

OWNER = "upgrade_stream/manual__test"
TAGGED = "fixtures.upgrade_handlers:TaggedReconstruction"


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("STREAMWARDEN_HOME", str(tmp_path / "home"))
    made = load_settings()
    (made.home_paths.releases).mkdir(parents=True)
    return made


def _release(settings: Settings, name: str, text: str) -> None:
    (settings.home_paths.releases / f"{name}.yaml").write_text(text)


def test_every_bad_param_is_named_at_once_before_anything_is_read(settings: Settings, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        request_from_params({"release": "../../etc/passwd", "health_minutes": 0, "dry_run": "yes",
                             "reason": "x" * 501}, settings)
    message = caught.value.message
    assert caught.value.failure_class is FailureClass.CONFIG
    for words in ("Param release: release '../../etc/passwd' is not a release name", "Param health_minutes",
                  "Param dry_run", "Param reason"):
        assert words in message, words
    with pytest.raises(ConfigError, match="Param release: required"):
        request_from_params({"health_minutes": "soon"}, settings)
    with pytest.raises(ConfigError, match=r"Param health_minutes: expected a number of minutes from 0\.25 to 240"):
        request_from_params({"release": "nope", "health_minutes": float("nan")}, settings)


def test_a_release_is_a_file_inside_the_releases_folder_with_settings_a_release_may_change(
        settings: Settings, tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text("trigger_interval: 2s\n")
    (settings.home_paths.releases / "escape.yaml").symlink_to(outside)
    with pytest.raises(ConfigError, match="outside the releases folder"):
        request_from_params({"release": "escape"}, settings)
    with pytest.raises(ConfigError, match="no such file"):
        request_from_params({"release": "missing"}, settings)
    _release(settings, "bad", "checkpoint_root: /tmp/elsewhere\ntriger_interval: 2s\nquery_name: other\n")
    with pytest.raises(ConfigError) as caught:
        request_from_params({"release": "bad"}, settings)
    message = caught.value.message
    assert "did you mean trigger_interval?" in message
    assert "checkpoint_root may not change in a release" in message and "query_name may not change" in message
    _release(settings, "invalid", "trigger_interval: soon\n")
    with pytest.raises(ConfigError, match="STREAMWARDEN_TRIGGER_INTERVAL='soon'"):
        request_from_params({"release": "invalid"}, settings)
    _release(settings, "list", "- a\n")
    with pytest.raises(ConfigError, match="must be a non-empty mapping"):
        request_from_params({"release": "list"}, settings)
    _release(settings, "v2", f"session_handler: {TAGGED}\ntrigger_interval: 2s\n")
    request = request_from_params({"release": "v2", "health_minutes": 0.5, "dry_run": False, "reason": "r"}, settings)
    assert (request.release.name, request.health_minutes, request.dry_run) == ("v2", 0.5, False)
    assert UpgradeRequest.from_json(json.loads(json.dumps(request.to_json()))) == request
    assert request_from_params({"release": "v2"}, settings).dry_run is True  # checking is the default


def test_the_installed_releases_are_what_upgrade_streams_form_offers(settings: Settings) -> None:
    from airflow.dag_processing.dagbag import DagBag

    assert installed_releases(settings) == []
    _release(settings, "v2", "trigger_interval: 2s\n")
    _release(settings, "v10", "trigger_interval: 2s\n")
    (settings.home_paths.releases / "notes.txt").write_text("not a release")
    assert installed_releases(settings) == ["v10", "v2"]
    bag = DagBag(dag_folder=str(REPO / "dags" / "upgrade_stream.py"))
    release = bag.dags["upgrade_stream"].params.get_param("release")
    assert release.schema["enum"] == [None, "v10", "v2"] and "v10, v2" in (release.description or "")
    assert release.schema["values_display"] == {"null": "(choose a release)", "v10": "v10", "v2": "v2"}


def test_the_active_release_applies_over_the_environment_and_keeps_the_previous(settings: Settings) -> None:
    _release(settings, "v2", "trigger_interval: 2s\n")
    _release(settings, "v3", "trigger_interval: 4s\nmax_offsets_per_trigger: 100\n")
    assert load_release_settings().trigger_interval == 3.0 and read_active(settings) is None  # the default
    activate(settings, read_release(settings, "v2"), owner=OWNER)
    assert load_release_settings().trigger_interval == 2.0
    active = activate(settings, read_release(settings, "v3"), owner=OWNER)
    assert active is not None and active.previous is not None and active.previous.name == "v2"
    assert activate(settings, read_release(settings, "v3"), owner=OWNER) == active  # a re-run changes nothing
    now = load_release_settings()
    assert (now.trigger_interval, now.max_offsets_per_trigger) == (4.0, 100)
    activate(settings, active.previous, owner=OWNER)
    assert load_release_settings().max_offsets_per_trigger is None  # a release replaces, never adds up
    activate(settings, None, owner=OWNER)
    assert read_active(settings) is None and load_release_settings().trigger_interval == 3.0


def test_session_rows_schema_is_what_spark_writes() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StringType, StructField, StructType

    from streamwarden.stream.sessions.tables import KAFKA_COLUMNS, SESSION_COLUMNS, handler_fields

    columns = [*TableReconstruction().output_columns(DEMO_SCHEMA), ("flag", "boolean"), ("at", "timestamp")]
    folders = [StructField(n, StringType()) for n in ("source_topic", "event_date", "event_hour")]
    spark = to_arrow_schema(StructType([*KAFKA_COLUMNS, *SESSION_COLUMNS, *handler_fields(columns), *folders]),
                            timezone="UTC")
    assert session_rows_schema(columns).equals(spark)


def _stream_tables(settings: Settings) -> None:
    """``session_rows`` and ``quarantine`` as the built-in handler's job creates them, its state layout pinned."""
    columns = TableReconstruction().output_columns(DEMO_SCHEMA)
    TableLocation.of(settings, SESSION_ROWS).create(session_rows_schema(columns), ["source_topic"])
    TableLocation.of(settings, QUARANTINE).create(pa.schema([("topic", pa.string())]), [])
    write_json_atomic(settings.checkpoint_location / HANDLER_FILE, fingerprint(TableReconstruction(), 64))
    (settings.checkpoint_location / "commits").mkdir()
    (settings.checkpoint_location / "commits" / "3").write_text("v1\n{}\n")


def test_an_added_nullable_column_is_compatible_a_changed_state_layout_is_not(settings: Settings) -> None:
    _stream_tables(settings)
    tagged = check_compatibility(settings, load_settings(session_handler=TAGGED), "v2")
    assert tagged.compatible and tagged.state["verdict"].startswith("unchanged")
    assert [(c.column, c.change, c.allowed) for c in tagged.columns] == [("release_tag", "added", True)]
    assert tagged.settings_changed == {"session_handler": [settings.session_handler, TAGGED]}
    changed = load_settings(session_handler="fixtures.upgrade_handlers:ChangedLayout")
    layout = check_compatibility(settings, changed, "v9")
    assert not layout.compatible and layout.state["verdict"] == "CHANGED"
    assert "the state layout changes (state_version 1 -> 2)" in layout.refusals[0]
    without = load_settings(session_handler="fixtures.upgrade_handlers:DroppedColumns")
    dropped = check_compatibility(settings, without, "d")
    assert {c.column for c in dropped.columns if c.change == "dropped"} == set(DEMO_SCHEMA.names)
    assert all("dropped" in r and "keeps the column" in r for r in dropped.refusals)
    missing = check_compatibility(settings, load_settings(session_handler="no_such.module:Handler"), "m")
    assert "the release's session handler" in missing.refusals[0]
    conf = check_compatibility(settings, load_settings(
        spark_conf={"spark.sql.streaming.stateStore.encodingFormat": "unsaferow", "spark.driver.memory": "4g"}), "c")
    assert conf.refusals == ["spark_conf 'spark.sql.streaming.stateStore.encodingFormat' may not change in a "
                             "release: the checkpoint's state depends on it"]
    assert conf.settings_changed["spark_conf"] == ["(secret)", "(secret, changed)"]


def test_column_changes_name_each_column_and_why() -> None:
    recorded = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.string())])
    wanted = pa.schema([("b", pa.int32()), ("a", pa.int64()), pa.field("d", pa.string(), nullable=False),
                        ("e", pa.float64())])
    changes = {c.column: c for c in column_changes("t", recorded, wanted)}
    assert set(changes) == {"b", "c", "d", "e"}  # a: the same column in another place
    assert (changes["b"].change, changes["b"].allowed) == ("retyped", False) and "hold string" in changes["b"].why
    assert (changes["c"].change, changes["c"].allowed) == ("dropped", False)
    assert (changes["d"].change, changes["d"].allowed) == ("added", False) and "must be nullable" in changes["d"].why
    assert (changes["e"].change, changes["e"].allowed) == ("added", True)
    required = pa.schema([pa.field("a", pa.int64(), nullable=False)])
    nullable = column_changes("t", required, pa.schema([("a", pa.int64())]))
    assert [(c.change, c.allowed) for c in nullable] == [("nullability", False)]


def test_rollback_point_evolution_and_the_checkpoint_put_back_are_idempotent(settings: Settings) -> None:
    _stream_tables(settings)
    _release(settings, "v2", f"session_handler: {TAGGED}\n")
    request = request_from_params({"release": "v2", "dry_run": False}, settings)
    key = run_key("manual__2026-11-24T12:00:00+00:00")
    assert key == "manual__2026-11-24T12-00-00-00-00"
    journal = Journal.open(settings, key)
    with pytest.raises(steps.NotHeldError, match="not held by"):
        steps.copy_checkpoint(settings, journal, owner=OWNER)
    take_hold(settings, OWNER, "test")
    point = steps.copy_checkpoint(settings, journal, owner=OWNER)
    copy = Path(point["checkpoint_copy"])
    assert copy.parent == settings.root("checkpoint") / "archive" and copy.name.endswith(f"-upgrade-{key}")
    assert (copy / HANDLER_FILE).is_file() and point["versions"] == {SESSION_ROWS: 0, QUARANTINE: 0}
    assert point["last_commit"] == 3 and point["release"] is None
    # a kill after the copy was renamed into place but before the journal: the copy is kept, not made twice
    journal.document.pop("rollback_point")
    journal.put("created_at", journal.document["created_at"])
    (settings.checkpoint_location / "commits" / "4").write_text("v1\n{}\n")  # not in the copy: it is not redone
    again = steps.copy_checkpoint(settings, Journal.open(settings, key), owner=OWNER)
    assert again["checkpoint_copy"] == str(copy) and not (copy / "commits" / "4").exists()
    assert steps.copy_checkpoint(settings, Journal.open(settings, key), owner=OWNER) == again

    evolved = steps.evolve_schema(settings, request, Journal.open(settings, key), owner=OWNER)
    assert evolved == {SESSION_ROWS: {"added": ["release_tag string"], "version": 1}}
    assert steps.evolve_schema(settings, request, Journal.open(settings, key), owner=OWNER) == \
        {SESSION_ROWS: {"added": [], "version": 1}}  # a re-run adds nothing
    assert TableLocation.of(settings, SESSION_ROWS).open().schema().to_arrow().names[-1] == "release_tag"

    steps.activate_release(settings, request, Journal.open(settings, key), owner=OWNER)
    assert load_release_settings().session_handler == TAGGED
    # the new version wrote to its checkpoint; the rollback puts the copy back, once, even when re-run
    (settings.checkpoint_location / "commits" / "5").write_text("v1\n{}\n")
    journal = Journal.open(settings, key)
    first = steps._restore_checkpoint(settings, journal, again)
    assert sorted(p.name for p in (settings.checkpoint_location / "commits").iterdir()) == ["3"]
    assert (Path(first["archived"]) / "commits" / "5").is_file()
    assert steps._restore_checkpoint(settings, Journal.open(settings, key), again) == first
    assert read_hold(settings) is not None and read_hold(settings).owner == OWNER  # type: ignore[union-attr]


def _rolled_back_while_stopped(settings: Settings, earlier: FailureDocument | None) -> dict[str, Any]:
    """A rollback whose old version was not running when the upgrade began (it had just died), after the new version
    failed with BUG: the new version's document in ``last_failure.json``, ``earlier`` moved aside by it."""
    _stream_tables(settings)
    journal = Journal.open(settings, run_key("manual__2026-11-24T13:00:00+00:00"))
    held_at = datetime.now(UTC) - timedelta(minutes=2)
    journal.put("hold", {"owner": OWNER, "was_running": False, "at": held_at.isoformat(timespec="seconds")})
    journal.put("started", {"pid": 4242})
    if earlier is not None:
        write_failure(settings.run_paths.previous_failure, earlier)
    write_failure(settings.run_paths.failure, FailureDocument(FailureClass.BUG, "RuntimeError: release v3", 70,
                                                              pid=4242))

    def never_started(**given: Any) -> int:
        raise AssertionError("an old version that was not running is not started by the rollback")

    rolled = steps.rollback(settings, load_warden_settings(), journal, owner=OWNER, reason="test",
                            start=never_started, stop=lambda: StopOutcome(StopMethod.NOT_RUNNING, None, 0.0))
    assert rolled is not None and rolled["old_version"]["started"] is False
    assert read_hold(settings) is None
    kept = rolled["old_version"]["new_version_failure"]
    assert kept is not None and read_failure(Path(kept)).pid == 4242  # type: ignore[union-attr]
    return rolled


def test_a_rollback_leaves_the_warden_no_failure_of_the_new_version_to_escalate(settings: Settings) -> None:
    _rolled_back_while_stopped(settings, None)
    # the warden judges the old version by its own state: no process, no failure: DEAD, which it restarts
    assert read_failure(settings.run_paths.failure) is None


def test_a_rollback_puts_back_the_failure_the_old_version_had_before_the_upgrade(settings: Settings) -> None:
    before = FailureDocument(FailureClass.DATA_LOSS, "offsets expired", 65, pid=17,
                             occurred_at=(datetime.now(UTC) - timedelta(hours=1)).isoformat())
    _rolled_back_while_stopped(settings, before)
    put_back = read_failure(settings.run_paths.failure)
    assert put_back is not None and (put_back.pid, put_back.failure_class) == (17, FailureClass.DATA_LOSS)

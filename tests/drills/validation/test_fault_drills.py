"""What ``validate_output`` must show (issue 14), on the real stream: its clean output passes every check, and
each fault done to a copy of it is caught with its class and its evidence.

One real session stream per module (:func:`drills.run_session_stream`: the real broker, ``streamwarden stream``
with two kill -9s and a clean stop); each drill copies its home (output, checkpoint, run root), does one fault
to the copy as the fault itself would happen (delta-rs commits, the Spark checkpoint's logs, the broker's
DeleteTopics), and validates the copy with a real ``validate_output`` run (``dag.test()`` on the migrated
Airflow DB). Evidence is asserted against what the copy's files and Kafka actually hold.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from fixtures import REPO
from fixtures.stream_process import settings_of
from fixtures.validation_drills import (
    StreamRun,
    as_ranges,
    batch_commits,
    checkpoint_past,
    commit_again,
    copy_home,
    drill_env,
    offsets_in,
    recreate_topic,
    remove_from_log,
    rows_in,
    run_session_stream,
    table_offsets,
    table_root,
    unexpected_rows,
)
from streamwarden.alerts import read_alerts
from streamwarden.kafka.admin import delete_topics
from streamwarden.local.broker import LocalBroker
from streamwarden.settings import Settings
from streamwarden.tables.location import QUARANTINE, SESSION_ROWS
from streamwarden.validation.report import last_validated

pytestmark = pytest.mark.slow


STEPS = ("check_params", "validate_tables", "report_and_alert")
FAILED = {"check_params": "success", "validate_tables": "failed", "report_and_alert": "failed"}
BOTH = f"{SESSION_ROWS}+{QUARANTINE}"
Key = tuple[str, str | None, str, int]  # class, table, topic, partition


@pytest.fixture(scope="module")
def stream_run(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> StreamRun:
    return run_session_stream(broker.bootstrap_servers, tmp_path_factory.mktemp("drill-stream"))


@dataclass
class Validated:
    """One validate_output run on a drill's copy: task states, the XCom summary, the report file, the alerts."""

    states: dict[str, str | None]
    summary: dict[str, Any]
    report_path: Path
    report: dict[str, Any]
    alerts: list[dict[str, Any]]
    settings: Settings

    def findings(self, *classes: str) -> dict[Key, dict[str, Any]]:
        found = [f for f in self.report["findings"] if not classes or f["class"] in classes]
        keyed = {(f["class"], f["table"], f["topic"], f["partition"]): f for f in found}
        assert len(keyed) == len(found), "one finding per class, table and topic-partition"
        return keyed

    def evidence(self, *classes: str) -> dict[Key, tuple[list[list[int]], int]]:
        return {key: (f["ranges"], f["count"]) for key, f in self.findings(*classes).items()}


@dataclass
class Drill:
    """A copy of the stream's home for one drill, and how to validate it."""

    run: StreamRun
    home: Path
    monkeypatch: pytest.MonkeyPatch

    def validate(self, conf: dict[str, Any] | None = None, **settings: str) -> Validated:
        """One validate_output run through Airflow (``dag.test()``) on this copy; ``settings`` are
        ``STREAMWARDEN_*`` ones (e.g. ``validation_stale_after="1s"``)."""
        from airflow.dag_processing.dagbag import DagBag

        env = drill_env(self.run, self.home, **settings)
        for name in [n for n in os.environ if n.startswith("STREAMWARDEN_")]:
            self.monkeypatch.delenv(name)
        for name, value in env.items():
            self.monkeypatch.setenv(name, value)
        bag = DagBag(dag_folder=str(REPO / "dags" / "validate_output.py"))
        assert bag.import_errors == {}
        dag_run = bag.dags["validate_output"].test(run_conf=conf)
        instances = {ti.task_id: ti for ti in dag_run.get_task_instances()}
        summary: dict[str, Any] = instances["validate_tables"].xcom_pull(task_ids="validate_tables")
        assert summary is not None, "validate_tables pushed no summary"
        path = Path(summary["report"])
        report: dict[str, Any] = json.loads(path.read_text())
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.parent == settings_of(env).run_paths.validation
        assert report["findings"][:50] == summary["findings"]  # the summary shows the first findings of the file
        assert report["classes"] == summary["classes"] and report["run_id"] == summary["run_id"]
        return Validated({k: ti.state for k, ti in instances.items()}, summary, path, report,
                         read_alerts(settings_of(env).run_paths.alerts), settings_of(env))


@pytest.fixture()
def drill(stream_run: StreamRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, airflow_db: Path
          ) -> Iterator[Drill]:
    yield Drill(stream_run, copy_home(stream_run, tmp_path / "home"), monkeypatch)


def assert_alerted(result: Validated, gravest: str) -> dict[str, Any]:
    """One alert recorded by the warden's notifiers, naming the class, the report and the evidence."""
    [alert] = result.alerts
    assert alert["failure_class"] == gravest
    assert alert["failure"]["classes"] == result.summary["classes"]
    assert alert["failure"]["report"] == str(result.report_path)
    for finding in result.report["findings"][:10]:
        assert any(f"{finding['topic']}[{finding['partition']}]" in line and line.startswith(finding["class"])
                   for line in alert["failure"]["evidence"]), finding
    return alert


def audit_counts(result: Validated) -> dict[tuple[str, int], int]:
    """AUDIT_MISMATCH offsets per topic-partition, over every hour that differs."""
    counted: dict[tuple[str, int], int] = {}
    for f in result.report["findings"]:
        if f["class"] == "AUDIT_MISMATCH":
            counted[(f["topic"], f["partition"])] = counted.get((f["topic"], f["partition"]), 0) + f["count"]
    return counted


# -- the clean output ---------------------------------------------------------------------------------------------


def test_the_output_of_a_run_with_kill9s_passes_every_check(drill: Drill) -> None:
    run = drill.run
    assert run.exits == (-9, -9, 0)

    result = drill.validate()

    assert result.states == dict.fromkeys(STEPS, "success"), result.report["findings"][:5]
    summary = result.summary
    assert summary["passed"] and summary["classes"] == {} and result.alerts == []
    assert set(summary["checks"]) == {"coverage", "checkpoint", "kafka", "audit", "exposure", "expectations",
                                      "content"}
    # every file the kill -9s left in the tables hashes to what its commit recorded
    covered = result.report["content"]
    assert len(covered) == 2 and all(c["files"] == c["of_files"] > 0 and c["unrecorded"] == 0 for c in covered)
    # every offset Kafka held when the stream stopped is covered, once, by one of the two tables
    partitions = {(p["topic"], p["partition"]): p for p in result.report["partitions"]}
    assert set(partitions) == {(t, p) for t, parts in run.ends.items() for p in parts}
    for (topic, partition), p in partitions.items():
        end = run.ends[topic][partition]
        malformed = sum(1 for t, q, _ in run.malformed if (t, q) == (topic, partition))
        assert p["claimed"] == [[0, end]] and (p["gaps"], p["duplicates"]) == (0, 0)
        assert p["offsets"] == {SESSION_ROWS: end - malformed, QUARANTINE: malformed}
    # Kafka: nothing expired; the late topic's unread messages are lag, not a finding (the limit is 15 minutes)
    upstream = {(u["topic"], u["partition"]): u for u in result.report["upstream"]}
    for topic in (*run.main, run.late):
        for partition, end in run.ends[topic].items():
            u = upstream[(topic, partition)]
            log_end = run.late_ends[partition] if topic == run.late else end
            assert (u["log_start"], u["log_end"], u["position"], u["expired"], u["lag"]) == (
                0, log_end, end, 0, log_end - end)
    assert all(h["kafka"] == h["tables"] for h in result.report["audit"]) and result.report["audit"]
    assert {(h["topic"], h["partition"]) for h in result.report["audit"]} >= {
        (t, p) for t in run.main for p in run.ends[t]}
    validated = last_validated(result.settings.run_paths.validation)
    assert validated is not None
    assert {name: entry["version"] for name, entry in validated["tables"].items()} == summary["versions"]


# -- (a) a committed file removed from the log: GAP --------------------------------------------------------------


def test_a_file_removed_from_the_log_is_a_gap_naming_its_offsets(drill: Drill) -> None:
    run = drill.run
    root = table_root(drill.home, SESSION_ROWS)
    candidates = [(sum(len(o) for o in offsets_in(root, a["path"]).values()), a["path"])
                  for _, adds in batch_commits(root) for a in adds if f"={run.late}/" in a["path"]]
    _, victim = max(candidates)  # the late topic's file holding the most offsets (no malformed message there)
    held = offsets_in(root, victim)
    version = remove_from_log(drill.home, SESSION_ROWS, victim)
    remaining = table_offsets(drill.home, SESSION_ROWS)
    quarantined = table_offsets(drill.home, QUARANTINE)
    missing = {tp: sorted(set(offsets) - remaining.get(tp, set()) - quarantined.get(tp, set()))
               for tp, offsets in held.items()}
    missing = {tp: offsets for tp, offsets in missing.items() if offsets}
    assert missing, "the removed file held offsets no other file holds"

    result = drill.validate()

    assert result.states == FAILED
    assert result.summary["versions"][SESSION_ROWS] == version
    assert result.evidence("GAP") == {
        ("GAP", BOTH, t, p): ([list(r) for r in as_ranges(offsets)[:10]], len(offsets))
        for (t, p), offsets in missing.items()}
    gaps = result.findings("GAP")
    assert all("Kafka still holds them (its log starts at 0): they can be read again" in f["detail"]
               for f in gaps.values())
    # the per-hour audit sees the same offsets missing from Kafka's side
    assert audit_counts(result) == {tp: len(offsets) for tp, offsets in missing.items()}
    assert set(result.summary["classes"]) == {"GAP", "AUDIT_MISMATCH"}
    alert = assert_alerted(result, "GAP")
    assert "recover_stream" in alert["next_action"]
    # the version before the removal, pinned by the Params: its rows pass, and it becomes the last validated
    # version (what recover_stream rolls back to)
    before = {SESSION_ROWS: version - 1, QUARANTINE: result.summary["versions"][QUARANTINE]}
    pinned = drill.validate({"versions": before})
    assert pinned.states == dict.fromkeys(STEPS, "success") and pinned.summary["passed"]
    assert set(pinned.summary["checks"]) == {"coverage", "expectations", "content"}
    assert pinned.summary["versions"] == before
    validated = last_validated(pinned.settings.run_paths.validation)
    assert validated is not None
    assert {name: entry["version"] for name, entry in validated["tables"].items()} == before
    assert len(pinned.alerts) == 1  # the gap's, no other


# -- (b) a batch committed twice, by a second writer under its own app id: DUPLICATE -------------------------------


def test_a_batch_committed_again_by_a_second_writer_is_a_duplicate(drill: Drill) -> None:
    root = table_root(drill.home, SESSION_ROWS)
    commits = list(batch_commits(root))
    batch_version, adds = commits[len(commits) // 2]
    rows: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], set[int]] = {}
    for add in adds:
        for tp, n in rows_in(root, add["path"]).items():
            rows[tp] = rows.get(tp, 0) + n
        for tp, held in offsets_in(root, add["path"]).items():
            offsets.setdefault(tp, set()).update(held)
    version = commit_again(drill.home, SESSION_ROWS, adds, "second-writer", batch_version)
    assert DeltaTable(str(root)).transaction_version("second-writer") == batch_version

    result = drill.validate()

    assert result.states == FAILED
    assert result.summary["versions"][SESSION_ROWS] == version
    ranges = {tp: [list(r) for r in as_ranges(sorted(held))[:10]] for tp, held in offsets.items()}
    assert result.evidence() == {
        **{("DUPLICATE", SESSION_ROWS, t, p): (ranges[(t, p)], rows[(t, p)]) for t, p in offsets},
        # the built-in expectation of unique rows fails on both copies of each row
        **{("EXPECTATION_FAILED", SESSION_ROWS, t, p): (ranges[(t, p)], 2 * rows[(t, p)]) for t, p in offsets}}
    assert all(f["detail"].startswith("expect_compound_columns_to_be_unique(topic, partition, offset, row_id")
               and "[suite]" in f["detail"] for f in result.findings("EXPECTATION_FAILED").values())
    assert all("committed twice" in f["detail"] for f in result.findings("DUPLICATE").values())
    assert_alerted(result, "DUPLICATE")


# -- (c) a checkpoint past the output: CHECKPOINT_MISMATCH ---------------------------------------------------------


def test_a_checkpoint_past_the_output_is_a_checkpoint_mismatch(drill: Drill) -> None:
    run = drill.run
    partition = max(run.late_ends, key=lambda p: run.late_ends[p] - run.ends[run.late][p])
    end = run.ends[run.late][partition]
    skipped = run.late_ends[partition] - end  # unread offsets Kafka holds: the checkpoint now says it passed them
    assert skipped > 0
    checkpoint = settings_of(drill_env(run, drill.home)).checkpoint_location
    batch, committed = checkpoint_past(checkpoint, run.late, partition, skipped)

    result = drill.validate()

    assert result.states == FAILED
    assert result.report["checkpoint"]["committed_batch"] == batch
    assert result.evidence("CHECKPOINT_MISMATCH") == {
        ("CHECKPOINT_MISMATCH", name, run.late, partition): ([[end, committed]], skipped)
        for name in (SESSION_ROWS, QUARANTINE)}
    for f in result.findings("CHECKPOINT_MISMATCH").values():
        assert f"the stream will not read [{end}, {committed}) again" in f["detail"]
        assert "Kafka still holds them" in f["detail"]
    assert audit_counts(result) == {(run.late, partition): skipped}  # offsets passed that no table holds
    assert set(result.summary["classes"]) == {"CHECKPOINT_MISMATCH", "AUDIT_MISMATCH"}
    assert_alerted(result, "CHECKPOINT_MISMATCH")


# -- (g) a stream stopped for longer than the staleness limit: STALE ----------------------------------------------


def test_a_stream_stopped_longer_than_the_limits_is_stale(drill: Drill) -> None:
    """Check 3 (unread data, no table commit for STALE_AFTER) and the freshness expectation (the newest row of
    each topic-partition older than FRESHNESS), both at 1 s instead of waiting 15 minutes and an hour."""
    run = drill.run
    output = drill.home / "output"
    last_commit = max(DeltaTable(str(output / name)).history(1)[0]["timestamp"] / 1000
                      for name in (SESSION_ROWS, QUARANTINE))
    while time.time() - last_commit <= 1.0:  # the producers wrote on after the stop; the limits below are 1 s
        time.sleep(0.1)

    result = drill.validate(validation_stale_after="1s", validation_freshness="1s")

    assert result.states == FAILED
    unread = {p: (run.ends[run.late][p], end) for p, end in run.late_ends.items() if end > run.ends[run.late][p]}
    assert unread
    lagging = {("STALE", None, run.late, p): ([[start, end]], end - start) for p, (start, end) in unread.items()}
    behind = {("STALE", BOTH, t, p): ([[end - 1, end]], 1) for t, parts in run.ends.items() for p, end in parts.items()}
    assert result.evidence() == lagging | behind
    findings = result.findings()
    assert all("no table commit for" in findings[key]["detail"] for key in lagging)
    assert all("minutes old" in findings[key]["detail"] and "STREAMWARDEN_VALIDATION_FRESHNESS" not in
               findings[key]["detail"] for key in behind)
    alert = assert_alerted(result, "STALE")
    assert alert["severity"] == "warning" and "stream_supervisor" in alert["next_action"]


# -- (e) malformed messages above the quarantine share: EXPECTATION_FAILED -----------------------------------------


def test_malformed_messages_above_the_quarantine_share_fail_an_expectation(drill: Drill) -> None:
    """The stream quarantined a burst of malformed messages in one partition (a few percent of it) and single
    ones in others (under 1%): with a share of 1% allowed, the burst's partition fails, the others pass."""
    run = drill.run
    quarantined = table_offsets(drill.home, QUARANTINE)
    assert {(t, p, o) for (t, p), offsets in quarantined.items() for o in offsets} == run.malformed
    counted = Counter((t, p) for t, p, _ in run.malformed)
    shares = {tp: n / run.ends[tp[0]][tp[1]] for tp, n in counted.items()}
    over = {tp for tp, share in shares.items() if share > 0.01}
    assert over and over != set(shares)

    result = drill.validate(validation_quarantine_share="0.01")

    assert result.states == FAILED
    assert result.evidence() == {("EXPECTATION_FAILED", BOTH, t, p): ([], counted[(t, p)]) for t, p in over}
    for (_, _, topic, partition), f in result.findings().items():
        share = shares[(topic, partition)]
        assert "quarantine_share" in f["detail"]
        assert f"{counted[(topic, partition)]} offset(s) in quarantine, {share:.2%}" in f["detail"]
    assert_alerted(result, "EXPECTATION_FAILED")
    # the Data Docs page of the per-partition batch names the partitions over the share
    pages = result.summary["data_docs_pages"]
    assert "partitions" in pages, f"no Data Docs page for the partitions batch; notes: {result.summary['notes']}"
    shown = unexpected_rows(Path(pages["partitions"]))
    named = {(t, int(p)) for _, where in shown for t, p in zip(where["topic"], where["partition"], strict=True)}
    assert named == over


# -- (f) an expectation of the user's file that fails: EXPECTATION_FAILED, with the failing rows in the Data Docs -


def test_a_failing_expectation_of_the_users_file_names_its_rows(drill: Drill, tmp_path: Path) -> None:
    limit = 9_000  # the simulated producers send qty up to 10,000
    expectations = tmp_path / "expectations.json"
    expectations.write_text(json.dumps([{"table": SESSION_ROWS, "expectation": "ExpectColumnValuesToBeBetween",
                                         "kwargs": {"column": "qty", "min_value": 0, "max_value": limit}}]))
    rows = DeltaTable(str(table_root(drill.home, SESSION_ROWS))).to_pyarrow_table(
        columns=["topic", "partition", "offset", "qty"]).to_pylist()
    failing: dict[tuple[str, int], list[int]] = {}
    for row in rows:
        if row["qty"] is not None and not 0 <= row["qty"] <= limit:
            failing.setdefault((row["topic"], row["partition"]), []).append(row["offset"])
    assert failing

    result = drill.validate(validation_expectations=str(expectations))

    assert result.states == FAILED
    assert result.evidence() == {
        ("EXPECTATION_FAILED", SESSION_ROWS, t, p): ([list(r) for r in as_ranges(sorted(set(offsets)))[:10]],
                                                     len(offsets))
        for (t, p), offsets in failing.items()}
    described = f"expect_column_values_to_be_between(qty, min_value=0.0, max_value={limit:.1f})"
    assert all(f"{described} [expectations.json entry 0]" in f["detail"] for f in result.findings().values())
    assert_alerted(result, "EXPECTATION_FAILED")
    # the Data Docs: the site, and the page of session_rows naming failing rows by topic, partition and offset
    assert Path(result.summary["data_docs"]).is_file()
    assert result.report["data_docs"] == result.summary["data_docs"]
    shown = unexpected_rows(Path(result.summary["data_docs_pages"][SESSION_ROWS]))
    named = [(t, int(p), int(o)) for value, where in shown if float(value) > limit
             for t, p, o in zip(where["topic"], where["partition"], where["offset"], strict=True)]
    assert named and len(named) == sum(len(where["offset"]) for _, where in shown)
    assert set(named) <= {(t, p, o) for (t, p), offsets in failing.items() for o in offsets}


# -- (d) a topic deleted and recreated: DATA_EXPIRED (last: it changes the broker) --------------------------------


def test_a_topic_deleted_and_recreated_is_data_expired(drill: Drill, broker: LocalBroker) -> None:
    run = drill.run
    new_ends = recreate_topic(broker.bootstrap_servers, run.doomed, 2 * len(run.ends[run.doomed]))

    result = drill.validate()

    assert result.states == FAILED
    assert result.evidence("DATA_EXPIRED") == {
        ("DATA_EXPIRED", None, run.doomed, p): ([[new_ends[p], end]], end - new_ends[p])
        for p, end in run.ends[run.doomed].items()}
    assert all("the topic was recreated or truncated" in f["detail"]
               for f in result.findings("DATA_EXPIRED").values())
    assert set(result.summary["classes"]) == {"DATA_EXPIRED"}
    upstream = {(u["topic"], u["partition"]): u for u in result.report["upstream"] if u["topic"] == run.doomed}
    assert {tp: u["log_end"] for tp, u in upstream.items()} == {(run.doomed, p): e for p, e in new_ends.items()}
    assert_alerted(result, "DATA_EXPIRED")
    delete_topics({"bootstrap.servers": broker.bootstrap_servers}, [run.doomed])

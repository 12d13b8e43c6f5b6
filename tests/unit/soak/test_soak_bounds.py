"""The soak's bounds on made-up samples: a saw-tooth of restarts is bounded; a process that grows across restarts,
processes that pile up, and open files that climb are not; a short window is not judged."""

from __future__ import annotations

from streamwarden_longrun.records import MIB, RoleMemory, RunInfo, RunLog, Sample
from streamwarden_soak.bounds import bounded

INFO = RunInfo(started_at="2026-11-29T00:00:00+00:00", minutes=60, interval_s=60, warmup_minutes=10,
               flat_mib_per_hour=50, burn_cores=0, producer_rate=200, home="/h", api_port=1, results="/r", host="h",
               cpus=2, machine_ram_bytes=24 * 2**30, source={}, command=[])


def _memory(processes: int, largest_mib: float) -> RoleMemory:
    rss = int(processes * largest_mib * MIB)
    return RoleMemory(processes, rss, rss, rss, 0, [], int(largest_mib * MIB))


def _log(jvm_mib: list[float], executors: list[int]) -> RunLog:
    samples = [Sample(at="", elapsed_s=minute * 60.0, roles={
        "stream-driver-jvm": _memory(1, jvm), "airflow-executor": _memory(count, 230),
        "broker": _memory(1, 100 + 40 * minute)}, roles_seen=[], unclassified=[], disk_bytes={}, disk_free_bytes=0,
        machine_available_bytes=0, load_average=[0.0], stream_running=True, stream_pid=1, last_batch_id=minute,
        heartbeat_age_s=1.0, commit_times=[], sample_ms=1.0, own_cpu_s=0.0)
        for minute, (jvm, count) in enumerate(zip(jvm_mib, executors, strict=True))]
    return RunLog(INFO, samples, [])


def _unbounded(log: RunLog, gauges: list[dict[str, object]], minutes: int = 60) -> list[str]:
    judged, halves = bounded(log, gauges, 0, minutes * 60)
    assert judged
    return [h.what for h in halves if not h.bounded]


def test_a_saw_tooth_of_restarts_and_a_broker_that_keeps_every_record_are_bounded() -> None:
    saw = [300 + 20 * (minute % 6) for minute in range(61)]  # a JVM killed every six minutes, 300 -> 400 MiB
    gauges = [{"at_s": minute * 60.0, "open_files": 900 + 50 * (minute % 6)} for minute in range(61)]
    assert _unbounded(_log(saw, [4] * 61), gauges) == []


def test_growth_across_restarts_piled_up_processes_and_climbing_open_files_are_not() -> None:
    growing = [300 + 20 * (minute % 6) + 8 * minute for minute in range(61)]
    piling = [4 + 4 * (minute // 15) for minute in range(61)]  # four orphaned workers per scheduler kill
    gauges = [{"at_s": minute * 60.0, "open_files": 900 + 30 * minute} for minute in range(61)]
    assert _unbounded(_log(growing, piling), gauges) == [
        "airflow-executor: processes", "stream-driver-jvm: largest process RSS (MiB)", "open files"]


def test_a_window_under_twenty_minutes_is_reported_not_judged() -> None:
    assert bounded(_log([300.0] * 11, [4] * 11), [], 0, 600) == (False, [])

"""The key figures in Prometheus' text exposition format (version 0.0.4): lag, rates, exposure, batch age."""

from __future__ import annotations

from collections.abc import Iterable

from streamwarden.dashboard.model import Dashboard

STATES = ("running", "starting", "hung", "failed", "stopped")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _metric(name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], float | None]]
            ) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        if value is None:
            continue
        given = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{given}}} {value:g}" if given else f"{name} {value:g}")
    return lines


def render(dashboard: Dashboard) -> str:
    """The exposition text; a figure the snapshot could not read is left out."""
    lines: list[str] = []
    stream = dashboard.stream
    if stream is not None:
        lines += _metric("streamwarden_stream_state", "gauge", "1 for the stream's current state.",
                         [({"state": s}, float(stream.state == s)) for s in STATES])
        lines += _metric("streamwarden_stream_uptime_seconds", "gauge", "Seconds since the running stream took its "
                         "lease.", [({}, stream.uptime_s)])
        lines += _metric("streamwarden_last_batch_age_seconds", "gauge", "Seconds since the stream's last "
                         "heartbeat (its last batch or idle report).", [({}, stream.last_batch_age_s)])
        lines += _metric("streamwarden_last_batch_id", "gauge", "The last batch id reported.",
                         [({}, None if stream.last_batch_id is None else float(stream.last_batch_id))])
        lines += _metric("streamwarden_input_rows_per_second", "gauge", "Input rate of the last batch.",
                         [({}, stream.input_rows_per_second)])
        lines += _metric("streamwarden_processed_rows_per_second", "gauge", "Processed rate of the last batch.",
                         [({}, stream.processed_rows_per_second)])
        lines += _metric("streamwarden_batch_duration_seconds", "gauge", "Duration of the last batch.",
                         [({}, None if stream.batch_duration_ms is None else stream.batch_duration_ms / 1000)])
        lines += _metric("streamwarden_trigger_interval_seconds", "gauge", "The stream's trigger interval.",
                         [({}, stream.trigger_interval_s)])
        lines += _metric("streamwarden_lag_records", "gauge", "High watermark minus committed offset per "
                         "topic-partition.", [({"topic": p.topic, "partition": str(p.partition),
                                                "status": p.status}, float(p.lag)) for p in stream.partitions])
        lines += _metric("streamwarden_lag_total_records", "gauge", "Lag summed over every topic-partition "
                         "(absent when not measured; a lower bound when streamwarden_lag_lower_bound is 1).",
                         [({}, None if stream.total_lag is None else float(stream.total_lag))])
        lines += _metric("streamwarden_lag_measured", "gauge", "1 when the broker answered and the lag was measured.",
                         [({}, float(stream.total_lag is not None))])
        lines += _metric("streamwarden_lag_lower_bound", "gauge", "1 when the high watermarks are ListOffsets' "
                         "(the fetch-based query failed): each lag is at least its figure.",
                         [({}, float(stream.lag_lower_bound))])
    if dashboard.series.last_rate is not None:
        lines += _metric("streamwarden_last_measured_records_per_second", "gauge", "Records per second the stream "
                         "committed over its last run of commits (Delta history; kept while it is down).",
                         [({}, dashboard.series.last_rate.records_per_second)])
    if dashboard.sites is not None:
        lines += _metric("streamwarden_site_exposure_seconds", "gauge", "Seconds since the site's last clean "
                         "session start.", [({"site": s.site}, s.exposure_s) for s in dashboard.sites.sites])
        lines += _metric("streamwarden_site_exposure_limit_seconds", "gauge", "Exposure above which a site is "
                         "alerted (restart interval x factor).", [({}, dashboard.sites.limit_s)])
        lines += _metric("streamwarden_site_quarantine_ratio", "gauge", "Share of the site's records in "
                         "quarantine.", [({"site": s.site}, s.quarantine_share) for s in dashboard.sites.sites])
    lines += _metric("streamwarden_table_version", "gauge", "Delta version of each output table.",
                     [({"table": t.name}, None if t.version is None else float(t.version)) for t in dashboard.tables])
    lines += _metric("streamwarden_table_rows", "gauge", "Rows of each output table.",
                     [({"table": t.name}, float(t.rows)) for t in dashboard.tables if t.exists])
    lines += _metric("streamwarden_table_small_files", "gauge", "Files below maintenance's small-file size.",
                     [({"table": t.name}, None if t.small_files is None else float(t.small_files))
                      for t in dashboard.tables])
    lines += _metric("streamwarden_validation_passed", "gauge", "1 when the last validation run passed.",
                     [({"table": t.name}, None if t.validation_passed is None else float(t.validation_passed))
                      for t in dashboard.tables])
    lines += _metric("streamwarden_dashboard_errors", "gauge", "Sections the snapshot could not read.",
                     [({}, float(len(dashboard.errors)))])
    return "\n".join(lines) + "\n"

"""The Streamwarden page as HTML: inline CSS, inline SVG charts and a small inline script (no asset from
anywhere else), every value escaped. The script fetches the page's body again (``?fragment=1``) every
``REFRESH_S`` seconds, so the figures are rendered in one place only (here).

Each figure a test or a person may look for carries ``data-figure="<name>"``.
"""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime
from html import escape

from streamwarden.dashboard.model import AlertNow, Dashboard, Series, Sites, StreamNow, TableNow
from streamwarden.durations import duration_text
from streamwarden.tables.commit_rate import MeasuredRate

REFRESH_S = 10
STATE_TONE = {"running": "ok", "starting": "warn", "hung": "bad", "failed": "bad", "stopped": "bad"}
LAG_TONE = {"OK": "ok", "STARTING": "warn", "UNKNOWN": "warn", "WARN": "warn", "STALL": "bad", "STOP": "bad",
            "ERR": "bad"}

CSS = """
:root{--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--mute:#57606a;--line:#d0d7de;--bg:#f6f8fa}
*{box-sizing:border-box}body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
padding:12px;color:#1f2328;background:#fff}h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:0 0 8px}
.sub{color:var(--mute);font-size:12px;margin-bottom:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,420px),1fr));gap:12px}
.card{border:1px solid var(--line);border-radius:6px;padding:10px 12px;background:#fff;min-width:0}
.wide{grid-column:1/-1}.state{font-size:22px;font-weight:600}.ok{color:var(--ok)}.warn{color:var(--warn)}
.bad{color:var(--bad)}dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;margin:0}
dt{color:var(--mute)}dd{margin:0;overflow-wrap:anywhere}.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{text-align:left;padding:3px 6px;
border-bottom:1px solid var(--line);white-space:nowrap}th{background:var(--bg);font-weight:600}
td.num,th.num{text-align:right}code{font-size:12px;background:var(--bg);padding:1px 3px;border-radius:3px;
white-space:pre-wrap;overflow-wrap:anywhere}ul.alerts{list-style:none;padding:0;margin:0}
ul.alerts li{border-bottom:1px solid var(--line);padding:6px 0}.reasons{margin:4px 0 0;padding-left:18px}
svg{width:100%;height:auto;background:var(--bg);border-radius:4px}.errors{color:var(--bad)}
"""

SCRIPT = """
(function(){var busy=false;function refresh(){if(busy)return;busy=true;
fetch('?fragment=1',{credentials:'same-origin',cache:'no-store'}).then(function(r){
if(!r.ok)throw new Error('HTTP '+r.status);return r.text();}).then(function(html){
document.getElementById('dashboard').innerHTML=html;}).catch(function(e){
var s=document.getElementById('refresh-state');if(s)s.textContent='refresh failed: '+e.message;})
.finally(function(){busy=false;});}setInterval(refresh,MS);
document.addEventListener('click',function(e){var a=e.target.closest&&e.target.closest('a[data-airflow-link]');
if(!a||window.top===window)return;try{var p=window.parent;p.history.pushState(null,'',a.href);
p.dispatchEvent(new p.PopStateEvent('popstate',{state:null}));e.preventDefault();}catch(err){}});})();
""".replace("MS", str(REFRESH_S * 1000))


def number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def moment(text: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS`` UTC."""
    if not text:
        return "-"
    try:
        return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return text


def _figure(name: str, text: str, tone: str = "") -> str:
    cls = f' class="{tone}"' if tone else ""
    return f'<span data-figure="{escape(name)}"{cls}>{escape(text)}</span>'


def _rows(pairs: list[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def stream_card(stream: StreamNow | None, last_rate: MeasuredRate | None = None) -> str:
    """The stream now; while it does not run, also its last measured rate (``last_rate``, from the Delta
    history): its heartbeat's rates are gone or stale then."""
    if stream is None:
        return '<section class="card"><h2>Stream</h2><p class="bad">could not be read</p></section>'
    tone = STATE_TONE.get(stream.state, "")
    label = stream.state + (f" ({stream.failure_class})" if stream.failure_class else "")
    trigger_ms = None if stream.trigger_interval_s is None else stream.trigger_interval_s * 1000
    batch = "-" if stream.batch_duration_ms is None else (
        f"{stream.batch_duration_ms:,} ms / trigger {number(trigger_ms)} ms")
    pairs = [
        ("verdict", _figure("stream-verdict", stream.verdict)),
        ("pid", _figure("stream-pid", "-" if stream.pid is None else str(stream.pid))),
        ("uptime", _figure("stream-uptime", duration_text(stream.uptime_s))),
        ("last batch", _figure("stream-last-batch", "-" if stream.last_batch_id is None else str(stream.last_batch_id))
         + f" at {escape(moment(stream.last_batch_at))} ("
         + _figure("stream-last-batch-age", duration_text(stream.last_batch_age_s)) + " ago)"),
        ("rows/s in / processed", _figure("stream-input-rate", number(stream.input_rows_per_second, 1)) + " / "
         + _figure("stream-processed-rate", number(stream.processed_rows_per_second, 1))),
        ("batch duration", _figure("stream-batch-duration", batch)),
    ]
    if stream.state != "running" and last_rate is not None:
        pairs.append(("last measured rate", _figure("stream-last-rate", f"{last_rate.records_per_second:,.0f}")
                      + escape(f" records/s (Delta history, {last_rate.basis()})")))
    if stream.failure_message:
        pairs.append(("failure", f"<code>{escape(stream.failure_message[:500])}</code>"))
    reasons = "".join(f"<li>{escape(r)}</li>" for r in stream.reasons)
    return (f'<section class="card"><h2>Stream</h2><div class="state">{_figure("stream-state", label, tone)}</div>'
            + (f'<ul class="reasons">{reasons}</ul>' if reasons else "") + _rows(pairs) + "</section>")


def lag_card(stream: StreamNow | None) -> str:
    if stream is None:
        return ""
    rows = "".join(
        f"<tr><td>{escape(p.topic)}</td><td class=num>{p.partition}</td>"
        f"<td class=num>{number(p.committed)}</td><td class=num>{number(p.high_watermark)}</td>"
        f'<td class=num data-figure="lag-{escape(p.topic)}-{p.partition}">{p.lag:,}</td>'
        f'<td class="{LAG_TONE.get(p.status, "")}">{escape(p.status)}{" · retention risk" * p.retention_at_risk}'
        "</td></tr>" for p in stream.partitions)
    broker = f'<p class="bad">lag not measured: the broker could not be asked: {escape(stream.broker_error)}</p>' \
        if stream.broker_error else ""
    notes = "".join(f'<p class="sub">broker: {escape(note)}</p>' for note in stream.broker_notes)
    status = _figure("lag-status", stream.lag_status, LAG_TONE.get(stream.lag_status, ""))
    least = "at least " if stream.lag_lower_bound else ""
    total = "unknown" if stream.total_lag is None else f"{least}{stream.total_lag:,}"
    high = "high (at least)" if stream.lag_lower_bound else "high"
    return (f'<section class="card"><h2>Lag: {status}'
            f' · total {_figure("lag-total", total)}</h2>{broker}{notes}<div class="scroll"><table>'
            f"<tr><th>topic</th><th class=num>partition</th><th class=num>committed</th><th class=num>{high}</th>"
            f"<th class=num>lag</th><th>Burrow</th></tr>{rows}</table></div></section>")


def svg_chart(points: list[tuple[float, float]], title: str, unit: str, name: str, *, width: int = 560,
              height: int = 140) -> str:
    """A line chart of ``points`` ``[epoch seconds, value]`` with its range written on it."""
    head = f'<figure style="margin:0" data-figure="{escape(name)}"><figcaption>{escape(title)}</figcaption>'
    if not points:
        return head + '<p class="sub">no data yet</p></figure>'
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, top = min(xs), max(xs), max(*ys, 1.0)
    span = (x1 - x0) or 1.0
    pad = 24

    def at(x: float, y: float) -> tuple[str, str]:
        return f"{pad + (x - x0) / span * (width - 2 * pad):.1f}", f"{height - pad - y / top * (height - 2 * pad):.1f}"

    line = " ".join(",".join(at(x, y)) for x, y in points)
    dots = "".join('<circle cx="{}" cy="{}" r="3" fill="#0969da"/>'.format(*at(x, y))
                   for x, y in (points if len(points) <= 30 else points[-1:]))  # a lone point shows too
    start, end = (datetime.fromtimestamp(x, UTC).strftime("%H:%M") for x in (x0, x1))
    return (head + f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
            f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#d0d7de"/>'
            f'<polyline fill="none" stroke="#0969da" stroke-width="2" points="{line}"/>{dots}'
            f'<text x="{pad}" y="14" font-size="11" fill="#57606a">max {top:,.0f} {escape(unit)}</text>'
            f'<text x="{pad}" y="{height - 6}" font-size="11" fill="#57606a">{start}</text>'
            f'<text x="{width - pad}" y="{height - 6}" font-size="11" fill="#57606a" text-anchor="end">{end}'
            f' (last {ys[-1]:,.0f})</text></svg></figure>')


def chart_card(series: Series) -> str:
    return (f'<section class="card wide"><h2>Last {series.hours:g} hours</h2><div class="grid">'
            + svg_chart(series.throughput, "records committed per second", "rec/s", "chart-throughput")
            + svg_chart(series.lag, "total lag (supervisor checks)", "records", "chart-lag") + "</div></section>")


def sites_card(sites: Sites | None) -> str:
    if sites is None:
        return '<section class="card wide"><h2>Sites</h2><p class="bad">could not be read</p></section>'
    limit = "no restart schedule" if sites.limit_s is None else (
        f"restart interval {duration_text(sites.interval_s)}, exposure limit {duration_text(sites.limit_s)}")
    rows = "".join(
        f"<tr><td>{escape(s.site)}</td><td>{escape(moment(s.newest_clean_start))}</td>"
        f'<td class="num {"bad" if s.over_limit else ""}" data-figure="exposure-{escape(s.site)}">'
        f"{escape(duration_text(s.exposure_s))}</td><td class=num>{s.open_sessions:,}</td>"
        f"<td class=num>{s.damaged_sessions:,}</td><td class=num>{s.rows:,}</td><td class=num>{s.quarantined:,}</td>"
        f"<td class=num>{'-' if s.quarantine_share is None else f'{s.quarantine_share:.2%}'}</td></tr>"
        for s in sites.sites)
    run = sites.last_restart_run
    last = "" if run is None else (
        f'<p class="sub">last restart_sessions run {escape(moment(run.get("checked_at")))}: '
        f'{"passed" if run.get("passed") else "FAILED"}; answered {escape(", ".join(run.get("answered", [])) or "-")}'
        f'; unanswered {escape(", ".join(run.get("unanswered", [])) or "-")}'
        + (f'; not read by the stream (it was not running or behind) {escape(", ".join(run["unread"]))}'
           if run.get("unread") else "") + "</p>")
    note = f'<p class="sub">{escape(sites.note)}</p>' if sites.note else ""
    return (f'<section class="card wide"><h2>Sites</h2><p class="sub">{escape(limit)}</p>{note}<div class="scroll">'
            "<table><tr><th>site</th><th>current session start</th><th class=num>exposure</th>"
            "<th class=num>open</th><th class=num>damaged</th><th class=num>rows</th><th class=num>quarantined</th>"
            f"<th class=num>quarantine share</th></tr>{rows}</table></div>{last}</section>")


def _validation(t: TableNow) -> str:
    if t.validation_passed is None:
        return _figure(f"validation-{t.name}", "not validated yet")
    verdict = "passed" if t.validation_passed else "FAILED " + ", ".join(
        f"{c} {n}" for c, n in t.validation_classes.items())
    docs = ' · <a href="data-docs/index.html" data-figure="data-docs">Data Docs</a>' if t.data_docs else ""
    return (_figure(f"validation-{t.name}", verdict, "ok" if t.validation_passed else "bad")
            + f" {escape(moment(t.validation_at))}{docs}")


def tables_card(tables: list[TableNow]) -> str:
    rows = "".join(
        f"<tr><td>{escape(t.name)}</td>"
        f'<td class=num data-figure="table-{escape(t.name)}-version">{"-" if t.version is None else t.version}</td>'
        f'<td class=num data-figure="table-{escape(t.name)}-rows">{t.rows:,}</td>'
        f'<td class=num data-figure="table-{escape(t.name)}-files">{t.files:,}</td>'
        f"<td class=num>{number(t.small_files)}</td><td>{escape(moment(t.last_compaction_at))}</td>"
        f"<td>{_validation(t)}</td>"
        f'<td class=num data-figure="table-{escape(t.name)}-validated">'
        f'{"-" if t.last_validated_version is None else t.last_validated_version}</td></tr>' for t in tables)
    return ('<section class="card wide"><h2>Tables</h2><div class="scroll"><table><tr><th>table</th>'
            "<th class=num>version</th><th class=num>rows</th><th class=num>files</th><th class=num>small files</th>"
            "<th>last compaction</th><th>last validation</th><th class=num>last validated version</th></tr>"
            f"{rows}</table></div></section>")


def dag_links(airflow_base: str, alert: AlertNow) -> str:
    """The DAGs the alert names, each linked to its page in the Airflow UI (whose Trigger button takes the
    Params), with the Params to give. Inside the UI's frame (sandboxed: no top navigation) the page's script
    moves the UI itself to the link (its router follows the history); opened alone, the link leads there."""
    links = []
    for action in alert.actions:
        href = f"{airflow_base.rstrip('/')}/dags/{urllib.parse.quote(action.dag_id)}"
        params = "" if action.params is None else (
            f' with Params <code data-figure="alert-params">{escape(json.dumps(action.params))}</code>')
        links.append(f'<div>trigger <a href="{escape(href)}" target="_top" data-airflow-link data-figure="alert-dag">'
                     f"{escape(action.dag_id)}</a>{params}</div>")
    return "".join(links)


def alerts_card(alerts: list[AlertNow], airflow_base: str) -> str:
    items = "".join(
        f'<li><span class="{"bad" if a.severity == "critical" else "warn"}">{escape(a.severity)}</span> '
        f'{escape(moment(a.raised_at))} <span class="sub">{escape(a.source)}</span><div>{escape(a.summary)}</div>'
        f'<div class="sub">next: {escape(a.next_action)}</div>{dag_links(airflow_base, a)}</li>'
        for a in alerts)
    return (f'<section class="card wide"><h2>Last alerts</h2><ul class="alerts" data-figure="alerts">'
            f'{items or "<li>none</li>"}</ul></section>')


def fragment(dashboard: Dashboard, airflow_base: str = "..") -> str:
    """The body's content, refreshed in place by the page's script."""
    errors = "".join(f"<li>{escape(k)}: {escape(v)}</li>" for k, v in dashboard.errors.items())
    recovery = dashboard.last_recovery
    last_recovery = "" if recovery is None else (
        f'<p class="sub">last recovery: {escape(str(recovery.get("finished_at") or recovery.get("at") or ""))}</p>')
    return (f'<div class="sub">as of <span data-figure="generated-at">{escape(moment(dashboard.generated_at))}</span>'
            f' UTC · refreshes every {REFRESH_S}s <span id="refresh-state"></span></div>'
            + (f'<ul class="errors">{errors}</ul>' if errors else "")
            + '<div class="grid">' + stream_card(dashboard.stream, dashboard.series.last_rate)
            + lag_card(dashboard.stream)
            + chart_card(dashboard.series) + sites_card(dashboard.sites) + tables_card(dashboard.tables)
            + alerts_card(dashboard.alerts, airflow_base) + "</div>" + last_recovery)


def page(dashboard: Dashboard, airflow_base: str = "..") -> str:
    """The whole page."""
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            '<meta name="viewport" content="width=device-width,initial-scale=1"><title>Streamwarden</title>'
            f"<style>{CSS}</style></head><body><h1>Streamwarden</h1>"
            f'<main id="dashboard">{fragment(dashboard, airflow_base)}</main><script>{SCRIPT}</script></body></html>')

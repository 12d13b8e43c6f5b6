"""The Data Docs readable without the internet: GX's pages lose their CDN assets, the index is plain HTML.

GX's pages load Bootstrap, jQuery, bootstrap-table, Vega and Font Awesome from CDNs, and its index draws its
table with bootstrap-table from data inside a script: offline (a site without internet access, an air-gapped
cluster) the index was blank. After each build, the pages it wrote lose every tag that loads something from
another host and get a small stylesheet of their own (their tables are plain HTML: they read as they are), and
``index.html`` becomes a static list of the validation pages on disk, newest run first.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from pathlib import Path

INDEX_RUNS = 200
"""Runs listed on the index (the newest); older pages stay on disk until they expire."""
_EXTERNAL = re.compile(
    r"<link\b[^>]*\bhref=\"(?:https?:)?//[^\"]*\"[^>]*>"  # stylesheets and icons from a CDN
    r"|<script\b[^>]*\bsrc=\"(?:https?:)?//[^\"]*\"[^>]*>\s*</script>"  # scripts from a CDN
    r"|<img\b[^>]*\bsrc=\"(?:https?:)?//[^\"]*\"[^>]*>",  # the logo
    re.IGNORECASE)
_EXTERNAL_URL = re.compile(r"url\(\s*'?(?:https?:)?//[^)]*\)", re.IGNORECASE)
STYLE = """<style id="streamwarden-offline">
body { font-family: system-ui, sans-serif; margin: 1rem 2rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.text-danger { color: #b00020; } .text-success { color: #1b7f3b; }
</style>"""


def make_offline(folder: Path, since: float) -> list[Path]:
    """Rewrite the pages of the site in ``folder`` written at or after ``since`` (epoch seconds: this build's)
    without external assets, and write the index; the pages rewritten."""
    rewritten = []
    for page in folder.rglob("*.html"):
        if (page.name == "index.html" and page.parent == folder) or page.stat().st_mtime < since:
            continue
        text = page.read_text(encoding="utf-8")
        local = _EXTERNAL_URL.sub("none", _EXTERNAL.sub("", text))
        if STYLE not in local:
            local = local.replace("</head>", f"{STYLE}\n</head>", 1)
        if local != text:
            page.write_text(local, encoding="utf-8")
            rewritten.append(page)
    write_index(folder)
    return rewritten


def write_index(folder: Path) -> Path:
    """``index.html``: per run (newest first, :data:`INDEX_RUNS` of them) its time, id and pages, then the
    suites' pages; plain HTML and the stylesheet above."""
    runs: dict[tuple[str, str], list[Path]] = defaultdict(list)
    validations = folder / "validations"
    for page in validations.rglob("*.html") if validations.is_dir() else ():
        run_time, run_name = page.parent.name, page.parent.parent.name  # .../<suite>/<run name>/<run time>/x.html
        runs[(run_time, run_name)].append(page)
    rows = []
    for run_time, run_name in sorted(runs, reverse=True)[:INDEX_RUNS]:
        links = " ".join(f'<a href="{html.escape(p.relative_to(folder).as_posix())}">'
                         f"{html.escape(_suite(p, validations))}</a>"
                         for p in sorted(runs[(run_time, run_name)]))
        rows.append(f"<tr><td>{html.escape(_readable(run_time))}</td><td>{html.escape(run_name)}</td>"
                    f"<td>{links}</td></tr>")
    suites = folder / "expectations"
    suite_links = " ".join(f'<a href="{html.escape(p.relative_to(folder).as_posix())}">'
                           f"{html.escape(p.relative_to(suites).with_suffix('').as_posix())}</a>"
                           for p in sorted(suites.rglob("*.html"))) if suites.is_dir() else ""
    shown = f"the newest {INDEX_RUNS} of {len(runs)}" if len(runs) > INDEX_RUNS else f"{len(runs)}"
    body = (f"<h1>Data Docs: validate_output</h1><p>Validation runs ({shown}), newest first: each run's page per "
            "batch checked.</p><table><thead><tr><th>run time (UTC)</th><th>run</th><th>pages</th></tr></thead>"
            f"<tbody>{''.join(rows) or '<tr><td colspan=3>no validation run yet</td></tr>'}</tbody></table>"
            f"<h2>Expectation suites</h2><p>{suite_links or 'none yet'}</p>")
    index = folder / "index.html"
    index.write_text(f'<!DOCTYPE html><html><head><meta charset="UTF-8"><title>Data Docs: validate_output</title>'
                     f"{STYLE}</head><body>{body}</body></html>", encoding="utf-8")
    return index


def _suite(page: Path, validations: Path) -> str:
    """``session_rows.schema`` for ``validations/session_rows/schema/<run>/<time>/x.html``."""
    return ".".join(page.parent.parent.parent.relative_to(validations).parts)


def _readable(run_time: str) -> str:
    """``2026-11-27 11:39:07`` for GX's ``20261127T113907.442822Z``."""
    match = re.fullmatch(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(?:\.\d+)?Z", run_time)
    return run_time if match is None else "{}-{}-{} {}:{}:{}".format(*match.groups())

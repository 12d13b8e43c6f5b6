"""The Data Docs of a run: its validation results stored in the context, the HTML site built under a folder.

The site is ``<run_root>/data_docs/`` (``settings.run_paths.data_docs``); each run adds one page per validated batch
(``validations/<suite>/<run id>/...html``); the pages are then made readable offline and ``index.html`` lists
every run's pages on disk (:mod:`.offline`; pages of earlier runs stay for the alerts that link them, those
older than :data:`KEEP_DAYS` days are deleted).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote, urlparse

from streamwarden.validation.expectations.gx import (
    SITE,
    EphemeralDataContext,
    ExpectationSuiteIdentifier,
    ExpectationSuiteValidationResult,
    RunIdentifier,
    ValidationResultIdentifier,
)
from streamwarden.validation.expectations.offline import make_offline

KEEP_DAYS = 30
"""Validation pages older than this are deleted when the site is built."""
RENDER_LOGGER = "great_expectations.render.renderer.site_builder"
"""Where GX logs a page it could not render (it skips the page and goes on)."""


@dataclass(frozen=True)
class Site:
    """Where the Data Docs of a run are."""

    index: Path  # the site's index.html
    pages: dict[str, Path]  # batch (suite) name -> its page of this run
    missing: dict[str, str] = field(default_factory=dict)  # batch without a page -> why (GX's render error)

    def notes(self) -> list[str]:
        """One line per batch whose page was not built, with GX's reason."""
        return [f"Data Docs: no page for {name}: {why}" for name, why in sorted(self.missing.items())]


def store(ctx: EphemeralDataContext, result: ExpectationSuiteValidationResult, run_id: str,
          at: datetime) -> ValidationResultIdentifier:
    """Keep ``result`` in the context's results store (what the site is built from); its key."""
    key = ValidationResultIdentifier(ExpectationSuiteIdentifier(name=result.suite_name),
                                     RunIdentifier(run_name=run_id, run_time=at), result.batch_id or "__none__")
    ctx.validation_results_store.set(key, result)
    return key


def build(ctx: EphemeralDataContext, folder: Path, keys: dict[str, ValidationResultIdentifier]) -> Site:
    """Build the site in ``folder`` from what the context holds; the index and this run's pages."""
    folder.mkdir(parents=True, exist_ok=True)
    _delete_old_pages(folder)
    started = time.time() - 1  # a file system's times may be coarser than the clock's
    with _render_errors() as errors:
        ctx.build_data_docs(site_names=[SITE])
    make_offline(folder, since=started)
    pages, missing = {}, {}
    for name, key in keys.items():
        urls = ctx.get_docs_sites_urls(resource_identifier=key, site_name=SITE)
        if urls and urls[0].get("site_url"):
            pages[name] = _path(str(urls[0]["site_url"]))
        else:
            missing[name] = _reason(errors)
    return Site(folder / "index.html", pages, missing)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _render_errors() -> Iterator[list[str]]:
    """The errors GX logs while it renders pages (each one a page it skipped)."""
    handler = _Collect()
    logger = logging.getLogger(RENDER_LOGGER)
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def _reason(errors: list[str]) -> str:
    """GX's render errors of this build (they do not name the batch): how many, and the last one's exception
    (its trace is in the task's log, where GX logged it)."""
    if not errors:
        return "GX built no page and logged no error"
    detail = " ".join(errors[-1].split("Detailed information follows:", 1)[-1].split())
    return f"{len(errors)} render error(s) in this build, the last: {detail.split(' Traceback:', 1)[0][:500]}"


def _path(url: str) -> Path:
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme in ("file", "") else Path(url)


def _delete_old_pages(folder: Path) -> None:
    cutoff = time.time() - KEEP_DAYS * 86400
    pages = folder / "validations"
    if not pages.is_dir():
        return
    for page in pages.rglob("*.html"):
        if page.stat().st_mtime < cutoff:
            page.unlink(missing_ok=True)

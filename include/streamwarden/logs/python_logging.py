"""The stream driver's Python logging: INFO to a size-rotated file, WARNING and above also to stderr."""

from __future__ import annotations

import logging
import sys
from logging.handlers import RotatingFileHandler

from streamwarden.logs.bounds import PYTHON_LOG, LogBounds

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PY4J_LOGGERS = ("py4j.clientserver", "py4j.java_gateway")
"""py4j logs an INFO line for every call between Python and the JVM."""


def configure_job_logging(bounds: LogBounds, *, py4j_info: bool = False) -> None:
    """Replace the root logger's handlers: ``<logs>/stream.python.log`` (INFO, rotated at ``max_bytes``,
    ``backups`` kept) and stderr (WARNING, into the launch log); py4j's loggers at WARNING unless
    ``py4j_info``."""
    bounds.folder.mkdir(parents=True, exist_ok=True)
    rotating = RotatingFileHandler(bounds.folder / PYTHON_LOG, maxBytes=bounds.max_bytes,
                                   backupCount=bounds.backups, encoding="utf-8")
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING)
    logging.basicConfig(level=logging.INFO, format=FORMAT, handlers=[rotating, console], force=True)
    for name in PY4J_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if py4j_info else logging.WARNING)

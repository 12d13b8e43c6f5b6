"""Where the logs live and how far they may grow: the log settings as one value, and the files' names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from streamwarden.settings import Settings

JVM_LOG = "stream.jvm.log"
"""The stream driver JVM's log (log4j2 rolling appender)."""
PYTHON_LOG = "stream.python.log"
"""The stream driver's Python log (a rotating handler)."""
LAUNCH_LOG = re.compile(r"^stream-\d{8}T\d{6}\.log$")
"""One file per launch: the stdout and stderr of ``spark-submit`` (start-up lines, warnings, errors)."""
ROLLED_LOG = re.compile(r"^(?P<log>.+\.log)\.(?P<index>\d+)$")
"""A rolled-over file: ``<name>.log.1`` is the newest."""


@dataclass(frozen=True)
class LogBounds:
    """The logs folder and its bounds: each log rolls over at ``max_bytes`` and keeps ``backups`` rolled-over
    files; rolled-over files and launch logs older than ``max_age`` seconds are deleted."""

    folder: Path
    max_bytes: int
    backups: int
    max_age: float

    @classmethod
    def of(cls, settings: Settings) -> LogBounds:
        return cls(settings.run_paths.logs, settings.log_max_bytes, settings.log_backups,
                   settings.log_max_age)

    @property
    def per_log_bytes(self) -> int:
        """The most one rolling log takes on disk: the live file and its rolled-over ones."""
        return (self.backups + 1) * self.max_bytes


def log_files(folder: Path, name: str) -> list[Path]:
    """A rolling log's files in ``folder``, oldest first: ``name.N`` ... ``name.1``, then ``name`` itself."""
    rolled = [(int(m["index"]), path) for path in folder.glob(f"{name}.*")
              if (m := ROLLED_LOG.match(path.name)) and m["log"] == name]
    live = folder / name
    return [path for _, path in sorted(rolled, reverse=True)] + ([live] if live.is_file() else [])

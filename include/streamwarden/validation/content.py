"""Check 6's share of each run: which data files it hashes, every one or a bounded share in turn.

With ``STREAMWARDEN_VALIDATION_CONTENT_MIB`` at 0 (the default) a run hashes every file its pinned versions
list. Above 0 it hashes files up to that many MiB per table (at least one file), in path order from the one
after where the previous run stopped, wrapping round at the end: a cursor file per table in the validation
folder says where. Every file is then checked once every ``ceil(table MiB / budget)`` runs, which the report
states. A file's bytes are read whole, so the budget bounds each run's reads (a GET per file on an object store).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.tables.storage import Chooser, StorageCheck

MIB = 2**20


@dataclass(frozen=True)
class ContentShare:
    """How check 6 chooses a table's files: every one (``budget_bytes`` 0), or a share from a cursor."""

    budget_bytes: int
    cursor: Path | None  # the table's cursor file (None with no budget)

    @classmethod
    def of(cls, folder: Path, table: str, budget_mib: int) -> ContentShare:
        return cls(budget_mib * MIB, folder / "content-cursor" / f"{table}.json" if budget_mib else None)

    def chooser(self) -> Chooser:
        return self.choose

    def choose(self, files: Mapping[str, int]) -> list[str]:
        """The files of this run: every one, or the next ``budget_bytes`` after the cursor (which moves on)."""
        order = sorted(files)
        if not self.budget_bytes or self.cursor is None or not order:
            return order
        after = (read_json(self.cursor) or {}).get("after")
        start = bisect_right(order, after) if isinstance(after, str) else 0
        chosen: list[str] = []
        spent = 0
        for path in order[start:] + order[:start]:
            if chosen and spent + files[path] > self.budget_bytes:
                break
            chosen.append(path)
            spent += files[path]
        self.cursor.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_json_atomic(self.cursor, {"after": chosen[-1]})
        return chosen

    def coverage(self, table: str, storage: StorageCheck) -> ContentCoverage | None:
        """What the run covered of ``table`` (None when its content was not checked)."""
        checked = storage.content
        if checked is None:
            return None
        return ContentCoverage(table, checked.checked, storage.whole_files, checked.checked_bytes,
                               storage.whole_bytes, self.budget_bytes, len(checked.unrecorded))


@dataclass(frozen=True)
class ContentCoverage:
    """What check 6 hashed of one table in one run."""

    table: str
    files: int  # hashed
    of_files: int  # found whole (at their size) in storage
    bytes: int
    of_bytes: int
    budget_bytes: int  # 0: every file every run
    unrecorded: int  # files without a recorded hash (committed before hashes were kept): not checked

    @property
    def runs_per_pass(self) -> int:
        """Runs that check every file once."""
        return max(1, math.ceil(self.of_bytes / self.budget_bytes)) if self.budget_bytes else 1

    def line(self) -> str:
        said = (f"{self.table}: {self.files:,} of {self.of_files:,} data files hashed "
                f"({self.bytes / MIB:,.1f} of {self.of_bytes / MIB:,.1f} MiB)")
        if self.runs_per_pass > 1:
            said += (f", {self.budget_bytes / MIB:g} MiB a run from where the last run stopped: every file once "
                     f"every {self.runs_per_pass} runs")
        if self.unrecorded:
            said += f"; {self.unrecorded:,} without a recorded hash (committed before hashes were kept), not checked"
        return said

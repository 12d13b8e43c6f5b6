"""DuckDB connections over the tables: memory held at the limit, beyond it spilled under the run root."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from streamwarden.paths import RunPaths
from streamwarden.tables.sql import MEMORY_LIMIT, bounded_connection

LARGER_THAN_THE_LIMIT = "SELECT count(*) FROM (SELECT i, count(*) FROM range(20000000) t(i) GROUP BY i)"
"""20M distinct groups: a hash table several times the limit."""


def test_a_query_larger_than_the_limit_spills_under_the_run_root_and_the_spill_goes(tmp_path: Path) -> None:
    seen: list[Path] = []
    with bounded_connection(RunPaths(tmp_path).spill) as con:
        limit, spill = con.execute("SELECT current_setting('memory_limit'), current_setting('temp_directory')"
                                   ).fetchone() or ("", "")
        assert (MEMORY_LIMIT, limit) == ("256MB", "244.1 MiB")  # DuckDB shows it in MiB
        assert Path(spill).parent == tmp_path / "spill"
        (groups,) = con.execute(LARGER_THAN_THE_LIMIT).fetchone() or (0,)
        assert groups == 20_000_000
        seen.append(Path(spill))
    assert not seen[0].exists()


def test_a_run_root_that_cannot_be_written_connects_without_spilling(tmp_path: Path) -> None:
    (tmp_path / "run").write_text("a file where the run root's folder should be")
    with bounded_connection(RunPaths(tmp_path / "run").spill) as con:
        assert con.execute("SELECT current_setting('memory_limit')").fetchone() == ("244.1 MiB",)
        with pytest.raises(duckdb.OutOfMemoryException):
            con.execute(LARGER_THAN_THE_LIMIT)

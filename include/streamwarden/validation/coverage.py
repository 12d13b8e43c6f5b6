"""Check 1: the tables hold every offset their logs claim, each once (gaps and duplicates as offset ranges).

Per topic-partition, the offsets both tables' logs claim as committed (``session_rows`` and ``quarantine``,
or ``records``) must be covered by rows without a hole, and each offset must be in one table only (Secor's
adjacency rule, as real errors). Everything is pushed down to DuckDB over the pyarrow datasets of the pinned
versions; Python only sees a few figures and offset ranges per topic-partition:

1. one aggregation per table: per offset, its rows and the rows beyond the first copy of each row
   (``session_rows`` has several rows per offset: a snapshot expands into rows, so a row is an offset and
   its row key, :attr:`~streamwarden.validation.settings.ValidationSettings.row_key`; the other tables
   have one row per offset);
2. gaps: the accounted offsets inside the claimed intervals, ordered per topic-partition, with ``LAG``:
   a step of more than one is a gap, and so are missing heads and tails of an interval;
3. duplicates: offsets in both tables, repeated rows, and rows no claimed interval holds (written without
   their offsets being recorded: another writer), each turned into ranges of consecutive offsets
   (``offset - row_number()`` is constant along a run).

Offsets one table claims and the other does not are a gap too, unless they lie above the lower of the two
tables' newest offsets: that is the batch in flight between the two commits (check 2 judges it against the
checkpoint).

A scheduled run after a passing one reads a window (:mod:`.window`): steps 1-3 over the offsets from each
topic's floor up (the claims' intervals cut there), and the rows written since the last validation below the
floor are offsets committed again (a DUPLICATE).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from streamwarden.tables.committed import TopicPartition
from streamwarden.tables.location import SESSION_ROWS
from streamwarden.tables.ranges import Interval, merge_intervals, subtract_interval
from streamwarden.validation.findings import Finding, FindingClass
from streamwarden.validation.snapshot import PinnedTable
from streamwarden.validation.window import Window

MULTI_ROW_TABLES = frozenset({SESSION_ROWS})
"""Tables with several rows per offset (keyed by offset and row key); the others hold one row per offset."""


@dataclass(frozen=True)
class PartitionCoverage:
    """What the tables hold of one topic-partition."""

    topic: str
    partition: int
    claimed: tuple[Interval, ...]  # offsets every table claims as committed
    rows: dict[str, int]  # per table
    offsets: dict[str, int]  # distinct offsets per table
    gaps: int = 0  # offsets claimed but in no table
    duplicates: int = 0  # offsets in two tables, extra copies of rows, rows outside the claims

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "claimed": [list(i) for i in self.claimed],
                "rows": self.rows, "offsets": self.offsets, "gaps": self.gaps, "duplicates": self.duplicates}


@dataclass(frozen=True)
class Coverage:
    """Check 1's outcome: per topic-partition figures and the findings."""

    partitions: tuple[PartitionCoverage, ...]
    findings: tuple[Finding, ...]


def check_coverage(tables: Sequence[PinnedTable], *, row_key: Sequence[str] = ("row_id",),
                   more_partitions: Iterable[TopicPartition] = (), max_ranges: int = 10,
                   connection: duckdb.DuckDBPyConnection | None = None, window: Window | None = None) -> Coverage:
    """Check 1 over ``tables`` (pinned), for every topic-partition with rows or claims: over every row, or over
    ``window`` (:mod:`.window`; the figures are then the window's).

    ``more_partitions`` are topic-partitions known from elsewhere (the checkpoint, Kafka): a table's log
    can only be asked about named partitions, so one whose rows are all gone is found through them.
    """
    if not tables:
        return Coverage((), ())
    con = connection or duckdb.connect()
    try:
        return _Reconciliation(con, tables, tuple(row_key), max_ranges, window).run(more_partitions)
    finally:
        if connection is None:
            con.close()


class _Reconciliation:
    def __init__(self, con: duckdb.DuckDBPyConnection, tables: Sequence[PinnedTable], row_key: tuple[str, ...],
                 max_ranges: int, window: Window | None) -> None:
        self.con, self.tables, self.row_key, self.max_ranges = con, list(tables), row_key, max_ranges
        self.window = window or Window({}, {}, {}, "")
        self.names = [t.name for t in self.tables]
        self.both = "+".join(self.names)

    def run(self, more_partitions: Iterable[TopicPartition]) -> Coverage:
        self._aggregate()
        figures = self._figures()
        partitions = sorted(set(figures) | set(more_partitions) | self.window.partitions)  # rows outside the window too
        claims = {t.name: t.claims(partitions) for t in self.tables}
        covered, findings = self._covered(partitions, claims)
        self._register_claims(claims, covered)
        findings += self._gaps()
        findings += self._in_two_tables()
        findings += self._written_again()
        for name in self.names:
            findings += self._repeated(name)
            findings += self._unclaimed(name)
        gaps: dict[TopicPartition, int] = {}
        duplicates: dict[TopicPartition, int] = {}
        for f in findings:
            counter = gaps if f.finding_class is FindingClass.GAP else duplicates
            counter[(f.topic, f.partition)] = counter.get((f.topic, f.partition), 0) + f.count
        rows = [PartitionCoverage(t, p, tuple(covered.get((t, p), [])),
                                  {n: figures.get((t, p), {}).get(n, (0, 0))[0] for n in self.names},
                                  {n: figures.get((t, p), {}).get(n, (0, 0))[1] for n in self.names},
                                  gaps.get((t, p), 0), duplicates.get((t, p), 0)) for t, p in partitions]
        order = {c: i for i, c in enumerate(FindingClass)}
        findings.sort(key=lambda f: (order[f.finding_class], f.topic, f.partition, f.table or ""))
        return Coverage(tuple(rows), tuple(findings))

    # -- step 1: one aggregation per table ---------------------------------------------------------------------
    def _aggregate(self) -> None:
        self.con.register("floors", self.window.floors_frame())
        selects = []
        for table in self.tables:
            source = f"rows_{table.name}"
            self.con.register(source, table.dataset(leave_out=self.window.leave_out(table)))
            keys = 'topic, "partition", "offset"'
            present = " AND ".join(f"s.{k} IS NOT NULL" for k in keys.split(", "))
            rows = (f'(SELECT s.* FROM {source} s LEFT JOIN floors f ON f.topic = s.topic '
                    f'WHERE {present} AND s."offset" >= coalesce(f.floor, 0))')
            head = f"SELECT topic, \"partition\"::BIGINT AS \"partition\", \"offset\", '{table.name}' AS tbl"
            if table.name not in MULTI_ROW_TABLES:
                selects.append(f"{head}, count(*)::BIGINT AS rows, (count(*) - 1)::BIGINT AS extra "
                               f"FROM {rows} GROUP BY {keys}")
                continue
            columns = table.columns()
            chosen = list(self.row_key) if all(c in columns for c in self.row_key) \
                else [c for c in columns if c not in ("topic", "partition", "offset")]
            group = ", ".join([keys, *(_quote(c) for c in chosen)])
            selects.append(f"{head}, sum(copies)::BIGINT AS rows, sum(copies - 1)::BIGINT AS extra "
                           f"FROM (SELECT {keys}, count(*) AS copies FROM {rows} GROUP BY {group}) GROUP BY {keys}")
        self.con.execute("CREATE OR REPLACE TEMP TABLE accounted AS " + " UNION ALL ".join(selects))

    def _figures(self) -> dict[TopicPartition, dict[str, tuple[int, int]]]:
        """Rows and distinct offsets per topic-partition and table."""
        found: dict[TopicPartition, dict[str, tuple[int, int]]] = {}
        for topic, partition, table, rows, offsets in self.con.execute(
                'SELECT topic, "partition", tbl, sum(rows), count(*) FROM accounted GROUP BY ALL').fetchall():
            found.setdefault((str(topic), int(partition)), {})[str(table)] = (int(rows), int(offsets))
        return found

    # -- the claims: what every table holds, and what one holds that the other does not -------------------------
    def _covered(self, partitions: list[TopicPartition], claims: dict[str, dict[TopicPartition, list[Interval]]]
                 ) -> tuple[dict[TopicPartition, list[Interval]], list[Finding]]:
        covered: dict[TopicPartition, list[Interval]] = {}
        findings: list[Finding] = []
        for tp in partitions:
            per_table = {name: claims[name][tp] for name in self.names}
            common = per_table[self.names[0]]
            for intervals in list(per_table.values())[1:]:
                common = _intersect(common, intervals)
            covered[tp] = common
            ends = [intervals[-1][1] for intervals in per_table.values() if intervals]
            settled = min(ends) if len(ends) == len(per_table) else 0
            for name, intervals in per_table.items():
                lacking = [piece for other, theirs in per_table.items() if other != name
                           for interval in theirs for piece in subtract_interval(interval, intervals)]
                below = merge_intervals(_clip(i, settled) for i in lacking)
                if below:
                    findings.append(Finding(
                        FindingClass.GAP, name, tp[0], tp[1], tuple(below[:self.max_ranges]), _length(below),
                        f"the log of {name} does not claim offsets another table's log claims, below the newest "
                        f"offset both hold ({settled}): the rows {name} should hold of them never came"))
        return covered, findings

    def _register_claims(self, claims: dict[str, dict[TopicPartition, list[Interval]]],
                         covered: dict[TopicPartition, list[Interval]]) -> None:
        def frame(rows: list[tuple[str, str, int, int, int]]) -> pa.Table:
            columns: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [()] * 5
            return pa.table({"tbl": pa.array(columns[0], pa.string()), "topic": pa.array(columns[1], pa.string()),
                             "partition": pa.array(columns[2], pa.int64()), "start": pa.array(columns[3], pa.int64()),
                             "end": pa.array(columns[4], pa.int64())})

        self.con.register("claims_arrow", frame([(name, t, p, s, e) for name, per_tp in claims.items()
                                                 for (t, p), intervals in per_tp.items() for s, e in intervals]))
        floor = self.window.floor
        self.con.register("covered_arrow", frame([("", t, p, max(s, floor(t)), e) for (t, p), intervals
                                                  in covered.items() for s, e in intervals if e > floor(t)]))
        self.con.execute("CREATE OR REPLACE TEMP TABLE claims AS SELECT * FROM claims_arrow")
        self.con.execute("CREATE OR REPLACE TEMP TABLE covered AS SELECT topic, \"partition\", start, \"end\" "
                         "FROM covered_arrow")

    # -- step 2: gaps with LAG ---------------------------------------------------------------------------------
    def _gaps(self) -> list[Finding]:
        query = """
            WITH present AS (SELECT DISTINCT topic, "partition", "offset" FROM accounted),
            inside AS (
                SELECT c.topic, c."partition", c.start, c."end", p."offset"
                FROM covered c JOIN present p ON p.topic = c.topic AND p."partition" = c."partition"
                                              AND p."offset" >= c.start AND p."offset" < c."end"),
            steps AS (
                SELECT topic, "partition", "offset",
                       lag("offset") OVER (PARTITION BY topic, "partition", start ORDER BY "offset") AS previous
                FROM inside),
            bounds AS (
                SELECT topic, "partition", start, "end", min("offset") AS first, max("offset") AS last
                FROM inside GROUP BY ALL),
            gaps AS (
                SELECT topic, "partition", previous + 1 AS lo, "offset" AS hi FROM steps WHERE "offset" - previous > 1
                UNION ALL SELECT topic, "partition", start, first FROM bounds WHERE first > start
                UNION ALL SELECT topic, "partition", last + 1, "end" FROM bounds WHERE last + 1 < "end"
                UNION ALL SELECT c.topic, c."partition", c.start, c."end" FROM covered c ANTI JOIN bounds b
                          ON b.topic = c.topic AND b."partition" = c."partition" AND b.start = c.start)
            SELECT topic, "partition", sum(hi - lo)::BIGINT, list([lo, hi] ORDER BY lo)[1:$limit]
            FROM gaps GROUP BY ALL ORDER BY ALL"""
        return [Finding(FindingClass.GAP, self.both, topic, partition, ranges, count,
                        f"claimed as committed by the log{'s' if len(self.names) > 1 else ''} of {self.both}, "
                        "but no table holds a row of these offsets")
                for topic, partition, count, ranges in self._ranges(query)]

    # -- step 3: duplicates as ranges --------------------------------------------------------------------------
    def _islands(self, offsets: str) -> str:
        """Ranges of consecutive offsets (first ``limit`` per topic-partition) of ``offsets``' rows
        (``topic, partition, offset, weight``), and the summed weight."""
        return f"""
            WITH o AS ({offsets}),
            numbered AS (SELECT *, "offset" - row_number() OVER (PARTITION BY topic, "partition" ORDER BY "offset")
                         AS island FROM o),
            islands AS (SELECT topic, "partition", min("offset") AS lo, max("offset") + 1 AS hi, sum(weight) AS n
                        FROM numbered GROUP BY topic, "partition", island)
            SELECT topic, "partition", sum(n)::BIGINT, list([lo, hi] ORDER BY lo)[1:$limit]
            FROM islands GROUP BY ALL ORDER BY ALL"""

    def _in_two_tables(self) -> list[Finding]:
        if len(self.names) < 2:
            return []
        query = self._islands('SELECT topic, "partition", "offset", 1 AS weight FROM accounted '
                              'GROUP BY ALL HAVING count(*) > 1')
        return [Finding(FindingClass.DUPLICATE, self.both, topic, partition, ranges, count,
                        f"offsets held by more than one of {self.both} (each offset belongs to one table)")
                for topic, partition, count, ranges in self._ranges(query)]

    def _written_again(self) -> list[Finding]:
        """Rows of the files written since the last validation at offsets below the window: offsets it checked,
        committed again."""
        findings = []
        for table in self.tables:
            written = self.window.written.get(table.name)
            if not written:
                continue
            source = f"written_{table.name}"
            self.con.register(source, table.dataset(leave_out=set(table.paths()) - written))
            query = self._islands(f"""SELECT s.topic, s."partition"::BIGINT AS "partition", s."offset", 1 AS weight
                                      FROM {source} s JOIN floors f ON f.topic = s.topic
                                      WHERE s."offset" < f.floor GROUP BY ALL""")
            findings += [Finding(FindingClass.DUPLICATE, table.name, topic, partition, ranges, count,
                                 f"offsets the last validation checked (validated at version "
                                 f"{self.window.since.get(table.name)}) committed again since")
                         for topic, partition, count, ranges in self._ranges(query)]
        return findings

    def _repeated(self, name: str) -> list[Finding]:
        query = self._islands(f"SELECT topic, \"partition\", \"offset\", extra AS weight FROM accounted "
                              f"WHERE tbl = '{name}' AND extra > 0")
        what = "offset and row key" if name in MULTI_ROW_TABLES else "offset"
        return [Finding(FindingClass.DUPLICATE, name, topic, partition, ranges, count,
                        f"{count:,} extra row(s): the same {what} more than once (committed twice)")
                for topic, partition, count, ranges in self._ranges(query)]

    def _unclaimed(self, name: str) -> list[Finding]:
        query = self._islands(f"""SELECT a.topic, a."partition", a."offset", 1 AS weight FROM accounted a
                                  WHERE a.tbl = '{name}' AND NOT EXISTS (
                                      SELECT 1 FROM claims c WHERE c.tbl = a.tbl AND c.topic = a.topic
                                      AND c."partition" = a."partition" AND a."offset" >= c.start
                                      AND a."offset" < c."end")""")
        return [Finding(FindingClass.DUPLICATE, name, topic, partition, ranges, count,
                        "rows of offsets the table's log does not claim as committed (written by another "
                        "writer, without their offsets): the stream writes these offsets again when it reaches them")
                for topic, partition, count, ranges in self._ranges(query)]

    def _ranges(self, query: str) -> list[tuple[str, int, int, tuple[Interval, ...]]]:
        rows = self.con.execute(query, {"limit": self.max_ranges}).fetchall()
        return [(str(topic), int(partition), int(count), tuple((int(lo), int(hi)) for lo, hi in ranges))
                for topic, partition, count, ranges in rows]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _intersect(left: list[Interval], right: list[Interval]) -> list[Interval]:
    pieces = [(max(a, c), min(b, d)) for a, b in left for c, d in right]
    return merge_intervals(p for p in pieces if p[0] < p[1])


def _clip(interval: Interval, below: int) -> Interval:
    return interval[0], min(interval[1], below)


def _length(intervals: Iterable[Interval]) -> int:
    return sum(e - s for s, e in intervals)

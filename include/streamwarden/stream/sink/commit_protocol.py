"""Exactly-once commit of a micro-batch's Parquet files, keyed by Kafka offset ranges (Spark-agnostic).

Layout under ``output_root``::

    <table>/topic=../date=../hour=../part-<key>-<NNNNN>.<compression>.parquet   final files only
    <table>/_manifests/<sequence:010d>-<key>.json                               one per committed batch
    _staging/<table>/<key>/                                                     where Spark writes a batch
    _orphans/<table>/...                                                     files no manifest claims

Everything that is not final data starts with ``_`` or lies outside the table folder, so Spark,
``pyarrow.dataset`` and a DuckDB ``**/*.parquet`` glob on the table see final files only.

Protocol for one batch (``key`` = first 16 hex of sha256 over the canonical JSON of the planned ranges):

0. ``recover()`` at job start: a staging folder with an intent is rolled forward (steps 4-6), one
   without is deleted; manifests are loaded and checked (no overlap, valid bodies, every listed file
   present); Parquet files no manifest lists are moved to ``_orphans``.
1. ``plan()`` subtracts the committed offsets from the planned ranges. Fully committed: the job skips the
   batch. Otherwise it filters the committed sub-intervals out (:meth:`BatchPlan.exclusion_predicate`) and
   writes the rest with ``df.write.partitionBy(...).parquet(plan.staging_dir)``.
2. ``commit()`` lists the staged Parquet files (sorted; ``_SUCCESS``, ``.crc`` and other hidden files are
   ignored; zero-row files dropped), names each ``<same hive dir>/part-<key>-<NNNNN>.<compression>.parquet``
   and reads its row count from the footer.
3. Writes ``<staging>/_intent.json`` atomically: the moves and the full manifest body. Roll-forward point.
4. ``os.replace`` each staged file to its final name, then fsyncs the folders.
5. Writes the manifest atomically (``ranges``: the planned ranges; ``covers``: the sub-intervals this batch
   newly commits, i.e. planned minus already committed).
6. Removes the staging folder; the covered intervals join the in-memory index.

Test-only kill points (:func:`streamwarden.testing.faults.chaos_point`): ``before_intent``, ``after_intent``,
``mid_move`` (after the first file), ``after_move``, ``after_manifest``; the last three are also passed
on roll-forward.

Guarantees:

* At rest (no commit running), a reader that lists the table folder sees every committed offset exactly
  once: no duplicate, no missing offset.
* A crash (``kill -9``) at any step is rolled back (before step 3) or forward (from step 3) by
  ``recover()``, which is idempotent.
* Offsets covered by a manifest are never written again, also after the checkpoint was deleted or the
  job restarted from explicit offsets: deduplication is by offset range, not by batch id.

Limits:

* A reader listing the folder *during* step 4 can see part of one batch (never a duplicate); the rest
  appears when step 4 ends or, after a crash, on recovery.
* Needs POSIX rename semantics (atomic ``os.replace`` within one filesystem, durable after fsync of the
  folder): a local disk or similar, not an object store. One writer per table (the checkpoint lease).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json import JSONDecodeError
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from streamwarden.atomic import fsync_dir, read_json, write_json_atomic
from streamwarden.failures import IntegrityError, StreamwardenError
from streamwarden.stream.sink.ranges import (
    IntervalIndex,
    OffsetRanges,
    batch_key,
    canonical_ranges,
    committed_within,
    exclusion_predicate,
    flatten,
    index_from_json,
    index_from_ranges,
    index_to_json,
    overlap,
    ranges_to_json,
    uncommitted,
    union,
)
from streamwarden.testing.faults import chaos_point

MANIFESTS = "_manifests"
STAGING = "_staging"
ORPHANS = "_orphans"
INTENT_FILE = "_intent.json"
FORMAT_VERSION = 1
_FINAL_NAME = re.compile(r"^part-(?P<key>[0-9a-f]{16})-\d{5}(\.[a-z0-9]+)?\.parquet$")
_MANIFEST_NAME = re.compile(r"^(?P<sequence>\d{10})-(?P<key>[0-9a-f]{16})\.json$")
_TABLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class CommitProtocolError(StreamwardenError):
    """Base of commit protocol errors; on its own a BUG (the protocol was used wrongly)."""


class OverlappingCommitError(CommitProtocolError, IntegrityError):
    """A batch would commit (or a manifest claims) offsets that another manifest already covers."""


class ManifestCorruptError(CommitProtocolError, IntegrityError):
    """A manifest or intent file is unreadable or breaks an invariant."""


class StagingMismatchError(CommitProtocolError, IntegrityError):
    """An intent names a file that exists neither in staging nor at its final place."""


class CommittedFileMissingError(CommitProtocolError, IntegrityError):
    """A file listed by a manifest is gone from the table: committed rows were lost."""


def _is_hidden(relative: PurePosixPath) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.parts)


def visible_parquet_files(table_root: Path) -> set[str]:
    """Parquet files a listing reader sees (no ``_``/``.``-prefixed part), relative POSIX paths."""
    if not table_root.is_dir():
        return set()
    relatives = (PurePosixPath(p.relative_to(table_root).as_posix()) for p in table_root.rglob("*.parquet"))
    return {str(r) for r in relatives if not _is_hidden(r)}


@dataclass(frozen=True)
class CommittedFile:
    """One final file of a batch, its path relative to the table root (POSIX form)."""

    path: str
    rows: int


@dataclass(frozen=True)
class Manifest:
    """What a committed batch left behind; the source of truth for which offsets are in the table."""

    key: str
    sequence: int
    batch_id: int
    table: str
    ranges: OffsetRanges
    covers: IntervalIndex
    files: tuple[CommittedFile, ...]
    committed_at: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """File name in ``_manifests``; sorts in commit order."""
        return f"{self.sequence:010d}-{self.key}.json"

    @property
    def rows(self) -> int:
        """Total rows in the batch's files."""
        return sum(f.rows for f in self.files)

    def to_json(self) -> dict[str, Any]:
        """The manifest body as written to disk."""
        return {
            "version": FORMAT_VERSION, "key": self.key, "sequence": self.sequence, "batch_id": self.batch_id,
            "table": self.table, "ranges": ranges_to_json(self.ranges), "covers": index_to_json(self.covers),
            "files": [{"path": f.path, "rows": f.rows} for f in self.files], "rows": self.rows,
            "committed_at": self.committed_at, "extra": self.extra,
        }

    @classmethod
    def from_json(cls, document: Any, source: str) -> Manifest:
        """Parse and check a manifest body; :class:`ManifestCorruptError` names ``source`` on any flaw."""
        try:
            manifest = cls(
                key=str(document["key"]), sequence=int(document["sequence"]),
                batch_id=int(document["batch_id"]), table=str(document["table"]),
                ranges=canonical_ranges(document["ranges"]), covers=index_from_json(document["covers"]),
                files=tuple(CommittedFile(str(f["path"]), int(f["rows"])) for f in document["files"]),
                committed_at=str(document["committed_at"]), extra=dict(document["extra"]),
            )
            problem = manifest._problem(document)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problem = f"malformed body ({type(exc).__name__}: {exc})"
        if problem:
            raise ManifestCorruptError(f"manifest {source}: {problem}", details={"source": source})
        return manifest

    def _problem(self, document: dict[str, Any]) -> str | None:
        if document.get("version") != FORMAT_VERSION:
            return f"unsupported version {document.get('version')!r}"
        if batch_key(self.ranges) != self.key:
            return f"key {self.key} does not match its ranges"
        if document.get("rows") != self.rows or any(f.rows < 0 for f in self.files):
            return f"rows {document.get('rows')!r} differ from the sum over files {self.rows}"
        if not self.covers or overlap(self.covers, index_from_ranges(self.ranges)) != self.covers:
            return "covers is empty or not inside ranges"
        if len({f.path for f in self.files}) != len(self.files):
            return "a file is listed twice"
        for f in self.files:
            path = PurePosixPath(f.path)
            match = _FINAL_NAME.match(path.name)
            if path.is_absolute() or ".." in path.parts or _is_hidden(path) or not match \
                    or match.group("key") != self.key:
                return f"file path {f.path!r} is not a final file of this batch"
        return None


def load_manifests(table_root: Path) -> list[Manifest]:
    """All committed manifests in commit order, checked one by one and against each other.

    Raises :class:`ManifestCorruptError` (unreadable, invalid, name and body disagree, key or sequence
    repeated) or :class:`OverlappingCommitError` (two manifests cover the same offset).
    """
    folder = table_root / MANIFESTS
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    manifests: list[Manifest] = []
    index: IntervalIndex = {}
    keys: set[str] = set()
    for path in paths:
        manifest = _read_manifest(path)
        if manifest.table != table_root.name:
            raise ManifestCorruptError(f"manifest {path.name}: belongs to table {manifest.table!r}")
        if manifest.key in keys or (manifests and manifest.sequence == manifests[-1].sequence):
            raise ManifestCorruptError(f"manifest {path.name}: key or sequence committed twice")
        _check_disjoint(manifest.covers, index, f"manifest {path.name}")
        index = union(index, manifest.covers)
        keys.add(manifest.key)
        manifests.append(manifest)
    return manifests


def _read_manifest(path: Path) -> Manifest:
    try:
        document = read_json(path)
    except (JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestCorruptError(f"manifest {path.name}: not JSON ({exc})") from exc
    manifest = Manifest.from_json(document, path.name)
    match = _MANIFEST_NAME.match(path.name)
    if not match or match.group("key") != manifest.key or int(match.group("sequence")) != manifest.sequence:
        raise ManifestCorruptError(f"manifest {path.name}: file name does not match key/sequence in the body")
    return manifest


def _check_disjoint(covers: IntervalIndex, index: IntervalIndex, what: str) -> None:
    """Raise :class:`OverlappingCommitError` naming ``what`` when ``covers`` meets ``index``."""
    common = flatten(overlap(covers, index))
    if common:
        first = common[0]
        raise OverlappingCommitError(
            f"{what} covers offsets already committed: [{first.start}, {first.end}) "
            f"and {len(common) - 1} more interval(s)",
            topic=first.topic, partition=first.partition, offset=first.start,
            details={"overlap": [list(i) for i in common[:20]]},
        )


@dataclass(frozen=True)
class BatchPlan:
    """What the job needs to write one batch; from :meth:`CommitProtocol.plan`."""

    key: str
    batch_id: int
    ranges: OffsetRanges
    already_committed: IntervalIndex
    to_commit: IntervalIndex
    staging_dir: Path

    @property
    def fully_committed(self) -> bool:
        """Every planned offset is already committed: skip the batch."""
        return not self.to_commit

    def exclusion_predicate(self) -> str | None:
        """Spark SQL filter dropping the already committed rows; ``None`` when nothing is committed."""
        return exclusion_predicate(self.already_committed)


@dataclass(frozen=True)
class Intent:
    """Step 3's record: enough to finish the commit after a crash."""

    manifest: Manifest
    sources: tuple[str, ...]  # staged paths relative to the staging folder, aligned with manifest.files

    def to_json(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "sources": list(self.sources), "manifest": self.manifest.to_json()}

    @classmethod
    def read(cls, staging: Path) -> Intent | None:
        """The intent in ``staging``, ``None`` if there is none (it is written atomically: all or nothing)."""
        source = f"{staging.name}/{INTENT_FILE}"
        try:
            document = read_json(staging / INTENT_FILE)
            if document is None:
                return None
            sources = tuple(str(s) for s in document["sources"])
            body = document["manifest"]
        except (JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
            raise ManifestCorruptError(f"intent {source}: unreadable ({exc})") from exc
        manifest = Manifest.from_json(body, source)
        if len(sources) != len(manifest.files) or manifest.key != staging.name:
            raise ManifestCorruptError(f"intent {source}: sources do not match the manifest")
        return cls(manifest, sources)


@dataclass(frozen=True)
class RecoveryReport:
    """What :meth:`CommitProtocol.recover` found and did."""

    rolled_forward: list[str]
    rolled_back: list[str]
    orphaned: list[str]
    foreign_files: list[str]
    manifests: int


class CommitProtocol:
    """Exactly-once commits of staged Parquet batches into one table (see the module docstring).

    One instance per table and writer; call :meth:`recover` once before :meth:`plan`/:meth:`commit`.
    """

    def __init__(self, output_root: Path, table: str, compression: str = "zstd") -> None:
        if not _TABLE_NAME.match(table):
            raise ValueError(f"table name {table!r} must match {_TABLE_NAME.pattern}")
        if not re.fullmatch(r"[a-z0-9]+", compression):
            raise ValueError(f"compression {compression!r} must be a lower-case codec name")
        self.table = table
        self.table_root = output_root / table
        self.staging_root = output_root / STAGING / table
        self.orphans_root = output_root / ORPHANS / table
        self._suffix = ".parquet" if compression == "none" else f".{compression}.parquet"
        self._manifests: dict[str, Manifest] = {}
        self._index: IntervalIndex = {}
        self._next_sequence = 0
        self._recovered = False

    # -- public API -------------------------------------------------------------------------------------
    def recover(self) -> RecoveryReport:
        """Finish or undo interrupted commits, load and check the manifests, set aside unclaimed files."""
        forward, back = self._resolve_staging()
        (self.table_root / MANIFESTS).mkdir(parents=True, exist_ok=True)
        fsync_dir(self.table_root)
        self._manifests, self._index, self._next_sequence = {}, {}, 0
        for manifest in load_manifests(self.table_root):
            self._register(manifest)
        orphaned, foreign = self._sweep_table()
        self._recovered = True
        return RecoveryReport(forward, back, orphaned, foreign, len(self._manifests))

    def plan(self, ranges: OffsetRanges, batch_id: int) -> BatchPlan:
        """Plan a batch: its key, what is already committed, and a staging folder that does not exist yet.

        The staging folder's parent exists, the folder itself not (so Spark's default ``errorifexists``
        save mode works); a leftover of an earlier attempt is rolled forward (it had an intent) or deleted.
        """
        self._require_recovered()
        canonical = canonical_ranges(ranges)
        key = batch_key(canonical)
        staging = self.staging_root / key
        if staging.exists():
            self._resolve_leftover(staging)
        self.staging_root.mkdir(parents=True, exist_ok=True)
        return BatchPlan(key, batch_id, canonical, committed_within(canonical, self._index),
                         uncommitted(canonical, self._index), staging)

    def commit(self, plan: BatchPlan, extra: dict[str, Any] | None = None) -> Manifest:
        """Make the staged files of ``plan`` visible under final names and record the manifest."""
        self._require_recovered()
        if plan.fully_committed:
            raise CommitProtocolError(f"batch {plan.key} is fully committed already; the job must skip it")
        _check_disjoint(plan.to_commit, self._index, f"batch {plan.key} (stale plan)")
        if not plan.staging_dir.is_dir():
            raise CommitProtocolError(f"staging folder {plan.staging_dir} is missing: nothing was written")
        staged = self._staged_files(plan.staging_dir)                              # step 1
        intent = self._build_intent(plan, staged, extra or {})                     # step 2
        chaos_point("before_intent")
        write_json_atomic(plan.staging_dir / INTENT_FILE, intent.to_json())      # step 3
        chaos_point("after_intent")
        self._apply(intent, plan.staging_dir)                                      # steps 4-6
        self._register(intent.manifest)
        return intent.manifest

    def committed_index(self) -> IntervalIndex:
        """Committed offsets per topic-partition, merged (a copy)."""
        return {t: {p: list(iv) for p, iv in parts.items()} for t, parts in self._index.items()}

    def manifests(self) -> list[Manifest]:
        """Committed manifests in commit order."""
        return sorted(self._manifests.values(), key=lambda m: m.sequence)

    # -- steps ----------------------------------------------------------------------------------------------
    def _staged_files(self, staging: Path) -> list[PurePosixPath]:
        """Step 1: the staged Parquet files relative to ``staging``, sorted; hidden files are skipped."""
        found: list[PurePosixPath] = []
        for path in staging.rglob("*"):
            relative = PurePosixPath(path.relative_to(staging).as_posix())
            if _is_hidden(relative) or path.is_dir():
                continue
            if path.suffix != ".parquet" or any("=" not in part for part in relative.parts[:-1]):
                raise CommitProtocolError(f"unexpected file in staging {staging.name}: {relative}")
            found.append(relative)
        return sorted(found, key=str)

    def _build_intent(self, plan: BatchPlan, staged: list[PurePosixPath], extra: dict[str, Any]) -> Intent:
        """Step 2: final names and footer row counts; zero-row files are left behind in staging."""
        sources: list[str] = []
        files: list[CommittedFile] = []
        for relative in staged:
            rows = pq.read_metadata(plan.staging_dir / relative).num_rows
            if rows:
                final = relative.parent / f"part-{plan.key}-{len(files):05d}{self._suffix}"
                sources.append(str(relative))
                files.append(CommittedFile(str(final), rows))
        manifest = Manifest(plan.key, self._next_sequence, plan.batch_id, self.table, plan.ranges,
                            plan.to_commit, tuple(files), datetime.now(UTC).isoformat(), extra)
        self._next_sequence += 1
        return Intent(manifest, tuple(sources))

    def _apply(self, intent: Intent, staging: Path) -> None:
        """Steps 4-6, idempotent: move what is still staged, write the manifest if missing, drop staging."""
        touched: set[Path] = set()
        for number, (source, final) in enumerate(zip(intent.sources, intent.manifest.files, strict=True)):
            src, dst = staging / source, self.table_root / final.path
            if src.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
            elif not dst.exists():
                raise StagingMismatchError(
                    f"batch {intent.manifest.key}: {source} is neither staged nor at {final.path}",
                    details={"key": intent.manifest.key, "source": source, "final": final.path})
            touched.update(self._folders_up_to_root(dst.parent))
            if number == 0:
                chaos_point("mid_move")
        for folder in sorted(touched, key=lambda p: len(p.parts), reverse=True):
            fsync_dir(folder)
        chaos_point("after_move")
        manifest_path = self.table_root / MANIFESTS / intent.manifest.name
        if not manifest_path.exists():
            write_json_atomic(manifest_path, intent.manifest.to_json())
        chaos_point("after_manifest")
        shutil.rmtree(staging)
        fsync_dir(staging.parent)

    # -- recovery -----------------------------------------------------------------------------------------
    def _resolve_staging(self) -> tuple[list[str], list[str]]:
        forward: list[str] = []
        back: list[str] = []
        if not self.staging_root.is_dir():
            return forward, back
        for staging in sorted(self.staging_root.iterdir()):
            if not staging.is_dir():
                staging.unlink()
            elif self._finish_or_discard(staging):
                forward.append(staging.name)
            else:
                back.append(staging.name)
        fsync_dir(self.staging_root)
        return forward, back

    def _finish_or_discard(self, staging: Path) -> Manifest | None:
        """Roll ``staging`` forward if it holds an intent (returning its manifest), else delete it."""
        intent = Intent.read(staging)
        if intent is None:
            shutil.rmtree(staging)
            return None
        self._apply(intent, staging)
        return intent.manifest

    def _resolve_leftover(self, staging: Path) -> None:
        manifest = self._finish_or_discard(staging)
        if manifest is not None:
            self._register(manifest)

    def _sweep_table(self) -> tuple[list[str], list[str]]:
        """Check every listed file exists; set aside our files no manifest lists; report foreign ones."""
        listed = {f.path for m in self._manifests.values() for f in m.files}
        present = visible_parquet_files(self.table_root)
        lost = sorted(listed - present)
        if lost:
            raise CommittedFileMissingError(
                f"{len(lost)} committed file(s) missing from the table, e.g. {lost[0]}",
                details={"missing": lost[:20]})
        unclaimed = sorted(present - listed)
        ours = [p for p in unclaimed if _FINAL_NAME.match(PurePosixPath(p).name)]
        folder = self.orphans_root / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        for name in ours:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.table_root / name, folder / name)
        return ours, [p for p in unclaimed if not _FINAL_NAME.match(PurePosixPath(p).name)]

    # -- bookkeeping ----------------------------------------------------------------------------------------
    def _register(self, manifest: Manifest) -> None:
        if self._manifests.get(manifest.key) == manifest:
            return
        _check_disjoint(manifest.covers, self._index, f"manifest {manifest.name}")
        self._index = union(self._index, manifest.covers)
        self._manifests[manifest.key] = manifest
        self._next_sequence = max(self._next_sequence, manifest.sequence + 1)

    def _folders_up_to_root(self, folder: Path) -> list[Path]:
        chain = [folder, *folder.parents]
        return chain[: chain.index(self.table_root) + 1]

    def _require_recovered(self) -> None:
        if not self._recovered:
            raise CommitProtocolError("call recover() before plan() or commit()")

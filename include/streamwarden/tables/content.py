"""Each data file's content hash: taken when the file is committed, kept beside the Delta log, checked later.

A byte changed inside a data file at the same size (a bit flipped on a disk, a hand edit, a bad copy) passes
every check of sizes, offsets and counts, and a compaction would copy it faithfully into a new file. So each
file's SHA-256 is taken by whoever commits it and checked by whoever relies on it:

- The stream's sink hashes every file of a batch and puts the hashes in the batch's own commit info
  (:data:`HASHES_KEY`: a JSON object of path -> ``sha256:<hex>``), atomic with the files' add actions.
- Commit infos are not in checkpoints, and the log's clean-up deletes old commit files, so maintenance folds
  them into a *manifest* (:func:`fold_manifest`), ``_streamwarden/hashes/<version>.json`` at the table's root
  (a full vacuum leaves a top-level ``_`` folder alone), before it cleans the log, and records there the hashes
  of the files its compaction wrote (delta-rs's compaction commit cannot carry them: its files are named by the
  commit). A manifest keeps every hash whose file is still in storage, so a restore to an older version, which
  adds back files no longer live, still finds theirs.
- What a file should hash to (:func:`recorded_hashes`) is the newest manifest and every commit after it.
  Validation checks live files against it (:func:`check_content`), compaction the files it is about to rewrite.

delta-rs's Python API cannot write an add action's ``tags`` (docs/research/content-hashes.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

from streamwarden.tables.commits import commit_info
from streamwarden.tables.location import TableLocation

log = logging.getLogger("streamwarden.tables.content")
HASHES_KEY = "streamwarden.file_hashes"
"""The commit-info key of the hashes of the files a commit adds (a JSON object, path -> digest)."""
MANIFEST_FOLDER = "_streamwarden/hashes"
ALGORITHM = "sha256"
KEPT_MANIFESTS = 2  # the newest and the one before it: a reader that listed just before a fold still finds its own
_CHUNK = 1 << 20


def file_digest(store: fs.FileSystem, path: str) -> str:
    """``sha256:<hex>`` of the file at ``path`` on ``store``, read in 1 MiB pieces (``sha256sum`` agrees)."""
    digest = hashlib.sha256()
    with store.open_input_stream(path) as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return f"{ALGORITHM}:{digest.hexdigest()}"


def hashes_metadata(hashes: Mapping[str, str]) -> dict[str, str]:
    """The commit-info entry recording ``hashes`` (paths relative to the table's folder)."""
    return {HASHES_KEY: json.dumps(dict(sorted(hashes.items())), separators=(",", ":"))}


@dataclass(frozen=True)
class Recorded:
    """What each data file of a table should hash to, as of one version."""

    hashes: dict[str, str]
    version: int
    manifest_version: int | None  # the manifest read first (None: none yet; every commit in the log was read)
    commits_read: int  # commit files read after it


def recorded_hashes(location: TableLocation, version: int) -> Recorded:
    """The hashes recorded up to ``version``: the newest manifest at or before it, then the commits after it (read
    by number after a manifest: the log of a long-lived table holds thousands of commit files, and listing them
    costs a request per thousand on an object store; the log is listed only when there is no manifest yet)."""
    store, base = location.filesystem()
    with location.reaching():
        older = [number for number in _manifest_versions(store, base) if number <= version]
        manifest = max(older) if older else None
        hashes: dict[str, str] = {} if manifest is None else _read_manifest(store, base, manifest)
        commits = range(manifest + 1, version + 1) if manifest is not None else \
            [number for number in _commit_versions(store, base) if number <= version]
    for number in commits:
        info = commit_info(location, number)
        if info is not None and HASHES_KEY in info:
            hashes.update(_hashes_of(info[HASHES_KEY]))
    return Recorded(hashes, version, manifest, len(commits))


def fold_manifest(location: TableLocation, version: int, added: Mapping[str, str] | None = None) -> str:
    """Write the manifest of ``version``: the hashes recorded up to it and ``added`` (a compaction's new files),
    each kept while its file is in storage; drop all but the newest :data:`KEPT_MANIFESTS`. Its path."""
    recorded = recorded_hashes(location, version)
    store, base = location.filesystem()
    with location.reaching():
        present = set(data_files(store, base))
        hashes = {path: digest for path, digest in {**recorded.hashes, **(added or {})}.items() if path in present}
        folder = f"{base}/{MANIFEST_FOLDER}"
        if store.type_name == "local":  # on an object store a key makes its prefix; a folder marker for the table's
            store.create_dir(folder, recursive=True)  # own prefix would be a file that vacuum lists and deletes
        target = f"{folder}/{version:020d}.json"
        staging = f"{folder}/.{uuid.uuid4().hex}.tmp"  # a reader lists only whole manifests
        with store.open_output_stream(staging) as stream:
            stream.write(json.dumps({"version": version, "algorithm": ALGORITHM, "files": hashes},
                                    sort_keys=True).encode())
        store.move(staging, target)
        for old in _manifest_versions(store, base)[:-KEPT_MANIFESTS]:
            store.delete_file(f"{folder}/{old:020d}.json")
    log.info("%s: content hashes of %d files folded into %s (%d commits read after manifest %s)", location.name,
             len(hashes), target, recorded.commits_read, recorded.manifest_version)
    return target


def data_files(store: fs.FileSystem, base: str) -> dict[str, int]:
    """Every file under the table's folder outside ``_``/``.`` folders at its top (the log, the manifests), by
    path relative to it, with its size."""
    prefix = base.rstrip("/") + "/"
    listed = store.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True))
    found = {}
    for info in listed:
        relative = info.path.removeprefix(prefix)
        if info.type == fs.FileType.File and not relative.startswith(("_", ".")):
            found[relative] = info.size
    return found


@dataclass(frozen=True)
class ContentProblem:
    """A data file whose bytes are not what was recorded when it was committed."""

    path: str
    expected: str
    found: str


@dataclass(frozen=True)
class UnreadableFile:
    """A data file storage lists at its size but will not give back (denied, moved to an archive tier by a
    lifecycle rule, an I/O error), while the store itself answers."""

    path: str
    reason: str


@dataclass(frozen=True)
class ContentCheck:
    """What a content check read and found."""

    problems: tuple[ContentProblem, ...]
    checked: int  # files hashed
    checked_bytes: int
    unrecorded: tuple[str, ...]  # files checked for which no hash was recorded (committed before hashing)
    unreadable: tuple[UnreadableFile, ...] = ()


def check_content(location: TableLocation, files: Mapping[str, int], recorded: Recorded) -> ContentCheck:
    """Hash each of ``files`` (path relative to the table -> size) and compare with ``recorded`` (a file with no
    recorded hash is read all the same, unless the caller left it out). A file that cannot be read while the store
    answers is unreadable; a store that does not answer is an ENVIRONMENT failure
    (:meth:`TableLocation.reaching`)."""
    store, base = location.filesystem()
    problems, unrecorded, unreadable = [], [], []
    checked = checked_bytes = 0
    with location.reaching():
        for path, size in files.items():
            expected = recorded.hashes.get(path)
            try:  # a file without a recorded hash is still read whole: it can be read, or it is unreadable
                found = file_digest(store, f"{base}/{path}")
            except OSError as exc:
                store.get_file_info(base)  # the store itself: when it does not answer either, that is the failure
                unreadable.append(UnreadableFile(path, " ".join(str(exc).split())[:300]))
                continue
            if expected is None:
                unrecorded.append(path)
                continue
            checked += 1
            checked_bytes += size
            if found != expected:
                problems.append(ContentProblem(path, expected, found))
    return ContentCheck(tuple(problems), checked, checked_bytes, tuple(unrecorded), tuple(unreadable))


def _hashes_of(value: object) -> dict[str, str]:
    """A recorded path -> digest object (a JSON string in a commit info, an object in a manifest)."""
    parsed = json.loads(value) if isinstance(value, str) else value
    if not isinstance(parsed, dict):
        raise ValueError(f"content hashes must be a JSON object of path -> digest, not {type(parsed).__name__}")
    return {str(path): str(digest) for path, digest in parsed.items()}


def _read_manifest(store: fs.FileSystem, base: str, version: int) -> dict[str, str]:
    with store.open_input_stream(f"{base}/{MANIFEST_FOLDER}/{version:020d}.json") as stream:
        document = json.loads(stream.read().decode())
    return _hashes_of(document["files"])


def _manifest_versions(store: fs.FileSystem, base: str) -> list[int]:
    return _numbered(store, f"{base}/{MANIFEST_FOLDER}", ".json")


def _commit_versions(store: fs.FileSystem, base: str) -> list[int]:
    return _numbered(store, f"{base}/_delta_log", ".json")


def _numbered(store: fs.FileSystem, folder: str, suffix: str) -> list[int]:
    """The versions of the ``<20 digits><suffix>`` files in ``folder``, ascending."""
    listed = store.get_file_info(fs.FileSelector(folder, allow_not_found=True))
    names = (PurePosixPath(info.path).name for info in listed if info.type == fs.FileType.File)
    return sorted(int(name[:20]) for name in names
                  if len(name) == 20 + len(suffix) and name.endswith(suffix) and name[:20].isdigit())

"""``last_failure.json``: the failure document the job writes as it dies, and the warden and ``status`` read."""

from __future__ import annotations

from pathlib import Path

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import FailureDocument
from streamwarden.secrets import redact


def write_failure(path: Path, document: FailureDocument) -> None:
    """Write ``last_failure.json`` atomically (secrets masked by :meth:`FailureDocument.to_json`)."""
    write_json_atomic(path, document.to_json())


def read_failure(path: Path) -> FailureDocument | None:
    """The last recorded failure, if any, with every secret masked (whoever wrote it): the verdict, the
    alerts and ``status`` are built from it."""
    document = read_json(path)
    return None if document is None else FailureDocument.from_json(redact(document))

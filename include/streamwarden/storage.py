"""Where the output tables live: a local folder or a folder on an object store, and its name for each user.

``STREAMWARDEN_OUTPUT_ROOT`` is a local path (or ``file://`` URI) or an object-store URI. Everything reaches
the folder through delta-rs and pyarrow (the executors write the files with pyarrow too, with no Hadoop
connector), so the only renaming is Spark's spelling of S3 given by habit:

- ``s3://bucket/out`` or ``s3a://bucket/out``: ``s3://bucket/out``;
- ``gs://bucket/out``;
- ``abfss://container@account.dfs.core.windows.net/out``;
- ``az://container/out`` (the account in the storage options).

Example::

    >>> root = parse_output_root("s3a://lake/streamwarden/")
    >>> str(root / "session_rows"), (root / "session_rows").delta_uri
    ('s3a://lake/streamwarden/session_rows', 's3://lake/streamwarden/session_rows')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

Family = Literal["s3", "gcs", "azure"]
SCHEMES: dict[str, Family] = {"s3": "s3", "s3a": "s3", "gs": "gcs", "az": "azure", "abfss": "azure"}
"""The object-store schemes an output root may have, and the store each one names."""
ALLOWED = "a local path, file://, s3://, s3a://, gs://, az:// or abfss://"
AZURE_ACCOUNT_KEYS = ("azure_storage_account_name", "account_name")
"""Storage option keys (any case) that name the Azure account of an ``az://`` root."""
_CONTAINER = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_SCHEME_TYPO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9]*):")
_AZURE_DFS_HOST = re.compile(r"^(?P<account>[a-z0-9]{3,24})\.dfs\.core\.windows\.net$")


@dataclass(frozen=True)
class StoreUri:
    """A folder on an object store: ``scheme://authority/key``.

    ``authority`` is the bucket (S3, GCS), the container (``az``) or ``container@host`` (``abfss``);
    ``key`` is the folder inside it, without leading or trailing ``/`` (empty: the bucket itself).
    """

    scheme: str
    authority: str
    key: str = ""

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}/{self.key}" if self.key else f"{self.scheme}://{self.authority}"

    def __truediv__(self, name: str) -> StoreUri:
        return StoreUri(self.scheme, self.authority, f"{self.key}/{name}" if self.key else name)

    @property
    def family(self) -> Family:
        return SCHEMES[self.scheme]

    @property
    def container(self) -> str:
        """The bucket or container, without an ``abfss`` host."""
        return self.authority.partition("@")[0]

    @property
    def delta_uri(self) -> str:
        """The URI delta-rs (object_store) opens: Spark's ``s3a`` is ``s3`` there."""
        return str(StoreUri("s3", self.authority, self.key)) if self.scheme == "s3a" else str(self)


def azure_account(storage_options: Mapping[str, str]) -> str | None:
    """The Azure account named in the storage options, if any."""
    lowered = {key.lower(): value for key, value in storage_options.items()}
    return next((lowered[key] for key in AZURE_ACCOUNT_KEYS if lowered.get(key)), None)


def parse_output_root(text: str) -> Path | StoreUri:
    """A local folder (plain path or ``file://``) or an object-store folder; ``ValueError`` saying why not.

    The message never repeats a password given in the URI (credentials belong in the storage options).
    """
    if "://" not in text:
        if (typo := _SCHEME_TYPO.match(text)) and typo["scheme"].lower() in {*SCHEMES, "file"}:
            raise ValueError(f"{typo['scheme']}: must be followed by //, as in {typo['scheme']}://<bucket>/<folder>")
        return Path(text)
    parts = urlsplit(text.strip())
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError("a file:// URI names a local folder: file:///absolute/path (no host)")
        return Path(unquote(parts.path))
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; allowed: {ALLOWED}")
    if parts.password is not None:
        raise ValueError("credentials do not belong in the URI: give them in STREAMWARDEN_STORAGE_OPTIONS")
    if parts.query or parts.fragment:
        raise ValueError("an output root has no query (?) or fragment (#)")
    container, at, host = parts.netloc.partition("@")
    if not container:
        raise ValueError(f"{scheme}:// needs a bucket or container: {scheme}://<bucket>/<folder>")
    if not _CONTAINER.match(container):
        raise ValueError(f"{container!r} is not a bucket or container name (3-222 of a-z 0-9 . _ -, starting "
                         "and ending with a letter or digit)")
    if scheme == "abfss" and not (at and _AZURE_DFS_HOST.match(host)):
        raise ValueError("abfss:// needs the account: abfss://<container>@<account>.dfs.core.windows.net/<folder>")
    if scheme != "abfss" and at:
        raise ValueError(f"{scheme}:// takes no user or account before the bucket: {scheme}://<bucket>/<folder>")
    segments = [segment for segment in parts.path.split("/") if segment]
    if any(segment in {".", ".."} for segment in segments):
        raise ValueError("the folder must not contain . or .. segments")
    return StoreUri(scheme, parts.netloc, "/".join(segments))

"""The pyarrow filesystem that reaches an output root, built from the storage options delta-rs is given.

The sink lists and reads the files Spark wrote, and readers read a table's files, through pyarrow's own
filesystems (delta-rs's filesystem object can abort the interpreter at exit: docs/delta-rs-behaviour.md).
Each store takes the delta-rs (object_store) option keys it understands, in any case and under their
usual aliases:

- S3: access key, secret key, session token, region, endpoint (``http://`` needs ``aws_allow_http``),
  virtual-hosted-style requests, ``aws_skip_signature`` (anonymous); without keys, AWS's default chain
  (environment, config files, instance metadata);
- Azure: account name (or the ``abfss://`` host), account key, SAS token, client id/secret/tenant;
  without them, Azure's default credential;
- GCS: Google's default credentials (``GOOGLE_APPLICATION_CREDENTIALS``, workload identity); a key given
  only in the storage options reaches delta-rs, not pyarrow.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from pyarrow import fs  # type: ignore[import-untyped, unused-ignore]

from streamwarden.failures import ConfigError
from streamwarden.storage import StoreUri, azure_account

_S3_KEYS = {
    "access_key": ("aws_access_key_id", "access_key_id"),
    "secret_key": ("aws_secret_access_key", "secret_access_key"),
    "session_token": ("aws_session_token", "session_token", "aws_token", "token"),
    "region": ("aws_region", "region", "aws_default_region"),
}
_S3_ENDPOINT = ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
_S3_ALLOW_HTTP = ("aws_allow_http", "allow_http")
_S3_VIRTUAL_HOSTED = ("aws_virtual_hosted_style_request", "virtual_hosted_style_request")
_S3_ANONYMOUS = ("aws_skip_signature", "skip_signature")
_AZURE_KEYS = {
    "account_key": ("azure_storage_account_key", "azure_storage_access_key", "azure_storage_master_key",
                    "account_key", "access_key", "master_key"),
    "sas_token": ("azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token"),
    "client_id": ("azure_client_id", "azure_storage_client_id", "client_id"),
    "client_secret": ("azure_client_secret", "azure_storage_client_secret", "client_secret"),
    "tenant_id": ("azure_tenant_id", "azure_storage_tenant_id", "azure_authority_id", "tenant_id", "authority_id"),
}


def filesystem(root: Path | StoreUri, storage_options: Mapping[str, str]) -> tuple[fs.FileSystem, str]:
    """The filesystem that reaches ``root`` and ``root``'s path on it (``bucket/key`` on an object store)."""
    if isinstance(root, Path):
        return fs.LocalFileSystem(), str(root)
    path = f"{root.container}/{root.key}".rstrip("/")
    options = {key.lower(): value for key, value in storage_options.items()}
    if root.family == "s3":
        return _s3_filesystem(options), path
    if root.family == "azure":
        account = root.authority.partition("@")[2].partition(".")[0] or azure_account(options)
        credentials = {name: value for name, keys in _AZURE_KEYS.items() if (value := _first(options, keys))}
        return fs.AzureFileSystem(account, **credentials), path
    return fs.GcsFileSystem(), path


def _s3_filesystem(options: Mapping[str, str]) -> fs.S3FileSystem:
    """An S3 filesystem from lower-cased delta-rs S3 options."""
    arguments: dict[str, object] = {name: value for name, keys in _S3_KEYS.items() if (value := _first(options, keys))}
    endpoint = _first(options, _S3_ENDPOINT)
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        if parts.scheme == "http" and not _true(options, _S3_ALLOW_HTTP):
            raise ConfigError("the S3 endpoint in STREAMWARDEN_STORAGE_OPTIONS is http://: set AWS_ALLOW_HTTP to "
                              "true as well (delta-rs refuses plain HTTP without it)")
        arguments.update(scheme=parts.scheme, endpoint_override=parts.netloc + parts.path.rstrip("/"))
    if _true(options, _S3_VIRTUAL_HOSTED):
        arguments["force_virtual_addressing"] = True
    if _true(options, _S3_ANONYMOUS):
        arguments["anonymous"] = True
    return fs.S3FileSystem(**arguments)


def _first(options: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    return next((options[key] for key in keys if options.get(key)), None)


def _true(options: Mapping[str, str], keys: tuple[str, ...]) -> bool:
    return (_first(options, keys) or "").strip().lower() in {"true", "1", "yes"}

"""The output tables as Delta Lake tables: where they live, which offsets they hold, how to read them.

The stream commits each micro-batch to Delta tables under ``STREAMWARDEN_OUTPUT_ROOT`` (``session_rows``
and ``quarantine``, or ``records``); every Delta reader (deltalake, Polars, DuckDB, Spark with the Delta
connector) sees whole batches only. Reading from Python::

    from streamwarden.settings import load_settings
    from streamwarden.tables import read

    dataset = read(load_settings(), "session_rows")          # a pyarrow dataset of the newest version
    rows = dataset.to_table(filter=ds.field("offset") >= 100)

Importable without Spark or Airflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamwarden.tables.reading import read

__all__ = ["read"]


def __getattr__(name: str) -> Any:
    """``read`` is imported on first use: the stream's Python workers import :mod:`.batches` and
    :mod:`.committed` from this package and need neither pandas, pyarrow's datasets nor the settings that
    :mod:`.reading` brings (~0.35 s and ~90 MB in each worker)."""
    if name == "read":
        from streamwarden.tables.reading import read as read_tables

        return read_tables
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

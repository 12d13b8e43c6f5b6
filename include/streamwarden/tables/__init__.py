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

from streamwarden.tables.reading import read

__all__ = ["read"]

"""The Streamwarden page's figures: the stream, lag, sites, tables and alerts at a glance, from the files the
platform already writes (no database of its own, nothing computed twice).

:func:`~streamwarden.dashboard.snapshot.snapshot` gathers a :class:`~streamwarden.dashboard.model.Dashboard`
(JSON for scripts, :mod:`.prometheus` text for monitoring, :mod:`.page` HTML for people). Read-only: the health
verdict is assessed without ``commit()``. Importable without Airflow or Spark; the Airflow plugin only serves it.
"""

"""Exactly-once Delta Lake sink: the commit of a micro-batch's files (the offset-range arithmetic it plans with is
the tables' own, :mod:`streamwarden.tables.ranges`).

* :mod:`~streamwarden.stream.sink.delta_sink` -- ``DeltaSink``: plans a batch against the offsets a Delta
  table holds, then commits the Parquet files Spark wrote together with those offsets (as app
  transactions, :mod:`streamwarden.tables.committed`) in one Delta commit.
"""

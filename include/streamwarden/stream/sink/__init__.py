"""Exactly-once Delta Lake sink: offset-range arithmetic and the commit of a micro-batch's files.

* :mod:`~streamwarden.stream.sink.ranges` -- pure interval arithmetic on Kafka offset ranges;
* :mod:`~streamwarden.stream.sink.delta_sink` -- ``DeltaSink``: plans a batch against the offsets a Delta
  table holds, then commits the Parquet files Spark wrote together with those offsets (as app
  transactions, :mod:`streamwarden.tables.committed`) in one Delta commit.
"""

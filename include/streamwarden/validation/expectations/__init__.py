"""Data checks of the pinned tables with Great Expectations (GX Core 1.x): suite, user file, run, Data Docs.

A suite is built per table from the pinned version's schema (:mod:`.suite`): keys not null, a row unique by
topic, partition, offset and row key, ``op`` in its set, column types, configured ranges; a small frame per
topic-partition carries the quarantine share and the freshness of the newest row (:mod:`.frames`). Users add
their own expectations in a file (:mod:`.user_file`). :func:`.run.check_expectations` validates them on the
same pinned versions as the offset checks, turns failures into findings naming the topic, partition and
offsets of the failing rows (:mod:`.results`), and writes the Data Docs under ``<run_root>/data_docs/``
(:mod:`.docs`). Great Expectations is imported only by :mod:`.gx`, with its analytics off, and only when a
run checks rows: nothing here builds a DataFrame, or imports GX, at DAG parse time. Importable without
Airflow or Spark.
"""

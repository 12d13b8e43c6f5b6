"""Checks of the output as a Delta reader sees it: every Kafka offset exactly once, the log and the files agree.

Two capabilities live here. :mod:`.exactly_once` checks one table against expected offsets (tests and the
benchmark use it). The others make up a validation run of the ``validate_output`` DAG
(:mod:`.steps`): every table pinned at one version (:mod:`.snapshot`); check 1, the offsets the logs claim
covered without gap or duplicate, computed in DuckDB (:mod:`.coverage`); check 2, the checkpoint against the
tables (:mod:`.agreement`); check 3, Kafka's log start and end, expired offsets, lag and the time left
(:mod:`.upstream`); typed findings with their next action (:mod:`.findings`); the report and the last
validated versions (:mod:`.report`); settings from ``STREAMWARDEN_VALIDATION_*`` (:mod:`.settings`).
Importable without Spark or Airflow.
"""

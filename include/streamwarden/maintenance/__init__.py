"""Table maintenance beside the live stream: plan, compact, prove, clean up, report.

Each step is a function the ``maintain_tables`` DAG calls as one task (and ``streamwarden maintain`` runs
in turn): :mod:`.plan` finds the partitions whose small files are worth compacting, :mod:`.compaction`
compacts them one partition per Delta commit and :mod:`.proof` proves each commit kept every row (or
reverts it), :mod:`.cleanup` vacuums unreferenced files and tidies the log, :mod:`.report` records what
was done. Importable without Spark or Airflow.
"""

"""Bounded logs: every log under ``<run_root>/logs`` rolls over by size and is kept for a bounded count and age.

``bounds`` says where the logs live and how large they may grow; ``log4j2`` renders the stream's JVM logging,
``python_logging`` the job's Python logging; ``rolling`` rolls the platform's logs that a child process
writes; ``pruning`` deletes what is past the bounds; ``usage`` measures what the folder holds.
"""

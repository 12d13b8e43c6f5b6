"""The long-run program: `make run`'s platform for hours under a CPU burn, and what it did to memory, disk,
the stream and the DAG runs (issue 37, "What it must show"). ``python -m streamwarden_longrun --help``;
docs/longrun.md."""

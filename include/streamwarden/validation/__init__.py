"""Checks of the output as a Delta reader sees it: every Kafka offset exactly once, the log and the files agree."""

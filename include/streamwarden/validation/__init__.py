"""Checks of the output as an outside reader sees it: every Kafka offset exactly once, manifests true."""

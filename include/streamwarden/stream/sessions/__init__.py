"""Ordered, typed, pluggable reconstruction of snapshot/update sessions."""

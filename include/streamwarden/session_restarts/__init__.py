"""Scheduled session restarts: ask collection sites for new sessions, confirm them, measure each site's exposure."""

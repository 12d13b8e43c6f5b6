"""Durations as people read them: ``95`` seconds as ``1m 35s``, ``7260`` as ``2h 1m``."""

from __future__ import annotations


def duration_text(seconds: float | None) -> str:
    """``95`` as ``1m 35s``, ``139`` as ``2m 19s``, ``7260`` as ``2h 1m``; ``-`` for None. Seconds are shown below
    an hour, so two limits a few seconds apart never read the same."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] * bool(days) + [f"{hours}h"] * bool(hours) + [f"{minutes}m"] * bool(minutes)
    return " ".join(parts if days or hours else [*parts, f"{secs}s"])

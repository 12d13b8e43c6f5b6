"""When the warden may start the stream again: exponential backoff and a circuit breaker.

Every start the warden makes is recorded in ``<run_root>/warden/restarts.json``, so successive DAG runs
(and other workers) share the history. Within the breaker window (an hour):

* the k-th start waits ``min(base * 2**(k-2), max)`` after the previous one (the first start is at once);
* once ``max_restarts_per_hour`` starts were made, the breaker is open: no automatic start until the
  oldest of them leaves the window, or an operator forces a restart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.settings import Settings

BREAKER_WINDOW_S = 3600.0


@dataclass(frozen=True)
class RestartHistory:
    """Warden starts (epoch seconds, oldest first)."""

    starts: list[float] = field(default_factory=list)

    def recent(self, now: float) -> list[float]:
        """Starts inside the breaker window."""
        return [t for t in self.starts if now - t < BREAKER_WINDOW_S]

    def breaker_open(self, now: float, max_per_hour: int) -> bool:
        """True when ``max_per_hour`` or more starts were made in the last hour."""
        return len(self.recent(now)) >= max_per_hour

    def backoff_until(self, now: float, base: float, maximum: float) -> float | None:
        """Epoch seconds before which the next start must wait, or ``None`` when it may start now."""
        recent = self.recent(now)
        if not recent:
            return None
        until = recent[-1] + min(base * 2 ** (len(recent) - 1), maximum)
        return until if until > now else None

    def with_start(self, at: float) -> RestartHistory:
        """This history plus a start at ``at`` (starts older than the window are dropped)."""
        return replace(self, starts=[*self.recent(at), at])


def load_history(settings: Settings) -> RestartHistory:
    document = read_json(settings.run_paths.restart_history)
    return RestartHistory() if document is None else RestartHistory(starts=list(document.get("starts", [])))


def save_history(settings: Settings, history: RestartHistory) -> None:
    write_json_atomic(settings.run_paths.restart_history, asdict(history))

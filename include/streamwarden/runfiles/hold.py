"""``hold.json``: the stream is held stopped by a recovery or an upgrade; nothing else may start it.

Between stopping the stream and handing it back, a recovery (or an upgrade) changes the checkpoint and the
tables under it. The warden would see a dead stream and restart it on a half-made checkpoint; maintenance
would compact a table being restored. The hold is a file under the run root, so it survives a kill -9 of
the task that took it: the warden decides nothing, the launcher refuses to start the stream and
maintenance refuses to run while it exists, each naming the owner. Only its owner (a DAG run) takes it
again or releases it.

Example::

    >>> take_hold(settings, "recover_stream/manual__2026-11-24", "recovery 5f3c: restore the tables")
    >>> read_hold(settings).owner
    'recover_stream/manual__2026-11-24'
    >>> release_hold(settings, "recover_stream/manual__2026-11-24")
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import ConfigError
from streamwarden.settings import Settings


class StreamHeldError(ConfigError):
    """The stream is held by another owner (a recovery or an upgrade in progress)."""


@dataclass(frozen=True)
class Hold:
    """Who holds the stream stopped, why, and since when."""

    owner: str
    reason: str
    since: str

    def describe(self) -> str:
        return f"held stopped by {self.owner} since {self.since}: {self.reason}"


def read_hold(settings: Settings) -> Hold | None:
    document = read_json(settings.run_paths.hold)
    return None if document is None else Hold(**document)


def take_hold(settings: Settings, owner: str, reason: str) -> Hold:
    """Hold the stream for ``owner`` (again, if it holds it already); :class:`StreamHeldError` when another
    owner holds it."""
    held = read_hold(settings)
    if held is not None and held.owner != owner:
        raise StreamHeldError(f"the stream is {held.describe()}; wait for it to finish, or release it with "
                              f"`streamwarden release-hold` if that run is gone", details=asdict(held))
    if held is not None:
        return held
    hold = Hold(owner, reason, datetime.now(UTC).isoformat(timespec="seconds"))
    write_json_atomic(settings.run_paths.hold, asdict(hold))
    return hold


def release_hold(settings: Settings, owner: str | None) -> Hold | None:
    """Release the hold of ``owner`` (None: whoever holds it); the released hold, or None when there was none.
    Another owner's hold is refused (:class:`StreamHeldError`)."""
    held = read_hold(settings)
    if held is None:
        return None
    if owner is not None and held.owner != owner:
        raise StreamHeldError(f"the stream is {held.describe()}, not by {owner}", details=asdict(held))
    settings.run_paths.hold.unlink(missing_ok=True)
    return held


def refuse_if_held(settings: Settings, what: str, owner: str | None = None) -> None:
    """:class:`StreamHeldError` naming the hold when the stream is held by someone other than ``owner``."""
    held = read_hold(settings)
    if held is not None and held.owner != owner:
        raise StreamHeldError(f"{what} refused: the stream is {held.describe()}", details=asdict(held))

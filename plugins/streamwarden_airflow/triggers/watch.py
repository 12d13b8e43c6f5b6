"""The continuous watch as an event trigger: an asset watcher of ``stream_supervisor`` in the triggerer.

``stream_supervisor`` is scheduled on the asset :data:`STREAM_WATCH` or every two minutes. This trigger runs for
as long as the DAG exists (no worker slot), looks at the stream every ``STREAMWARDEN_WARDEN_WATCH_INTERVAL``
(:class:`streamwarden.warden.watch.StreamWatch`) and fires an event when the stream dies, fails or hangs: the
event becomes an asset event (its payload: the :class:`~streamwarden.warden.watch.Sighting`), and the asset event
a supervisor run at once, which judges, decides and restarts as a scheduled run does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import Asset, AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from streamwarden.upgrade.release import load_release_settings
from streamwarden.warden.settings import load_warden_settings
from streamwarden.warden.watch import Sighting, StreamWatch

log = logging.getLogger("streamwarden.warden.watch")
STREAM_WATCH_NAME = "streamwarden_stream_watch"


class StreamWatchTrigger(BaseEventTrigger):
    """Fires one event per death, exit with a failure document, or hang of the stream; never ends.

    The settings are read in the triggerer (``STREAMWARDEN_*``, with the active release's over them), at its
    start; a look that fails (a file being replaced, a bad setting) is logged and tried again next time.
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        warden = load_warden_settings()
        watch = StreamWatch(load_release_settings(), warden)
        log.info("watching the stream every %gs (lease, exit document, heartbeat)", warden.watch_interval)
        while True:
            try:
                sighting: Sighting | None = await asyncio.to_thread(watch.look)
            except Exception:  # the watch must outlive one bad look
                log.exception("the stream watch could not look; trying again")
                sighting = None
            if sighting is not None:
                log.warning("stream watch: %s", sighting.text())
                yield TriggerEvent(sighting.to_json())  # type: ignore[no-untyped-call]
            await asyncio.sleep(warden.watch_interval)


def stream_watch_asset() -> Asset:
    """The asset the watch's events land on (``stream_supervisor`` is scheduled on it)."""
    return Asset(name=STREAM_WATCH_NAME, uri="streamwarden://stream/watch",
                 watchers=[AssetWatcher(name="stream_watch", trigger=StreamWatchTrigger())])

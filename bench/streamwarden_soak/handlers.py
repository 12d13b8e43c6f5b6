"""The session handler of the soak's failing release: the built-in handler's state layout and columns (so the
upgrade's compatibility check accepts it), but every event raises, so every batch fails and the upgrade's watch
rolls it back. The stream imports it by name (``bench`` is on its PYTHONPATH under the soak)."""

from __future__ import annotations

from streamwarden.session_handler import OutputRow
from streamwarden.stream.sessions.table_handler import SessionTable, TableReconstruction
from streamwarden.wire import SessionEvent


class FailingReconstruction(TableReconstruction):
    def on_event(self, state: SessionTable, event: SessionEvent) -> tuple[SessionTable, list[OutputRow]]:
        raise RuntimeError(f"soak release soak-failing cannot apply {type(event).__name__} of {event.session_id}")

"""The state layout a checkpoint was started with, pinned beside it, and the refusal of another one.

Select a handler with ``STREAMWARDEN_SESSION_HANDLER=package.module:ClassName``. Its *fingerprint*
(class, ``state_version``, ``state_schema``, and the job's ``session_buckets``, ``session_slots``, the
codec of the slots and the state partitions its bucket labels are balanced for, which decide where each
session's state lives and how it is stored) is
recorded next to the checkpoint on first start; a later start takes the checkpoint's own buckets, slots and
labels unless ``session_buckets`` is set, and one with a different fingerprint is refused (CONFIG) before any
batch runs, instead of crashing on undecodable or misplaced state mid-batch. Bump ``state_version`` whenever
the state encoding changes. A handler class may declare ``handler_name = "..."`` to keep its fingerprint when
it moves to another module.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from streamwarden.atomic import read_json, write_json_atomic
from streamwarden.failures import ConfigError
from streamwarden.session_handler import SessionHandler

HANDLER_FILE = "streamwarden_handler.json"
SLOT_CODEC = "zstd"
"""How a new checkpoint's slots are compressed (the stream's ``session_store``); those started before keep theirs
plain."""
SLOT_EXPIRY = "store"
"""How a new checkpoint's slots expire (the stream's ``session_store``): by the store's own per-session timeout
alone.
Checkpoints whose slots were started before (no ``slot_expiry`` pinned) keep Spark's TTL on them, which a TTL
changes the state's schema for; under it, a slot rewritten every batch was removed about one timeout after its
first write (docs/sessions.md)."""
log = logging.getLogger("streamwarden.stream.sessions")


def fingerprint(handler: SessionHandler[Any], buckets: int, slots: int = 0, partitions: int = 0, *,
                codec: str = "", expiry: str = "") -> dict[str, Any]:
    """What identifies the layout of the session state: the handler's, the number of buckets, the slots per
    bucket (the stream's ``session_store``), the state partitions the buckets' labels are balanced for (its
    ``buckets``), the codec of the slots and how they expire; the last four named only when set, so checkpoints
    from before them keep theirs."""
    default_name = f"{type(handler).__module__}:{type(handler).__qualname__}"
    identity = {"handler": getattr(handler, "handler_name", default_name),
                "state_version": handler.state_version, "state_schema": handler.state_schema,
                "session_buckets": buckets, **({"session_slots": slots} if slots else {}),
                **({"bucket_partitions": partitions} if partitions else {}),
                **({"slot_codec": codec} if codec else {}),
                **({"slot_expiry": expiry} if expiry else {})}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return {**identity, "fingerprint": digest}


def pin_handler(checkpoint: Path, handler: SessionHandler[Any], buckets: int, slots: int = 0,
                partitions: int = 0) -> dict[str, Any]:
    """Record the state layout's fingerprint with a new checkpoint (``slots`` per bucket, bucket labels balanced
    for ``partitions``), or refuse an incompatible one. An existing checkpoint keeps the slots and labels it was
    started with, whatever ``slots`` and ``partitions`` say: the pinned document's ``session_slots``,
    ``bucket_partitions`` (absent: 0), ``slot_codec`` (absent: plain) and ``slot_expiry`` (absent: Spark's TTL)
    are the layout to use."""
    path = checkpoint / HANDLER_FILE
    recorded = read_json(path)
    current = layout_fingerprint(handler, recorded, buckets, slots, partitions)
    if recorded is None:
        write_json_atomic(path, current)
        return current
    _refuse_another_layout(recorded, current)
    if current.get("session_slots", 0) and not current.get("slot_expiry"):
        log.warning("this checkpoint's session slots expire through Spark's TTL, under which a slot rewritten every "
                    "batch was seen removed about one session timeout after its first write (an INTEGRITY "
                    "failure 'update before any snapshot' on a live session); recover onto a new checkpoint to "
                    "leave it (docs/sessions.md)")
    if current.get("session_slots", 0) != slots:
        log.info("the checkpoint keeps its state layout (session_slots %d; configured %d applies to new "
                 "checkpoints)", current.get("session_slots", 0), slots)
    return current


def check_pinned(checkpoint: Path, handler: SessionHandler[Any], configured_buckets: int | None, new_buckets: int,
                 *, slots: int = 0, partitions: int = 0) -> None:
    """Refuse (:class:`ConfigError`) a handler or settings whose state layout is not the one the checkpoint pinned,
    writing nothing: :func:`pin_handler`'s refusal, made before Spark starts."""
    recorded = read_json(checkpoint / HANDLER_FILE)
    if recorded is not None:
        buckets = layout_buckets(recorded, configured_buckets, new_buckets)
        _refuse_another_layout(recorded, layout_fingerprint(handler, recorded, buckets, slots, partitions))


def _refuse_another_layout(recorded: dict[str, Any], current: dict[str, Any]) -> None:
    if recorded["fingerprint"] != current["fingerprint"]:
        raise ConfigError(
            f"the checkpoint's state was written by {_layout(recorded)} but the job is configured with "
            f"{_layout(current)}; refusing to start. Restore the old handler and settings, or recover onto a new "
            "checkpoint from the last snapshots (see docs/sessions.md).",
            details={"recorded": recorded, "configured": current})


def layout_fingerprint(handler: SessionHandler[Any], recorded: dict[str, Any] | None, buckets: int, slots: int,
                       partitions: int) -> dict[str, Any]:
    """The fingerprint of ``handler`` on a checkpoint whose pinned fingerprint is ``recorded`` (None: a new
    one): its own slots, labels, codec and expiry when it has them, else those configured, :data:`SLOT_CODEC` and
    :data:`SLOT_EXPIRY`."""
    used = layout_slots(recorded, slots)
    return fingerprint(handler, buckets, used, layout_partitions(recorded, partitions),
                       codec=layout_codec(recorded, used), expiry=layout_expiry(recorded, used))


def layout_buckets(recorded: dict[str, Any] | None, configured: int | None, new: int) -> int:
    """The session buckets of a checkpoint's state: ``configured`` when set (:func:`pin_handler` refuses one the
    checkpoint was not started with), else those pinned in its ``recorded`` fingerprint, else ``new`` (a new
    checkpoint)."""
    if configured is not None:
        return configured
    return new if recorded is None else int(recorded.get("session_buckets", new))


def layout_slots(recorded: dict[str, Any] | None, configured: int) -> int:
    """The slots per bucket a checkpoint's state uses: those pinned in its ``recorded`` fingerprint (absent: 0,
    one entry per session), or ``configured`` for a new checkpoint (nothing recorded yet)."""
    return configured if recorded is None else int(recorded.get("session_slots", 0))


def layout_partitions(recorded: dict[str, Any] | None, configured: int) -> int:
    """The state partitions a checkpoint's bucket labels are balanced for (the stream's ``buckets``): those pinned
    in its ``recorded`` fingerprint (absent: 0, the bucket numbers as labels), or ``configured`` for a new
    checkpoint."""
    return configured if recorded is None else int(recorded.get("bucket_partitions", 0))


def layout_codec(recorded: dict[str, Any] | None, slots: int) -> str:
    """How a checkpoint's slots are compressed: as pinned in its ``recorded`` fingerprint (absent: plain, ""), or
    :data:`SLOT_CODEC` for a new checkpoint with slots (``slots`` > 0; one entry per session: none)."""
    if recorded is None:
        return SLOT_CODEC if slots else ""
    return str(recorded.get("slot_codec", ""))


def layout_expiry(recorded: dict[str, Any] | None, slots: int) -> str:
    """How a checkpoint's slots expire: as pinned in its ``recorded`` fingerprint (absent: "", Spark's TTL), or
    :data:`SLOT_EXPIRY` for a new checkpoint with slots (one entry per session: "", Spark's TTL is its timeout)."""
    if recorded is None:
        return SLOT_EXPIRY if slots else ""
    return str(recorded.get("slot_expiry", ""))


def _layout(pinned: dict[str, Any]) -> str:
    return (f"{pinned['handler']} (state_version {pinned['state_version']}, session_buckets "
            f"{pinned.get('session_buckets', 'unset')}, session_slots {pinned.get('session_slots', 0)}, "
            f"bucket_partitions {pinned.get('bucket_partitions', 0)}, slot_codec {pinned.get('slot_codec') or 'none'}, "
            f"slot_expiry {pinned.get('slot_expiry') or 'ttl'}, "
            f"fingerprint {pinned['fingerprint']})")

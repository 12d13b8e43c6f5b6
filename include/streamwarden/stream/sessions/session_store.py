"""Where a bucket's session states live in Spark's state store: one entry per session, or sessions in slots.

Two layouts; a checkpoint keeps the one it was started with (pinned with the handler's fingerprint, see
:func:`~streamwarden.runfiles.handler_pin.pin_handler`):

* **entries** (``session_slots = 0``, every checkpoint written before slots): the bucket's ``MapState``
  ``sessions`` holds one entry per session, keyed by session id, with Spark's TTL as the session timeout.
* **slots** (``session_slots = N``): the sessions of a bucket are hashed into ``N`` slots, and the
  ``MapState`` ``slots`` holds one entry per slot: a msgpack map of session id -> (meta, state, written at).
  A state call to the JVM costs ~25-40 us plus ~3.5 us per kB of value (measured on 2 cores, pipelined), so a
  batch that touches 100k sessions pays for a few thousand slot reads and writes instead of 200k calls.
  A new checkpoint's slots are compressed (``slot_codec``: the map's size as 4 bytes, then its zstd frame,
  :data:`~streamwarden.runfiles.handler_pin.SLOT_CODEC`): a batch that touches most sessions reads and
  writes every slot, and what the JVM's state server spends is per byte; checkpoints started before keep
  their slots plain (the codec is pinned with the handler, as the slots are).
  The session timeout holds per session: a session whose entry was written ``timeout`` ago or earlier is
  dropped when its slot is next read (and not returned). A new checkpoint's slots carry no Spark TTL
  (``slot_expiry``, :data:`~streamwarden.runfiles.handler_pin.SLOT_EXPIRY`): under it, slots rewritten
  every batch were removed about one timeout after their first write, losing live sessions' state. The slots
  are bounded (buckets x slots), and a slot drops its timed-out sessions whenever it is rewritten. Checkpoints
  started before keep Spark's TTL on their slots (it changes the state's schema).

Both are used the same way, once per bucket and batch::

    stored = store.read(sessions, now_ms)      # session id -> (meta JSON, state bytes), the sessions found
    store.write(changes, now_ms)               # session id -> (meta JSON, state bytes), or None to release
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from pyspark.sql.streaming.stateful_processor import MapState, StatefulProcessorHandle

from streamwarden.stream.sessions.state_calls import pipelining_supported, read_states, write_states

log = logging.getLogger("streamwarden.stream.sessions")
Stored = tuple[str, bytes]
"""A session's meta (JSON) and its handler state (the handler's bytes)."""


class SessionStore(Protocol):
    """A bucket's session states (see the module docstring)."""

    def read(self, sessions: Sequence[str], now_ms: int) -> dict[str, Stored]:
        """The stored meta and state of each of ``sessions`` that has them (and has not timed out)."""

    def write(self, changes: Mapping[str, Stored | None], now_ms: int) -> None:
        """Store each changed session's meta and state; ``None`` releases the session. Called once after
        :meth:`read`, with sessions of that read only."""


def open_store(handle: StatefulProcessorHandle, slots: int, timeout_ms: int, codec: str = "",
               spark_ttl: bool = True) -> SessionStore:
    """The store of the checkpoint's layout: :class:`SessionEntries` for ``slots == 0``, else :class:`SessionSlots`
    (``codec``: how its slots are compressed, "" for plain; ``spark_ttl``: whether they carry Spark's TTL)."""
    store: SessionStore
    if slots == 0:
        state = handle.getMapState("sessions", "session_id STRING", "meta STRING, state BINARY", timeout_ms)
        store = SessionEntries(state)
    else:
        state = handle.getMapState("slots", "slot INT", "sessions BINARY", timeout_ms if spark_ttl else None)
        store = SessionSlots(state, slots, timeout_ms, codec)
    if not pipelining_supported(state):
        log.warning("this PySpark's state client lacks what pipelined state calls use: one round trip each")
    return store


class SessionEntries:
    """One ``MapState`` entry per session (Spark's TTL is the session timeout)."""

    def __init__(self, state: MapState) -> None:
        self.state = state

    def read(self, sessions: Sequence[str], now_ms: int) -> dict[str, Stored]:
        return {key[0]: (value[0], bytes(value[1]))
                for key, value in read_states(self.state, [(s,) for s in sessions]).items()}

    def write(self, changes: Mapping[str, Stored | None], now_ms: int) -> None:
        write_states(self.state, [((s,), stored) for s, stored in changes.items() if stored is not None],
                     [(s,) for s, stored in changes.items() if stored is None])


SlotEntry = tuple[str, bytes, int]
"""A session in a slot: meta (JSON), state (the handler's bytes), when it was written (ms, processing time)."""
_SLOT_ENCODER = msgspec.msgpack.Encoder()
_SLOT_DECODER = msgspec.msgpack.Decoder(dict[str, tuple[str, bytes, int]])
_SIZE = struct.Struct("<I")
"""A compressed slot starts with the size of its msgpack map."""


def slot_of(session: str, slots: int) -> int:
    """The slot of ``session`` within its bucket (CRC-32: independent of the bucket's xxhash64)."""
    return zlib.crc32(session.encode()) % slots


class SlotCodec:
    """A slot's bytes: its msgpack map, plain or compressed with ``codec`` (a pyarrow codec name)."""

    def __init__(self, codec: str = "") -> None:
        self.codec = pa.Codec(codec) if codec else None

    def encode(self, slot: Mapping[str, SlotEntry]) -> bytes:
        plain = _SLOT_ENCODER.encode(slot)
        if self.codec is None:
            return plain
        compressed: bytes = self.codec.compress(plain, asbytes=True)
        return _SIZE.pack(len(plain)) + compressed

    def decode(self, blob: bytes) -> dict[str, SlotEntry]:
        if self.codec is None:
            return _SLOT_DECODER.decode(blob)
        (size,) = _SIZE.unpack_from(blob)
        return _SLOT_DECODER.decode(self.codec.decompress(memoryview(blob)[_SIZE.size:], decompressed_size=size,
                                                          asbytes=True))


class SessionSlots:
    """The bucket's sessions hashed into ``slots`` entries of a ``MapState``, each a msgpack map (compressed
    with ``codec`` unless it is "")."""

    def __init__(self, state: MapState, slots: int, timeout_ms: int, codec: str = "") -> None:
        self.state, self.slots, self.timeout_ms, self.codec = state, slots, timeout_ms, SlotCodec(codec)
        self._slot: dict[str, int] = {}  # the slot of each session of the last read
        self._read: dict[int, dict[str, SlotEntry]] = {}  # the slots of the last read, timed-out sessions dropped
        self._found: set[int] = set()  # those of them the store holds

    def read(self, sessions: Sequence[str], now_ms: int) -> dict[str, Stored]:
        self._slot = {s: slot_of(s, self.slots) for s in sessions}
        keys = sorted(set(self._slot.values()))
        found = read_states(self.state, [(k,) for k in keys])
        live_after = now_ms - self.timeout_ms
        self._read = {key: {} for key in keys}
        self._found = {key for (key,) in found}
        for (key,), (blob,) in found.items():
            self._read[key] = {s: entry for s, entry in self.codec.decode(blob).items() if entry[2] > live_after}
        return {s: entry[:2] for s, key in self._slot.items() if (entry := self._read[key].get(s))}

    def write(self, changes: Mapping[str, Stored | None], now_ms: int) -> None:
        touched: set[int] = set()
        for session, stored in changes.items():
            key = self._slot[session]
            touched.add(key)
            if stored is None:
                self._read[key].pop(session, None)
            else:
                self._read[key][session] = (*stored, now_ms)
        updates = [((key,), (self.codec.encode(self._read[key]),)) for key in sorted(touched) if self._read[key]]
        removals = [(key,) for key in sorted(touched & self._found) if not self._read[key]]
        write_states(self.state, updates, removals)
        self._slot, self._read, self._found = {}, {}, set()

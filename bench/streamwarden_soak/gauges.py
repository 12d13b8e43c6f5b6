"""Two figures the long run's samples lack, taken every ``interval`` in a thread of the soak's own (a paused broker
must not hold up the looks): the platform's open files, and the stream's lag (each site partition's end as
ListOffsets answers it, less the checkpoint's committed offset; a lower bound on the embedded broker, None while the
broker does not answer)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import psutil
from confluent_kafka import Consumer

from streamwarden.failures import EnvironmentFailure
from streamwarden.kafka.admin import list_offsets_watermarks, list_partitions, metadata_consumer
from streamwarden.runfiles.checkpoint import committed_offsets
from streamwarden.settings import Settings

from .targets import Platform


def quiet(config: dict[str, str]) -> dict[str, str]:
    """A client config whose librdkafka logs errors only: a paused broker must not fill the soak's output with a
    timeout line every ten seconds (the gauge records it as no answer)."""
    return {**config, "log_level": "3"}


class Gauges:
    def __init__(self, platform: Platform, settings: Settings, write: Callable[[dict[str, object]], None],
                 clock: Callable[[], float], interval_s: float = 20.0) -> None:
        self.platform = platform
        self.settings = settings
        self.write = write
        self.clock = clock
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-gauges", daemon=True)
        self._consumer: Consumer | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self._consumer is not None:
            self._consumer.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            files, processes = self._open_files()
            self.write({"at_s": self.clock(), "open_files": files, "processes": processes, "lag": self._lag()})

    def _open_files(self) -> tuple[int, int]:
        files = processes = 0
        for process in self.platform.members():
            with contextlib.suppress(psutil.Error):
                files += process.num_fds()
                processes += 1
        return files, processes

    def _lag(self) -> int | None:
        try:
            if self._consumer is None:
                self._consumer = metadata_consumer(quiet(self.settings.kafka_client_config()))
            partitions = list_partitions(self._consumer, self.settings.topic_pattern, timeout=5)
            ends = list_offsets_watermarks(self._consumer, partitions, timeout=5)
        except EnvironmentFailure:
            return None
        done = committed_offsets(self.settings.checkpoint_location) or {}
        return sum(max(0, high - done.get(tp.topic, {}).get(str(tp.partition), 0)) for tp, (_, high) in ends.items())

"""The stream host's side: launch or halt the stream on this host and answer the warden with one :class:`Answer`.

``streamwarden launch`` and ``streamwarden halt`` run these; the warden reads the answer (:mod:`.client`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from streamwarden.runfiles.hold import StreamHeldError
from streamwarden.settings import Settings
from streamwarden.stream_host.answers import Answer, Outcome
from streamwarden.warden.launcher import (
    CommandBuilder,
    StreamAlreadyRunningError,
    StreamLaunchFailedError,
    spark_submit_command,
    start_stream_detached,
    venv_bin,
)
from streamwarden.warden.stop import StopFailedError, stop_stream


def spark_submit_with(options: list[str]) -> CommandBuilder:
    """This host's spark-submit with the warden's options (from its Spark connection: master, conf, name) and
    this host's job script; with no options, the settings' master and query name."""
    if not options:
        return spark_submit_command

    def build(settings: Settings, application: Path) -> list[str]:
        return [str(venv_bin() / "spark-submit"), *options, str(application)]
    return build


def launch(settings: Settings, spark_options: list[str], lease_timeout: float, standby: bool = False) -> Answer:
    """Start the stream (or its warm standby) detached on this host: the driver's pid once it holds the lease
    (the standby lease), or why not."""
    try:
        pid = start_stream_detached(settings, build_command=spark_submit_with(spark_options),
                                    lease_timeout=lease_timeout, standby=standby)
    except StreamAlreadyRunningError as exc:
        return Answer(Outcome.ALREADY_RUNNING, str(exc), holder=None if exc.holder is None else asdict(exc.holder))
    except StreamHeldError as exc:
        return Answer(Outcome.HELD, exc.message)
    except StreamLaunchFailedError as exc:
        return Answer(Outcome.LAUNCH_FAILED, exc.reason, log_path=str(exc.log_path), exit_code=exc.exit_code,
                      log_tail=exc.tail)
    return Answer(Outcome.STARTED, pid=pid)


def halt(settings: Settings, drain_timeout: float, term_timeout: float) -> Answer:
    """Stop the stream on this host: drain, then SIGTERM, then SIGKILL (as :func:`stop_stream` does)."""
    try:
        outcome = stop_stream(settings, drain_timeout=drain_timeout, term_timeout=term_timeout)
    except StopFailedError as exc:
        return Answer(Outcome.STOP_FAILED, str(exc))
    return Answer(Outcome.STOPPED, stop=outcome.to_json())

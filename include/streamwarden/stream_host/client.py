"""The warden's side: launch or halt the stream on the stream host through a command runner (Airflow's SSH
connection), raising what :func:`~streamwarden.warden.launcher.start_stream_detached` and
:func:`~streamwarden.warden.stop.stop_stream` raise on this host."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamwarden.runfiles.hold import StreamHeldError
from streamwarden.runfiles.lease import LeaseHolder
from streamwarden.stream_host.answers import Answer, AnswerError, Outcome, parse_answer
from streamwarden.warden.launcher import StreamAlreadyRunningError, StreamLaunchFailedError
from streamwarden.warden.stop import StopFailedError, StopMethod, StopOutcome

ANSWER_MARGIN_S = 60.0
"""How much longer than the command's own bound the warden waits for the host's answer (SSH, Python's start)."""


@dataclass(frozen=True)
class HostReply:
    """What a command on the stream host returned: its exit status and output (255: SSH itself failed)."""

    exit_status: int
    stdout: str
    stderr: str


RunOnHost = Callable[[list[str], float], HostReply]
"""Runs an argv on the stream host within a number of seconds (the SSH hook's ``exec_ssh_client_command``)."""


def launch_on_host(run: RunOnHost, where: str, spark_options: list[str], lease_timeout: float,
                   standby: bool = False) -> int:
    """Launch the stream (or its warm standby) on the host; the pid of its driver once it holds the lease (the
    standby lease).

    Raises :class:`StreamAlreadyRunningError`, :class:`StreamHeldError` or :class:`StreamLaunchFailedError`
    as a launch here would; a host that gives no answer is a failed launch whose log is the host's reply."""
    argv = ["streamwarden", "launch", *(["--standby"] if standby else []), "--lease-timeout", f"{lease_timeout:g}",
            "--", *spark_options]
    reply = run(argv, lease_timeout + ANSWER_MARGIN_S)
    try:
        answer = parse_answer(reply.stdout)
    except AnswerError:
        raise StreamLaunchFailedError(f"the stream host {where} gave no answer to the launch (exit "
                                      f"{reply.exit_status})", Path(where), reply.exit_status,
                                      tail=_reply_tail(reply)) from None
    if answer.outcome is Outcome.STARTED and answer.pid is not None:
        return answer.pid
    if answer.outcome is Outcome.ALREADY_RUNNING:
        raise StreamAlreadyRunningError(None if answer.holder is None else LeaseHolder(**answer.holder))
    if answer.outcome is Outcome.HELD:
        raise StreamHeldError(answer.message)
    raise StreamLaunchFailedError(f"on {where}: {answer.message or answer.outcome.value}",
                                  Path(answer.log_path or where), answer.exit_code, tail=answer.log_tail)


def halt_on_host(run: RunOnHost, where: str, drain_timeout: float, term_timeout: float) -> StopOutcome:
    """Stop the stream on the host (drain, SIGTERM, SIGKILL there); :class:`StopFailedError` when it survived or
    the host gave no answer."""
    argv = ["streamwarden", "halt", "--drain-timeout", f"{drain_timeout:g}", "--term-timeout", f"{term_timeout:g}"]
    reply = run(argv, drain_timeout + 2 * term_timeout + ANSWER_MARGIN_S)
    try:
        answer = parse_answer(reply.stdout)
    except AnswerError:
        raise StopFailedError(f"the stream host {where} gave no answer to the halt (exit {reply.exit_status}): "
                              f"{_reply_tail(reply)}") from None
    if answer.outcome is not Outcome.STOPPED:
        raise StopFailedError(f"on {where}: {answer.message}")
    return _stop_outcome(answer)


def _stop_outcome(answer: Answer) -> StopOutcome:
    stop = answer.stop
    return StopOutcome(StopMethod(stop["method"]), stop.get("pid"), float(stop.get("seconds", 0.0)))


def _reply_tail(reply: HostReply, lines: int = 30) -> str:
    return "\n".join((reply.stderr.strip() or reply.stdout.strip()).splitlines()[-lines:])

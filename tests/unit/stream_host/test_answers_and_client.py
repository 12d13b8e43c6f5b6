"""What the stream host answers, and what the warden makes of each answer: the errors a launch or stop on its own
host would raise, and a host that gives no answer told apart from one that refused."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from streamwarden.runfiles.hold import StreamHeldError
from streamwarden.runfiles.lease import LeaseHolder
from streamwarden.stream_host.answers import Answer, AnswerError, Outcome, parse_answer
from streamwarden.stream_host.client import HostReply, RunOnHost, halt_on_host, launch_on_host
from streamwarden.warden.launcher import StreamAlreadyRunningError, StreamLaunchFailedError
from streamwarden.warden.stop import StopFailedError, StopMethod


def replying(answer: Answer | None, status: int = 0, stderr: str = "",
             asked: list[tuple[list[str], float]] | None = None) -> RunOnHost:
    """A host that replies ``answer`` (after what spark-submit prints) to whatever it is asked."""
    def run(argv: list[str], timeout: float) -> HostReply:
        if asked is not None:
            asked.append((argv, timeout))
        out = "" if answer is None else f"Using Spark's default log4j profile\n{answer.to_line()}\n"
        return HostReply(status if answer is None else answer.exit_status, out, stderr)
    return run


def test_an_answer_survives_the_line_and_what_is_printed_before_it() -> None:
    answer = Answer(Outcome.LAUNCH_FAILED, "the stream exited with code 78", log_path="/data/run/logs/s.log",
                    exit_code=78, log_tail="SettingsError: STREAMWARDEN_TOPICS")
    assert parse_answer(f"banner\n{{not json\n{answer.to_line()}\n") == answer
    assert answer.exit_status == 1 and Answer(Outcome.STARTED, pid=7).exit_status == 0
    with pytest.raises(AnswerError):
        parse_answer('bash: streamwarden: command not found\n{"outcome": "maybe"}')


def test_launch_returns_the_driver_pid_and_passes_the_spark_options_and_a_bounded_wait() -> None:
    asked: list[tuple[list[str], float]] = []
    pid = launch_on_host(replying(Answer(Outcome.STARTED, pid=4242), asked=asked), "stream_host",
                         ["--master", "spark://m:7077", "--name", "q"], lease_timeout=180)
    assert pid == 4242
    argv, timeout = asked[0]
    assert argv == ["streamwarden", "launch", "--lease-timeout", "180", "--", "--master", "spark://m:7077",
                    "--name", "q"]
    assert 180 < timeout <= 300
    launch_on_host(replying(Answer(Outcome.STARTED, pid=4343), asked=asked), "stream_host", [], 180, standby=True)
    assert asked[1][0][:3] == ["streamwarden", "launch", "--standby"]


def test_launch_refusals_raise_what_a_local_launch_raises() -> None:
    holder = LeaseHolder(pid=11, pgid=10, host="stream-host", checkpoint="/data/checkpoints/q")
    with pytest.raises(StreamAlreadyRunningError) as running:
        launch_on_host(replying(Answer(Outcome.ALREADY_RUNNING, "running", holder=asdict(holder))), "h", [], 30)
    assert running.value.holder == holder
    with pytest.raises(StreamHeldError, match="held by recover_stream"):
        launch_on_host(replying(Answer(Outcome.HELD, "the stream is held by recover_stream")), "h", [], 30)
    failed = Answer(Outcome.LAUNCH_FAILED, "the stream exited with code 78 before taking the lease",
                    log_path="/data/run/logs/stream-1.log", exit_code=78, log_tail="bad topic name")
    with pytest.raises(StreamLaunchFailedError, match="bad topic name") as launch:
        launch_on_host(replying(failed), "h", [], 30)
    assert launch.value.exit_code == 78 and str(launch.value.log_path) == "/data/run/logs/stream-1.log"


def test_a_host_that_gives_no_answer_is_a_failed_launch_and_a_failed_stop_naming_the_host() -> None:
    silent = replying(None, status=255, stderr="NoValidConnectionsError: Unable to connect to port 2222")
    with pytest.raises(StreamLaunchFailedError, match=r"stream host h1 gave no answer.*exit 255") as launch:
        launch_on_host(silent, "h1", [], 30)
    assert "Unable to connect" in launch.value.tail
    with pytest.raises(StopFailedError, match=r"stream host h1 gave no answer to the halt.*Unable to connect"):
        halt_on_host(silent, "h1", 120, 30)


def test_halt_reports_how_the_stream_was_stopped_or_that_it_survived() -> None:
    asked: list[tuple[list[str], float]] = []
    stopped = Answer(Outcome.STOPPED, stop={"method": "terminated", "pid": 9, "seconds": 3.5})
    outcome = halt_on_host(replying(stopped, asked=asked), "h", 120, 30)
    assert (outcome.method, outcome.pid, outcome.seconds) == (StopMethod.TERMINATED, 9, 3.5)
    assert asked[0][0] == ["streamwarden", "halt", "--drain-timeout", "120", "--term-timeout", "30"]
    assert asked[0][1] > 120 + 2 * 30
    with pytest.raises(StopFailedError, match="survived SIGKILL"):
        halt_on_host(replying(Answer(Outcome.STOP_FAILED, "the stream (pid 9) survived SIGKILL")), "h", 1, 1)

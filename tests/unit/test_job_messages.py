"""Every message type, both ways, through the wire and back (marun.job.messages): what one side's
logic hands its shell is what the other side's logic reads, field for field, after
marun.job.protocol's encoding, signing and type checks. A new field that one side writes and
the other drops fails here."""

from __future__ import annotations

from typing import Any

import pytest

from marun.job.messages import (
    Beat,
    Challenge,
    Done,
    Dump,
    End,
    FailureSaid,
    Hello,
    LeaderBeat,
    Place,
    Refused,
    Restart,
    Running,
    Stacks,
    Start,
    StopJob,
    Stopped,
    Welcome,
    leader_message,
    member_message,
)
from marun.job.protocol import PROTOCOL, decode, encode
from marun.preflight.result import CheckResult, LinkResult, NodeReport
from marun.progress.tracker import NodeReport as ProgressReport
from marun.runtime.failure import Failure

SECRET = b"s" * 32
JOB = "j"
FAILURE = Failure(
    exit_code=3, node=1, host="h1", name="rank3", rank=3, signal=None, log="/l/rank3.log",
    tail=("a", "b"), stacks="stack", no_restart="why not",
)  # fmt: skip


def _through_the_wire(message: Any, **protocol: str) -> dict[str, Any]:
    body = {"job": JOB, "node": 1, "slot": 0}
    body.update(message.to_wire(), **protocol, type=message.KIND)
    return decode(SECRET, JOB, encode(SECRET, body))


MEMBER = [
    Hello(1, 0, "inst", "h1", "lead", True, False, PROTOCOL),
    Beat(1.25, 3.5, None),
    Beat(0.0, None, None),
    FailureSaid(FAILURE, 2, 12.345),
    FailureSaid(Failure(exit_code=130, stop_signal="SIGINT", why="stopped"), 0, None),
    Stopped(2),
    Running(2, 8),
    Stacks("Thread 1\n  frame"),
    End("failed", 3),
]
LEADER = [
    Welcome("inst", 1.7e9),
    Refused("another job's marun"),
    Start(0, {}),
    Start(0, {}, ("a warning",)),
    Start(2, {"MASTER_PORT": "29502"}),
    Restart(1, FAILURE.cause()),
    Restart(1, None),
    StopJob(143, FAILURE),
    StopJob(0, None),
    Dump(True),
    Dump(False),
    Done(3),
    LeaderBeat(),
    Place(2),
]


@pytest.mark.parametrize("message", MEMBER, ids=lambda m: type(m).__name__)
def test_what_a_member_says_is_what_node_0_reads(message: Any) -> None:
    assert member_message(_through_the_wire(message, nonce="n" * 32)) == message


@pytest.mark.parametrize("message", LEADER, ids=lambda m: type(m).__name__)
def test_what_node_0_says_is_what_a_member_reads(message: Any) -> None:
    assert leader_message(_through_the_wire(message)) == message


def test_the_reports_inside_messages_come_back_whole() -> None:
    """The preflight's report and link and a heartbeat's progress: typed on both sides."""
    from marun.job.messages import LinkSaid, PreflightSaid

    report = NodeReport(1, "h1", "10.0.0.2", 40000, (CheckResult("shm", "ok", "64 GiB free"),))
    said = member_message(_through_the_wire(PreflightSaid(report)))
    assert isinstance(said, PreflightSaid) and said.report == report
    link = LinkResult(1, 2, "h1", "h2", "10.0.0.3", 40001, 0.001, 0.0002)
    said = member_message(_through_the_wire(LinkSaid(link)))
    assert isinstance(said, LinkSaid) and said.link == link
    progress = ProgressReport.from_wire({"ranks": [[0, 10, 100, 1.5]], "more": 2})
    beat = member_message(_through_the_wire(Beat(1.0, None, progress)))
    assert isinstance(beat, Beat) and beat.progress == progress


def test_the_challenge_carries_node_0_s_instance_and_version() -> None:
    body = _through_the_wire(Challenge("inst", PROTOCOL), nonce="n" * 32)
    assert (body["type"], body["instance"], body["version"]) == ("challenge", "inst", PROTOCOL)


@pytest.mark.parametrize(
    ("kind", "field", "value", "taken"),
    [
        ("hello", "started", True, True),
        ("hello", "started", 1, False),  # an int is no bool
        ("hello", "version", True, False),  # and a bool no int
        ("hello", "version", 7, True),
        ("hello", "host", "h", True),
        ("hello", "host", None, False),
        ("hb", "idle", 0.5, True),
        ("hb", "idle", 3, True),
        ("hb", "idle", float("nan"), False),
        ("hb", "idle", float("inf"), False),
        ("hb", "idle", False, False),
        ("hb", "progress", {}, True),
        ("stop", "failure", None, True),
        ("stop", "failure", [], False),
        ("welcome", "wall", "1", False),
    ],
)
def test_a_field_is_taken_only_with_its_own_type(
    kind: str, field: str, value: Any, taken: bool
) -> None:
    """protocol.check_fields: a bool is not an int, nor an int a bool; a number is finite."""
    from marun.job.protocol import ProtocolError, check_fields

    if taken:
        check_fields(kind, {field: value})
    else:
        with pytest.raises(ProtocolError, match=field):
            check_fields(kind, {field: value})

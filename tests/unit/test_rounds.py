"""The restart rounds' rule and words (marun.runtime.round_rule), in-process."""

from __future__ import annotations

import socket

from marun.runtime.failure import Failure
from marun.runtime.round_rule import RoundRule, describe_cause, round_line, round_ports


def test_the_budget_is_spent_one_round_at_a_time() -> None:
    rule = RoundRule(budget=2, quick=0.0)
    assert rule.next_round(1, 5.0) is None and rule.round == 1
    assert rule.next_round(1, 5.0) is None and rule.round == 2
    why = rule.next_round(1, 5.0)
    assert why is not None and "max_restarts 2" in why and rule.round == 2


def test_a_fatal_exit_code_gets_no_round() -> None:
    rule = RoundRule(budget=5, fatal=(3,))
    assert "fatal" in str(rule.next_round(3, 100.0)) and rule.round == 0
    assert rule.next_round(4, 100.0) is None  # another code does
    # A failure that is not a process's exit (a lost node, a hang) has no code to be fatal.
    assert rule.next_round(None, None) is None


def test_a_quick_failure_twice_running_ends_it_once_is_forgiven() -> None:
    rule = RoundRule(budget=9, quick=30.0)
    assert rule.next_round(1, 2.0) is None  # quick, once
    assert rule.next_round(1, 45.0) is None  # not quick: the count starts again
    assert rule.next_round(1, 2.0) is None  # quick, once
    why = rule.next_round(1, 2.0)  # quick, twice running
    assert why is not None and "quick_failure" in why and rule.round == 3
    lost = RoundRule(budget=9, quick=30.0)
    assert lost.next_round(None, None) is None and lost.next_round(None, None) is None


def test_each_round_moves_the_port_to_a_free_one_above_the_planned() -> None:
    from marun.inputs.port_probe import bind_error

    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        taken = held.getsockname()[1]
        planned = {"MASTER_PORT": str(taken - 1), "OTHER": "x"}
        assert round_ports(planned, ("MASTER_PORT",), 0) == {"MASTER_PORT": str(taken - 1)}
        # Round 1's first choice (planned + 1) is taken: a free one above it.
        moved = int(round_ports(planned, ("MASTER_PORT",), 1)["MASTER_PORT"])
        assert moved > taken and bind_error(moved) is None
        again = int(round_ports(planned, ("MASTER_PORT",), 1, avoid=moved)["MASTER_PORT"])
        assert again > moved  # never the job's own port
    assert round_ports(planned, ("OTHER", "MISSING"), 1) == {}


def test_no_two_rounds_share_a_port_when_one_in_between_was_busy() -> None:
    """Planned + 1 busy at round 1 makes round 1 take a port above it; once that port is free
    again (round 1's ranks gone), round 2 still moves above it: each round has a port of its
    own, whatever was busy when."""
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        busy = held.getsockname()[1]
        planned = {"MASTER_PORT": str(busy - 1)}
        one = int(round_ports(planned, ("MASTER_PORT",), 1)["MASTER_PORT"])
    assert one > busy
    # Round 2's first choice without the round before's port would be planned + 2 <= `one`.
    two = int(round_ports(planned, ("MASTER_PORT",), 2, before={"MASTER_PORT": one})["MASTER_PORT"])
    assert two > one
    three = round_ports(planned, ("MASTER_PORT",), 3, before={"MASTER_PORT": two})
    assert int(three["MASTER_PORT"]) > two


def test_the_words_of_a_round_name_its_cause() -> None:
    rank = Failure(node=1, rank=3, exit_code=1, name="rank3")
    assert describe_cause(rank) == "node 1 rank 3 exit 1"
    assert describe_cause(rank.but(signal="SIGKILL")) == "node 1 rank 3 signal SIGKILL"
    assert describe_cause(Failure(node=0, name="mpi-leader", exit_code=6)) == (
        "node 0 mpi-leader exit 6"
    )
    assert describe_cause(Failure(node=2, why="node 2 (h) lost")) == "node 2 (h) lost"
    assert describe_cause(Failure()) == "a failure"
    assert describe_cause(None) == "a failure"
    assert round_line(2, 3, rank) == "marun: round 2/3 after node 1 rank 3 exit 1"

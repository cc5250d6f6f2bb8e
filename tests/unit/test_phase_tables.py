"""The job's three state machines (marun.runtime.transitions): each table covers every phase of
its enum, docs/architecture.md draws exactly the table, and no module changes a phase except
through its table's `move`."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from marun.job.phases import JOB_MOVES, MEMBER_MOVES, JobPhase, MemberPhase
from marun.runtime.phase import SUPERVISOR_MOVES, Phase
from marun.runtime.transitions import IllegalMove, Transitions

REPO = Path(__file__).resolve().parents[2]
TABLES: dict[str, tuple[Transitions[Any], type[Enum]]] = {
    "job": (JOB_MOVES, JobPhase),
    "member": (MEMBER_MOVES, MemberPhase),
    "supervisor": (SUPERVISOR_MOVES, Phase),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_phase_is_in_its_table(name: str) -> None:
    table, enum = TABLES[name]
    assert set(table.moves) == set(enum)
    for news in table.moves.values():
        assert set(news) <= set(enum)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_architecture_page_draws_the_table(name: str) -> None:
    table, _ = TABLES[name]
    text = (REPO / "docs" / "architecture.md").read_text()
    found = re.search(rf"<!-- machine: {name} -->\n```mermaid\n(.*?)\n```", text, re.S)
    assert found is not None, f"docs/architecture.md has no diagram of the {name} machine"
    assert found.group(1) == table.mermaid(), (
        f"the {name} diagram differs from its table: paste Transitions.mermaid()'s output"
    )


def test_a_move_the_table_does_not_allow_raises_in_tests_and_is_logged_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logged: list[tuple[str, str, dict[str, object]]] = []

    def log(event: str, level: str = "info", **fields: object) -> None:
        logged.append((event, level, fields))

    with pytest.raises(IllegalMove, match="done -> running"):
        JOB_MOVES.move(JobPhase.DONE, JobPhase.RUNNING, log)
    monkeypatch.delenv("MARUN_STRICT_PHASES")
    assert JOB_MOVES.move(JobPhase.DONE, JobPhase.RUNNING, log) is JobPhase.DONE
    assert logged == [
        (
            "illegal_phase_move",
            "error",
            {"machine": "job (node 0)", "old": "done", "new": "running"},
        )
    ]
    assert JOB_MOVES.move(JobPhase.RUNNING, JobPhase.RUNNING, log) is JobPhase.RUNNING  # no move


def test_phases_change_only_through_their_tables() -> None:
    """An assignment to a phase outside the constructors and the one `_enter`/`_move` of each
    machine would bypass the table."""
    pattern = re.compile(r"self\.(_phase|phase) = (?!.*MOVES\.move)")
    allowed = {("runtime/node_machine.py", "__init__"), ("job/job_state.py", "__init__")}
    allowed.add(("job/member_machine.py", "__init__"))
    found = []
    for path in sorted((REPO / "src" / "marun").rglob("*.py")):
        function = ""
        for line in path.read_text().splitlines():
            head = re.match(r"\s*def (\w+)", line)
            if head:
                function = head.group(1)
            if pattern.search(line):
                where = (str(path.relative_to(REPO / "src" / "marun")), function)
                if where not in allowed:
                    found.append(f"{where[0]}:{function}: {line.strip()}")
    assert not found, found


_TITLES = {"JobPhase": "job", "MemberPhase": "member", "Phase": "supervisor"}


def _labelled_diagrams(path: Path) -> dict[str, set[tuple[str, str]]]:
    """The edges of each labelled state diagram of a page (`state "... (JobPhase)" as x {`),
    by machine; labels and the start and end markers left out."""
    found: dict[str, set[tuple[str, str]]] = {}
    machine = None
    for line in path.read_text().splitlines():
        head = re.match(r'\s*state "[^"]*[(\uff08](\w+)[)\uff09]" as \w+ \{', line)
        if head:
            machine = _TITLES.get(head.group(1))
            continue
        edge = re.match(r"\s*(\w+) --> (\w+)", line)
        if machine and edge and "[*]" not in line:
            found.setdefault(machine, set()).add((edge.group(1), edge.group(2)))
        if line.strip() == "}":
            machine = None
    return found


@pytest.mark.parametrize("page", ["docs/supervision.md", "docs/zh/restart-rounds.md"])
def test_the_labelled_diagrams_have_exactly_the_tables_moves(page: str) -> None:
    drawn = _labelled_diagrams(REPO / page)
    assert set(drawn) == set(TABLES), f"{page}: a machine's diagram is missing"
    for name, edges in drawn.items():
        table, _ = TABLES[name]
        moves = {(a.name.lower(), b.name.lower()) for a, bs in table.moves.items() for b in bs}
        assert edges == moves, (page, name, "drawn, not in the table:", edges - moves,
                                "in the table, not drawn:", moves - edges)  # fmt: skip

"""marun.inputs.records against dataclasses: the same class made both ways behaves the same way, in
every rule marun.inputs.records keeps (its docstring lists them), and `marun run`'s path to exec no
longer imports dataclasses (tests/cli/test_run_starts_the_plan.py checks the modules loaded)."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from marun.inputs import records
from marun.inputs.settings import Settings
from marun.plan.launch_plan import LaunchPlan, Supervision

SEEN: list[str] = []


def _both(frozen: bool) -> tuple[Any, Any]:
    """One class body, made by dataclasses and by marun.inputs.records."""

    def body(decorate: Callable[..., Any], field: Callable[..., Any]) -> Any:
        @decorate(frozen=frozen)
        class Thing:
            """A thing."""

            name: str
            count: int = 1
            tags: tuple[str, ...] = ()
            env: dict[str, str] = field(default_factory=dict)
            note: str | None = field(default=None, compare=False)

            def __post_init__(self) -> None:
                SEEN.append(self.name)

            def twice(self) -> int:
                return 2 * self.count

        return Thing

    return body(dataclasses.dataclass, dataclasses.field), body(records.dataclass, records.field)


def _made_as_the_dataclass_is(cls: Any) -> None:
    SEEN.clear()
    a = cls("a", 2, env={"X": "1"})
    assert SEEN == ["a"]  # __post_init__, once, last
    shown = (a.name, a.count, a.tags, a.env, a.note, a.twice())
    assert shown == ("a", 2, (), {"X": "1"}, None, 4)
    assert cls("b").env is not cls("b").env  # a fresh default_factory value each time
    assert cls.count == 1 and not hasattr(cls, "env")  # class attributes as dataclasses
    with pytest.raises(TypeError):
        cls()  # a field without a default is required
    with pytest.raises(TypeError):
        cls("a", nope=1)
    with pytest.raises(TypeError):
        cls("a", 1, (), {}, None, "six")  # more positional arguments than fields
    with pytest.raises(TypeError):
        cls("a", name="b")  # a field given twice
    assert cls(note="n", name="k").name == "k"  # by name, in any order


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("warm", [False, True], ids=["first instances", "compiled"])
def test_a_record_is_made_and_shown_as_the_dataclass_is(frozen: bool, warm: bool) -> None:
    """Both __init__s of a record: the first COMPILE_AFTER instances' (bound by hand, nothing
    compiled) and the compiled one that follows."""
    made, ours = _both(frozen)
    if warm:
        for i in range(records.COMPILE_AFTER):
            ours(str(i))
        assert ours.__init__.__code__.co_filename == "<record _both.<locals>.body.<locals>.Thing>"
    else:
        assert ours.__init__.__code__.co_filename == records.__file__
    for cls in (made, ours):
        _made_as_the_dataclass_is(cls)
    assert repr(ours("a", 2)).replace(ours.__qualname__, "T") == repr(made("a", 2)).replace(
        made.__qualname__, "T"
    )
    assert [(f.name, f.type) for f in records.fields(ours)] == [
        (f.name, f.type) for f in dataclasses.fields(made)
    ]
    assert ours.__match_args__ == made.__match_args__
    assert ours.__doc__ == "A thing." and ours.__init__.__qualname__.endswith("Thing.__init__")


@pytest.mark.parametrize("frozen", [True, False])
def test_equality_hashing_and_assignment_follow_the_dataclass(frozen: bool) -> None:
    made, ours = _both(frozen)
    for cls in (made, ours):
        # env=(): a hashable stand-in for the dict, so that the hash of the whole can be taken
        a, b = cls("a", env=(), note="x"), cls("a", env=(), note="y")
        assert a == b and a != cls("a", 3, env=()) and (a == ("a",)) is False  # note: compare=False
        if frozen:
            assert hash(a) == hash(b)
            with pytest.raises(AttributeError):
                a.count = 5
            with pytest.raises(AttributeError):
                del a.count
        else:
            with pytest.raises(TypeError):
                hash(a)  # eq without frozen: unhashable
            a.count = 5
            assert a.count == 5
    if frozen:
        with pytest.raises(AttributeError, match="cannot assign to field 'name'"):
            ours("a").name = "b"  # the words of dataclasses' FrozenInstanceError


def test_replace_and_fields_take_records_and_dataclasses() -> None:
    made, ours = _both(True)
    for cls in (made, ours):
        SEEN.clear()
        a = cls("a", 2, env={"X": "1"})
        b = records.replace(a, count=3)
        assert (b.name, b.count, b.env, SEEN) == ("a", 3, {"X": "1"}, ["a", "a"])  # __init__ ran
        with pytest.raises(TypeError):
            records.replace(a, nope=1)
        assert [f.name for f in records.fields(a)] == ["name", "count", "tags", "env", "note"]


def test_a_record_pickles_and_copies() -> None:
    plan_supervision = Supervision(grace_period=5.0, max_restarts=1, preload=("torch",))
    assert pickle.loads(pickle.dumps(plan_supervision)) == plan_supervision
    assert records.replace(Settings(), spares=2).spares == 2
    assert not dataclasses.is_dataclass(LaunchPlan)  # a record, as the path to exec needs


def test_what_records_do_not_do_is_refused() -> None:
    @records.dataclass(frozen=True)
    class Base:
        a: int = 0

    with pytest.raises(TypeError):

        @records.dataclass(frozen=True)
        class Child(Base):
            b: int = 0

    with pytest.raises(ValueError):
        records.field(default=1, default_factory=list)  # type: ignore[call-overload]

    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):

        @records.dataclass(frozen=True)
        class Unordered:
            a: int = 0
            b: int  # type: ignore[misc]

"""One list of launch modes (marun.plan.modes.MODES); every other list of them must agree."""

from __future__ import annotations

import re
from importlib import import_module

from conftest import REPO
from marun.plan.modes import MODES, PLANNERS


def test_cli_modes_are_the_planners() -> None:
    from marun.cli import Mode, SimMode

    assert [m.value for m in Mode] == ["auto", *MODES]
    assert {m.value for m in SimMode} == set(MODES)


def test_the_fast_run_parser_knows_every_mode() -> None:
    from marun.run_argv import MODE_VALUES

    assert ("auto", *MODES) == MODE_VALUES


def test_every_planner_is_a_module_with_a_plan_function() -> None:
    for mode, module in PLANNERS.items():
        assert callable(getattr(import_module(module), "plan", None)), mode


def test_simulated_and_doctor_modes_are_modes() -> None:
    from marun.doctor import FRAMEWORKS
    from marun.sim.simulate import SIM_MODES

    assert set(SIM_MODES) <= set(MODES)
    assert set(FRAMEWORKS) <= set(MODES)


def test_the_readme_table_lists_every_mode() -> None:
    readme = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \|", readme, flags=re.MULTILINE)
    assert rows == list(MODES)

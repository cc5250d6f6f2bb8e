"""One list of launch modes (marun.plan.modes.MODES); every other list of them must agree."""

from __future__ import annotations

from marun.plan.modes import MODES, PLANNERS


def test_cli_modes_are_the_planners() -> None:
    from marun.cli import Mode, SimMode

    assert [m.value for m in Mode] == ["auto", *MODES]
    assert {m.value for m in SimMode} == set(MODES)
    assert set(PLANNERS) == set(MODES)


def test_simulated_modes_are_modes() -> None:
    from marun.sim.simulate import SIM_MODES

    assert set(SIM_MODES) <= set(MODES)

"""One list of launch modes (marun.plan.modes.MODES); every other list of them must agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO
from marun.inputs.injected import Platform, read_platform
from marun.inputs.settings import Settings
from marun.launch import build_plan, planner
from marun.plan import modes
from marun.plan.coordination import JobShape
from marun.plan.launch_plan import LaunchPlan, NodePlan
from marun.plan.modes import MODES


def test_cli_modes_are_the_planners() -> None:
    from marun.command.cli import Mode, SimMode

    assert [m.value for m in Mode] == ["auto", *MODES]
    assert {m.value for m in SimMode} == set(MODES)


def test_the_fast_run_parser_knows_every_mode() -> None:
    from marun.run_argv import MODE_VALUES

    assert ("auto", *MODES) == MODE_VALUES


def test_every_mode_has_a_planner() -> None:
    for mode in MODES:
        assert callable(planner(mode)), mode
    with pytest.raises(KeyError):
        planner("auto")


def test_simulated_and_doctor_modes_are_modes() -> None:
    from marun.doctor import FRAMEWORKS
    from marun.sim.simulate import SIM_MODES

    assert set(SIM_MODES) <= set(MODES)
    assert set(FRAMEWORKS) <= set(MODES)


def test_the_readme_table_lists_every_mode() -> None:
    readme = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \|", readme, flags=re.MULTILINE)
    assert rows == list(MODES)


# -- every planner states the job's shape (marun.plan.coordination.JobShape) -------------------

TABLE = REPO / "tests" / "data" / "ranktables" / "server_list_2x8.json"
TWO_NODES = {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": "127.0.0.1,127.0.0.2"}
TF_FLAGS = ["--task_index", "1", "--job_name", "worker"]
TF_FLAGS += ["--ps_hosts", "127.0.0.1:2222,127.0.0.2:2222"]
TF_FLAGS += ["--worker_hosts", "127.0.0.1:2223,127.0.0.2:2223"]
# mode -> (appended words, environment, the shape its planner states): node 1 of two.
SHAPES: dict[str, tuple[list[str], dict[str, str], JobShape]] = {
    "pytorch": (
        ["--init_method", "tcp://127.0.0.1:29500", "--rank", "1", "--world_size", "2"],
        TWO_NODES,
        JobShape("127.0.0.1", 2, 1),
    ),
    # ps0 ps1 worker0 worker1: worker 0 (node 2) leads; each task has its own host lists.
    "tensorflow": (TF_FLAGS, TWO_NODES, JobShape("127.0.0.1", 4, 3, 2, hosts_in_id=False)),
    "mindspore": ([], {**TWO_NODES, "MA_NUM_GPUS": "1"}, JobShape("127.0.0.1", 2, 1)),
    # rank 9: server 1's second device, one marun per device
    "ascend": (
        [],
        {"RANK_TABLE_FILE": str(TABLE), "RANK_ID": "9"},
        JobShape("192.0.2.11", 2, 1, 0, 8, 1, addresses=("192.0.2.11", "192.0.2.12")),
    ),
    "mpi": ([], TWO_NODES, JobShape("127.0.0.1", 2, 1)),
}


def _platform(tmp_path: Path, appended: list[str], env: dict[str, str]) -> Platform:
    ssh = tmp_path / "ssh"  # the platform's key pair, which MPI mode needs on several nodes
    ssh.mkdir(mode=0o700, exist_ok=True)
    for name in ("id_rsa", "id_rsa.pub", "authorized_keys"):
        (ssh / name).write_text("key\n")
        (ssh / name).chmod(0o600)
    (tmp_path / "train.py").write_text("print(1)\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env}
    settings = Settings(nic="lo", ssh_dir=str(ssh))
    return read_platform(["train.py", *appended], env, str(tmp_path), settings)


def test_every_mode_has_a_shape_case() -> None:
    assert set(SHAPES) == set(MODES), "add the new mode's case to SHAPES"


@pytest.mark.parametrize("mode", MODES)
def test_every_planner_states_the_job_shape(mode: str, tmp_path: Path) -> None:
    appended, env, shape = SHAPES[mode]
    plan = build_plan(mode, _platform(tmp_path, appended, env))
    assert plan.shape == shape
    assert plan.coordination is not None  # every mode is on the job's spine, MPI too
    got = plan.coordination
    assert (got.host, got.nodes, got.index, got.leader) == (
        shape.host,
        2 if mode != "tensorflow" else 4,
        shape.index,
        shape.leader,
    )
    assert (got.slots, got.slot) == (shape.slots, shape.slot)


def test_a_planner_that_states_no_shape_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new mode cannot fall through as "one node" with no coordination."""

    def shapeless(platform: Platform, all_nodes: bool) -> LaunchPlan:
        return LaunchPlan("shapeless", (NodePlan(0, platform.hostname),))

    monkeypatch.setattr(modes, "MODES", (*MODES, "shapeless"))
    platform = _platform(tmp_path, [], {})
    with pytest.raises(TypeError, match="shapeless planner's plan states no job shape"):
        modes.plan_with("shapeless", platform, lambda mode: shapeless)


def test_the_architecture_doc_names_every_list_of_modes() -> None:
    """docs/architecture.md's "Adding a mode" names every place a new mode goes, the ones this
    file checks: following it is enough."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    section = doc.split("## Adding a mode", 1)[1].split("\n## ", 1)[0]
    for place in (
        "plan/modes/",
        "JobShape",
        "`MODES`",
        "launch.planner",
        "run_argv.MODE_VALUES",
        "`Mode`",
        "`SimMode`",
        "README.md",
        "tests/unit/test_modes.py",
        "SHAPES",
        "SIM_MODES",
        "doctor.FRAMEWORKS",
    ):
        assert place in section, place

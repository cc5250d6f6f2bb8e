"""Warm restarts' pure parts (docs/warm-restarts.md): the `preload` option's checks on every path
(command line, environment, config file, plan), what a spare is started with and told, and the
node's rule for when spares start. The spares themselves run in tests/cli/test_warm_restarts.py
and tests/e2e/test_e2e_warm_restart.py."""

from __future__ import annotations

import json
import marshal
from pathlib import Path

import pytest

from conftest import run_marun
from marun.errors import InputError
from marun.inputs.settings import load_settings
from marun.plan.launch_plan import ROUND_VARS, Supervision, warm_entry
from marun.plan.modes import preload_cost
from marun.runtime.node_actions import StartWarmSpares, after_round_started
from marun.runtime.reaper import Ending
from marun.runtime.spare_program import spare_argv
from marun.runtime.warm_spare import describe_end, heard_state, spare_env, start_message


def _script(tmp_path: Path) -> str:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return "train.py"


# -- the option --------------------------------------------------------------------------


def test_preload_needs_restart_rounds() -> None:
    with pytest.raises(InputError, match=r"^preload='torch': expected restart rounds to serve"):
        Supervision(preload=("torch",))
    assert Supervision(preload=("torch", "numpy.linalg"), max_restarts=1).preload


@pytest.mark.parametrize("name", ["", "1torch", "torch-x", "torch.", "a b"])
def test_preload_takes_module_names_only(name: str) -> None:
    with pytest.raises(InputError, match="expected module names, comma-separated"):
        Supervision(preload=(name,), max_restarts=1)


def test_preload_comes_from_the_command_line_the_environment_and_the_config_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "marun.yaml").write_text("preload: [torch, numpy]\n")
    loaded = load_settings({}, {}, str(tmp_path))
    assert loaded.settings.preload == ("torch", "numpy")
    loaded = load_settings({}, {"MARUN_PRELOAD": "torch, transformers"}, str(tmp_path))
    assert loaded.settings.preload == ("torch", "transformers")
    loaded = load_settings({"preload": "a,b"}, {"MARUN_PRELOAD": "c"}, str(tmp_path))
    assert loaded.settings.preload == ("a", "b")


@pytest.mark.parametrize(
    ("options", "env"),
    [(["--preload", "torch"], {}), ([], {"MARUN_PRELOAD": "torch"})],
)
def test_plan_and_run_refuse_preload_without_rounds_in_one_line(
    tmp_path: Path, options: list[str], env: dict[str, str]
) -> None:
    script = _script(tmp_path)
    for command in ("plan", "run"):
        res = run_marun(
            [command, "--standalone", "--nproc-per-node", "2", *options, "--", script],
            env=env,
            cwd=tmp_path,
        )
        assert res.returncode == 2, res
        assert res.stderr.count("\n") == 1, res.stderr
        assert "preload='torch': expected restart rounds to serve (--max-restarts N" in res.stderr


def test_preload_refuses_a_command_that_is_not_a_python_script(tmp_path: Path) -> None:
    res = run_marun(
        ["plan", "--standalone", "--max-restarts", "1", "--preload", "torch", "--", "true"],
        cwd=tmp_path,
    )
    assert res.returncode == 2, res
    assert res.stderr.count("\n") == 1, res.stderr
    assert "not a Python script; expected a .py script or -m MODULE" in res.stderr


def test_the_plan_shows_the_spares_and_their_cost(tmp_path: Path) -> None:
    script = _script(tmp_path)
    args = ["--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--preload", "torch"]
    res = run_marun(["plan", "--format", "json", *args, "--", script], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["supervision"]["preload"] == ["torch"]
    (note,) = [n for n in data["notes"] if n.startswith("preload torch:")]
    assert "2 spare interpreter(s) on this node" in note and "GB RSS" in note, note
    table = run_marun(["plan", "--format", "table", *args, "--", script], cwd=tmp_path)
    assert "note: preload torch: 2 spare interpreter(s)" in table.stdout, table.stdout
    assert "preload torch" in table.stdout.split("note:")[0], table.stdout


def test_the_spares_cost_is_the_listed_frameworks_own() -> None:
    """`marun plan` states the measured cost of the framework listed (a MindSpore job is not
    told torch's figure), and what a MindSpore spare does not save."""
    torch = preload_cost(("torch", "numpy"))
    assert "0.22 GB RSS each with torch 2.13" in torch and "mindspore" not in torch
    mindspore = preload_cost(("mindspore", "mindspore.communication"))
    assert "0.39 GB RSS each with mindspore 2.10" in mindspore, mindspore
    assert "not its init()" in mindspore and "torch" not in mindspore
    assert preload_cost(("torch", "mindspore")).count("GB RSS each") == 2
    other = preload_cost(("transformers",))
    assert other.startswith("what these modules hold") and "torch 2.13" in other


# -- what a spare is started with and told ------------------------------------------------


def test_what_a_spare_can_run() -> None:
    assert warm_entry(("/py", "/w/train.py", "--lr", "1")) == ("path", "/w/train.py")
    assert warm_entry(("/py", "-m", "pkg.train", "x")) == ("module", "pkg.train")
    assert warm_entry(("mpirun", "-np", "2", "x")) is None
    assert warm_entry(("/bin/sh",)) is None


def test_a_spare_runs_the_scripts_argv_after_its_own_two_words() -> None:
    argv = spare_argv(("/py", "/w/train.py", "--lr", "1"), 7, ("torch", "numpy"))
    assert argv[:2] == ["/py", "-c"]
    assert argv[3:] == ["7", "torch,numpy", "/w/train.py", "--lr", "1"]


def test_a_spare_gets_the_ranks_environment_without_the_rounds_own_variables() -> None:
    planned = {"RANK": "1", "MASTER_PORT": "29500", "MARUN_RESTART_COUNT": "0",
               "MARUN_MAX_RESTARTS": "3", "TORCHELASTIC_RESTART_COUNT": "0"}  # fmt: skip
    env = spare_env({"PATH": "/bin", "RANK": "9"}, planned, frozenset((*ROUND_VARS, "MASTER_PORT")))
    assert env == {"PATH": "/bin", "RANK": "1"}


def test_the_start_message_holds_argv_env_and_cwd() -> None:
    data = start_message(("/py", "x.py"), {"A": "1"}, "/w")
    size = int.from_bytes(data[:8], "big")
    assert size == len(data) - 8
    assert marshal.loads(data[8:]) == {"argv": ["/py", "x.py"], "env": {"A": "1"}, "cwd": "/w"}


def test_what_a_spare_said() -> None:
    assert heard_state(b"") == ("importing", "")
    assert heard_state(b"R") == ("importing", "")
    assert heard_state(b"R\n") == ("ready", "")
    assert heard_state(b"FModuleNotFoundError: x\n") == ("failed", "ModuleNotFoundError: x")
    assert heard_state(b"?\n")[0] == "failed"
    assert describe_end(None) == "died while waiting"
    assert describe_end(Ending(137, 9)) == "died while waiting (SIGKILL)"
    assert describe_end(Ending(3)) == "exited with 3 while waiting"


# -- when spares start --------------------------------------------------------------------


def test_spares_start_after_a_round_while_another_round_may_come() -> None:
    options = Supervision(max_restarts=2, preload=("torch",))
    assert after_round_started(options, 0) == [StartWarmSpares()]
    assert after_round_started(options, 1) == [StartWarmSpares()]
    assert after_round_started(options, 2) == []  # the last round: no spare would be used
    assert after_round_started(Supervision(max_restarts=2), 0) == []

"""Typo'd variables (part 19, item 4): a platform variable a letter or two from one marun reads
(that one unset) is a note; marun's own (`MARUN_*`) is bad input, as a typo'd marun.yaml key is.
`marun doctor` lists the platform variables it read and warns about the typos."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO, WOULD_START, run_marun
from marun.inputs.injected import read_platform
from marun.inputs.variables import PLATFORM_PREFIXES, PLATFORM_VARS, edits, platform_near_misses

SRC = REPO / "src" / "marun"


def test_every_platform_variable_the_source_reads_is_listed() -> None:
    """PLATFORM_VARS is the list of what marun reads: a name in the source that is not in it
    would be taken for a typo of another."""
    found = set()
    for path in SRC.rglob("*.py"):
        for name in re.findall(r'"((?:MA|VC|VK|RANK|ASCEND|TF|MY)_[A-Z0-9_]+)"', path.read_text()):
            found.add(name)
    assert found - set(PLATFORM_VARS) == set()


def test_edits() -> None:
    assert edits("MA_NUM_GPU", "MA_NUM_GPUS") == 1
    assert edits("MARUN_MAX_RESTART", "MARUN_MAX_RESTARTS") == 1
    assert edits("abc", "xyz") == 3


@pytest.mark.parametrize(
    ("env", "found"),
    [
        ({"MA_NUM_GPU": "2"}, [("MA_NUM_GPU", "MA_NUM_GPUS")]),
        ({"MA_NUM_HOST": "2"}, [("MA_NUM_HOST", "MA_NUM_HOSTS")]),
        ({"VC_TASK_INDX": "1"}, [("VC_TASK_INDX", "VC_TASK_INDEX")]),
        ({"RANK_TABLE_FIL": "/x"}, [("RANK_TABLE_FIL", "RANK_TABLE_FILE")]),
        # the real one set too: the platform's own variable, not a typo
        ({"MA_NUM_GPU": "2", "MA_NUM_GPUS": "2"}, []),
        # Volcano's per-task variables, and names far from any marun reads
        ({"VC_WORKER_HOSTS": "a", "VC_PS_NUM": "1", "MA_APP_ID": "x", "MA_JOB_DIR": "/j"}, []),
        ({"MASTER_PORT": "1"}, []),
    ],
)
def test_platform_near_misses(env: dict[str, str], found: list[tuple[str, str]]) -> None:
    assert platform_near_misses(env) == found
    assert all(prefix.endswith("_") for prefix in PLATFORM_PREFIXES)


def test_a_typod_platform_variable_is_a_note_in_the_plan(script: Path) -> None:
    res = run_marun(
        ["plan", "--standalone", "--format", "json", "--", script.name],
        env={"MA_NUM_GPU": "2"},
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert len(data["nodes"][0]["processes"]) == 1
    assert any("MA_NUM_GPU is set but MA_NUM_GPUS" in note for note in data["notes"])


def test_a_typod_platform_variable_is_a_warning_at_run(script: Path) -> None:
    res = run_marun(["run", "--standalone", "--", script.name], {"MA_NUM_GPU": "2"}, script.parent)
    assert res.returncode == WOULD_START
    assert "variable_near_miss" in res.stderr and "MA_NUM_GPUS" in res.stderr


@pytest.mark.parametrize("command", ["plan", "run"])
@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"MARUN_MAX_RESTART": "3"}, "MARUN_MAX_RESTART: not a variable marun reads; expected "),
        ({"MARUN_GRACE_PERIO": "5"}, "MARUN_GRACE_PERIO: not a variable"),
        ({"MARUN_MS_CLIENT_PASWORD": "s3cret"}, "expected MARUN_MS_CLIENT_PASSWORD"),
    ],
)
def test_a_typod_marun_variable_is_bad_input(
    command: str, env: dict[str, str], words: str, script: Path
) -> None:
    res = run_marun([command, "--standalone", "--", script.name], env, script.parent)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("marun: error: ") and res.stderr.count("\n") == 1
    assert words in res.stderr
    assert "s3cret" not in res.stderr


def test_marun_variables_far_from_any_or_beside_the_real_one_are_left_alone(script: Path) -> None:
    # far from every name, or near one that is set (then it is no typo of it)
    env = {"MARUN_MAX_RESTARTS": "1", "MARUN_SOMETHING_ELSE": "x", "MARUN_MAX_RESTART": "1"}
    res = run_marun(["plan", "--standalone", "--", script.name], env, script.parent)
    assert res.returncode == 0, res.stderr


def test_doctor_lists_the_platform_variables_and_warns_on_typos(tmp_path: Path) -> None:
    from marun.doctor import check_variables

    env = {"MA_NUM_HOSTS": "2", "MA_NUM_GPU": "2", "MA_VJ_NAME": "http://u:pw@h", "PATH": "/x"}
    checks = check_variables(read_platform(["x.py"], env, str(tmp_path)))
    listed = checks[0]
    assert (listed.name, listed.status) == ("platform variables", "ok")
    assert "MA_NUM_HOSTS=2" in listed.detail and "PATH" not in listed.detail
    assert "pw" not in listed.detail
    assert [(c.name, c.status) for c in checks[1:]] == [("variable MA_NUM_GPU", "warn")]


@pytest.mark.parametrize(
    ("mode", "status", "word"),
    [
        ("pytorch", "ok", "pytorch mode does not depend on it"),
        ("mindspore", "warn", "MindSpore's device numbering"),
        ("mpi", "warn", "Open MPI"),
        (None, "warn", "MindSpore"),
    ],
)
def test_doctor_host_name_says_what_the_mode_needs(
    mode: str | None, status: str, word: str, tmp_path: Path
) -> None:
    """`doctor --mode pytorch` no longer warns about MindSpore's device numbering."""
    from marun.doctor import check_hostname
    from marun.inputs.records import replace

    env = {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": "w-0.j,w-1.j"}
    platform = replace(read_platform(["x.py"], env, str(tmp_path)), hostname="elsewhere")
    check = check_hostname(platform, mode)
    assert (check.status, word in check.detail) == (status, True), check
    if mode == "pytorch":
        assert "MindSpore" not in check.detail

"""Finding the platform's appended arguments (docs/platform-contract.md) and leaving the user's
alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_marun
from marun.inputs.appended_args import split_appended

INIT = "tcp://192.168.0.10:29500"
PS = "[job-ps-0.job:5000,job-ps-1.job:5001]"
WORKERS = "[job-worker-0.job:6000,job-worker-1.job:6001]"
TF_WORDS = ["--task_index", "1", "--ps_hosts", PS, "--worker_hosts", WORKERS, "--job_name", "ps"]
TF_VALUES = {"task_index": "1", "ps_hosts": PS, "worker_hosts": WORKERS, "job_name": "ps"}

# (id, user's words, appended words, expected values)
CASES = [
    ("nothing-appended", ["train.py", "--lr", "0.1"], [], {}),
    ("script-only", ["train.py"], [], {}),
    # PyTorch-GPU, one node: --init_method only.
    ("pytorch-one-node", ["train.py"], ["--init_method", INIT], {"init_method": INIT}),
    # PyTorch-GPU, several nodes: node rank and node count.
    (
        "pytorch-nodes",
        ["train.py", "--epochs", "3"],
        ["--init_method", INIT, "--rank", "1", "--world_size", "2"],
        {"init_method": INIT, "rank": "1", "world_size": "2"},
    ),
    (
        "pytorch-equals-form",
        ["train.py"],
        [f"--init_method={INIT}", "--rank=0", "--world_size=2"],
        {"init_method": INIT, "rank": "0", "world_size": "2"},
    ),
    # TensorFlow-GPU, several nodes: all four flags.
    ("tensorflow", ["train.py", "--steps", "9"], TF_WORDS, TF_VALUES),
    (
        "tensorflow-worker-only",
        ["train.py"],
        ["--task_index", "0", "--worker_hosts", WORKERS, "--job_name", "worker"],
        {"task_index": "0", "worker_hosts": WORKERS, "job_name": "worker"},
    ),
    # A user's own --rank earlier on the line, not part of the trailing run, is the user's.
    (
        "user-rank-earlier",
        ["train.py", "--rank", "5", "--lr", "0.1"],
        ["--init_method", INIT, "--rank", "1", "--world_size", "2"],
        {"init_method": INIT, "rank": "1", "world_size": "2"},
    ),
    # ... even right before the platform's own --rank (a flag appears once in the run).
    (
        "user-rank-adjacent",
        ["train.py", "--rank", "5"],
        ["--init_method", INIT, "--rank", "1", "--world_size", "2"],
        {"init_method": INIT, "rank": "1", "world_size": "2"},
    ),
    # ... and right before a one-node --init_method, which the platform always puts first.
    (
        "user-world-size-before-init",
        ["train.py", "--world_size", "8"],
        ["--init_method", INIT],
        {"init_method": INIT},
    ),
    # The platform appends nothing for MPI/Ascend: a user's trailing flags that happen to share
    # a name with the platform's stay with the script.
    ("user-rank-world-no-init", ["train.py", "--rank", "0", "--world_size", "2"], [], {}),
    ("user-job-name", ["train.py", "--job_name", "resnet"], [], {}),
    ("user-task-index", ["train.py", "--task_index", "3"], [], {}),
    ("user-job-before-tf", ["train.py", "--job_name", "resnet"], TF_WORDS, TF_VALUES),
    # Flags of two engines together are not something a platform appends.
    (
        "mixed-engines",
        ["train.py", "--init_method", INIT, "--job_name", "worker"],
        [],
        {},
    ),
    # A flag with no value at the very end: nothing is taken.
    ("dangling-flag", ["train.py", "--init_method"], [], {}),
    # The script itself is never taken, whatever it looks like.
    ("script-word-looks-like-flag", ["--init_method", INIT], [], {}),
]


@pytest.mark.parametrize(
    ("user", "appended", "values"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_split_appended(user: list[str], appended: list[str], values: dict[str, str]) -> None:
    words, found = split_appended([*user, *appended])
    assert words == tuple(user)
    assert dict(found.values) == values
    assert found.words == tuple(appended)


def test_empty_command() -> None:
    words, found = split_appended([])
    assert words == ()
    assert dict(found.values) == {}


def test_get_and_contains() -> None:
    _, found = split_appended(["train.py", "--init_method", INIT])
    assert "init_method" in found
    assert "rank" not in found
    assert found.get("init_method") == INIT
    assert found.get("rank") is None


def test_user_flags_reach_the_script_through_the_cli(script: Path) -> None:
    """A single-node TF job (nothing appended) keeps the user's own trailing --rank/--world_size."""
    user_flags = ["--rank", "0", "--world_size", "2"]
    res = run_marun(
        ["plan", "--mode", "tensorflow", "--format", "json", "--", script.name, *user_flags],
        cwd=script.parent,
    )
    assert res.returncode == 0, res.stderr
    proc = json.loads(res.stdout)["nodes"][0]["processes"][0]
    assert proc["argv"][1:] == [str(script), "--rank", "0", "--world_size", "2"]

"""Which names are secret, and that masking covers env, argv and NAME=value words."""

from __future__ import annotations

import pytest

from marun.redact import MASK, is_secret_name, mask_argv, mask_env


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OBS_SECRET_ACCESS_KEY", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("JOB_SHARED_TOKEN", True),
        ("DB_PASSWORD", True),
        ("MY_PASSWD", True),
        ("MA_CREDENTIAL_FILE", True),
        ("AK", True),
        ("SK", True),
        ("MA_AK", True),
        ("obs_sk", True),
        ("api_key", True),
        ("MA_NUM_GPUS", False),
        ("PATH", False),
        ("MASK_RATIO", False),  # "SK" only counts as a whole word
        ("TASK_INDEX", False),
        ("MS_SCHED_HOST", False),
    ],
)
def test_is_secret_name(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_mask_env() -> None:
    assert mask_env({"MA_SK": "s", "RANK": "0"}) == {"MA_SK": MASK, "RANK": "0"}


@pytest.mark.parametrize(
    ("argv", "masked"),
    [
        (
            ["train.py", "--api_key", "abc", "--lr", "1"],
            ["train.py", "--api_key", MASK, "--lr", "1"],
        ),
        (["train.py", "--password=abc"], ["train.py", "--password=" + MASK]),
        (
            ["mpirun", "-x", "TOKEN=abc", "-x", "PATH"],
            ["mpirun", "-x", "TOKEN=" + MASK, "-x", "PATH"],
        ),
        (["train.py", "--data_url=s3://b/k"], ["train.py", "--data_url=s3://b/k"]),
        (["x", "a=b=c"], ["x", "a=b=c"]),
    ],
)
def test_mask_argv(argv: list[str], masked: list[str]) -> None:
    assert mask_argv(argv) == masked

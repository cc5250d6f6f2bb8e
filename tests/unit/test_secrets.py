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


# -- options: a word that ends with a secret word is secret; a word that contains one is not ----


@pytest.mark.parametrize(
    "option",
    [
        "--api_token",
        "--token",
        "--hf-token",
        "--secret_key",
        "--apikey",
        "--apiKey",
        "-password",
        "--db-pass",
        "--pw",
        "--aws_secret",
        "--credentials",
        "--ak",
        "--obs-sk",
    ],
)
def test_secret_options_are_masked(option: str) -> None:
    assert mask_argv(["train.py", option, "v4lue", "--lr", "1"]) == [
        "train.py",
        option,
        MASK,
        "--lr",
        "1",
    ]
    assert mask_argv(["train.py", f"{option}=v4lue"]) == ["train.py", f"{option}={MASK}"]


@pytest.mark.parametrize(
    "option",
    [
        "--num_tokens",
        "--max_tokens",
        "--max-new-tokens",
        "--tokenizer",
        "--keys",
        "--bypass",
        "--task",
        "--mask_ratio",
        "--lr",
    ],
)
def test_counting_options_are_shown(option: str) -> None:
    assert mask_argv(["train.py", option, "512"]) == ["train.py", option, "512"]
    assert mask_argv(["train.py", f"{option}=512"]) == ["train.py", f"{option}=512"]


@pytest.mark.parametrize(
    ("word", "masked"),
    [
        ("https://user:PASS@h/repo.git", f"https://user:{MASK}@h/repo.git"),
        ("tcp://user:pass@host:1234", f"tcp://user:{MASK}@host:1234"),
        ("--data_url=s3://ak:sk@bucket/key", f"--data_url=s3://ak:{MASK}@bucket/key"),
        ("redis://:pw@cache:6379/0", f"redis://:{MASK}@cache:6379/0"),
        ("https://host/path?a=b@c", "https://host/path?a=b@c"),  # no user:password part
        ("user:pass@host", "user:pass@host"),  # not a URL
    ],
)
def test_url_passwords_are_masked(word: str, masked: str) -> None:
    assert mask_argv(["train.py", word]) == ["train.py", masked]
    assert mask_argv(["train.py", "--url", word]) == ["train.py", "--url", masked]
    assert mask_env({"DATA_URL": word}) == {"DATA_URL": masked}


def test_mca_parameters_with_secret_names() -> None:
    argv = [
        "mpirun",
        "--mca",
        "plm_rsh_agent",
        "ssh",
        "-mca",
        "my_token",
        "t0k",
        "--gmca",
        "db_password",
        "pw",
        "--mca",
        "btl",
        "tcp,self",
    ]
    assert mask_argv(argv) == [
        "mpirun",
        "--mca",
        "plm_rsh_agent",
        "ssh",
        "-mca",
        "my_token",
        MASK,
        "--gmca",
        "db_password",
        MASK,
        "--mca",
        "btl",
        "tcp,self",
    ]


def test_dash_p_is_a_password_only_where_it_is_one() -> None:
    # Everything after sshpass is its command line: a later -p is masked too, to be safe.
    assert mask_argv(["sshpass", "-p", "pw", "ssh", "-p", "2222", "h"]) == [
        "sshpass",
        "-p",
        MASK,
        "ssh",
        "-p",
        MASK,
        "h",
    ]
    assert mask_argv(["/usr/bin/mysql", "-pS3cret", "-u", "me"]) == [
        "/usr/bin/mysql",
        f"-p{MASK}",
        "-u",
        "me",
    ]
    assert mask_argv(["/usr/sbin/sshd", "-D", "-p", "36666"]) == [
        "/usr/sbin/sshd",
        "-D",
        "-p",
        "36666",
    ]
    assert mask_argv(["ssh", "-p", "36666", "host"]) == ["ssh", "-p", "36666", "host"]


def test_password_in_an_error_line() -> None:
    from marun.errors import bad_value

    message = str(bad_value("--init_method", "tcp://u:hunter2@h:x", "tcp://HOST:PORT"))
    assert "hunter2" not in message and f"u:{MASK}@h:x" in message


def test_variable_rule_is_unchanged_by_the_option_rule() -> None:
    assert is_secret_name("NUM_TOKENS")  # a variable's name: any KEY/TOKEN/... inside counts
    assert mask_env({"HF_TOKEN": "x", "NUM_TOKENS": "5"}) == {"HF_TOKEN": MASK, "NUM_TOKENS": MASK}

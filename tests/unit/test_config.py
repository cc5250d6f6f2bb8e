"""Settings layers: defaults < YAML file < MARUN_* environment < command line; bad input is one
line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_marun
from marun.errors import InputError
from marun.inputs.settings import Settings, load_settings


def test_defaults(tmp_path: Path) -> None:
    loaded = load_settings({}, {}, str(tmp_path))
    assert loaded.settings == Settings()
    assert loaded.file is None


def test_precedence(tmp_path: Path) -> None:
    (tmp_path / "marun.yaml").write_text("sshd_port: 2000\ngrace_period: 5\nnic: eth9\n")
    env = {"MARUN_SSHD_PORT": "3000", "MARUN_GRACE_PERIOD": "7"}
    loaded = load_settings({"sshd_port": 4000}, env, str(tmp_path))
    s = loaded.settings
    assert (s.sshd_port, s.grace_period, s.nic) == (4000, 7.0, "eth9")
    assert loaded.sources == {"sshd_port": "cli", "grace_period": "env", "nic": "file"}


def test_explicit_and_env_config_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("ms_sched_port: 1111\n")
    b.write_text("ms_sched_port: 2222\n")
    assert load_settings({}, {"MARUN_CONFIG": str(b)}, str(tmp_path)).settings.ms_sched_port == 2222
    loaded = load_settings({}, {"MARUN_CONFIG": str(b)}, str(tmp_path), str(a))
    assert loaded.settings.ms_sched_port == 1111


def test_types(tmp_path: Path) -> None:
    (tmp_path / "marun.yaml").write_text(
        "mpirun_extra_args: ['--mca', 'btl_tcp_if_exclude', 'docker0']\n"
        "per_node: true\nmpi_forward_env: [PATH, 'NCCL_*']\n"
    )
    env = {"MARUN_KEEP_PLATFORM_ARGS": "yes"}
    s = load_settings({}, env, str(tmp_path)).settings
    assert s.mpirun_extra_args == ("--mca", "btl_tcp_if_exclude", "docker0")
    assert s.per_node is True and s.keep_platform_args is True
    assert s.mpi_forward_env == ("PATH", "NCCL_*")
    env2 = {"MARUN_MPIRUN_EXTRA_ARGS": "--mca btl tcp,self -x 'A B'"}
    s2 = load_settings({}, env2, str(tmp_path)).settings
    assert s2.mpirun_extra_args == ("--mca", "btl", "tcp,self", "-x", "A B")


@pytest.mark.parametrize(
    ("content", "env", "message"),
    [
        ("sshd_port: 22\nbogus: 1\n", {}, "unknown key 'bogus'"),
        ("sshd_port: [1, 2\n", {}, "not valid YAML"),
        ("- a\n- b\n", {}, "expected a mapping"),
        ("sshd_port: abc\n", {}, "sshd_port='abc': expected an integer from 1 to 65535"),
        ("per_node: maybe\n", {}, "per_node='maybe'"),
        ("", {"MARUN_GRACE_PERIOD": "soon"}, "MARUN_GRACE_PERIOD='soon'"),
    ],
)
def test_bad_config_is_one_line_exit_2(
    tmp_path: Path, script: Path, content: str, env: dict[str, str], message: str
) -> None:
    (script.parent / "marun.yaml").write_text(content)
    res = run_marun(
        ["plan", "--mode", "pytorch", "--", script.name, "--init_method", "tcp://127.0.0.1:1234"],
        env=env,
        cwd=script.parent,
    )
    assert res.returncode == 2, res.stderr
    assert message in res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout == ""


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="config file="):
        load_settings({}, {}, str(tmp_path), str(tmp_path / "nope.yaml"))


def test_config_errors_name_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "site.yaml"
    cfg.write_text("nope: 1\n")
    with pytest.raises(InputError, match=str(cfg)):
        load_settings({}, {}, str(tmp_path), str(cfg))


def test_every_whole_number_setting_has_its_bounds() -> None:
    """The strict parser needs each integer setting's range: a new one without it would be a
    KeyError (a traceback) instead of a checked value."""
    from marun.inputs.records import fields
    from marun.inputs.settings import INT_RANGES, Settings

    ints = {f.name for f in fields(Settings) if str(f.type).startswith("int")}
    assert ints == set(INT_RANGES)

"""Inputs that once ended in a traceback, a hang or an unchecked value, each now one line of bad
input (exit 2) through the real CLI: files that are not UTF-8, too large, too deeply nested or
named too long; numbers that are not finite or not ASCII digits; host names a resolver chokes
on; values that would break the error line itself (control characters, megabytes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import DATA, run_marun
from marun.errors import InputError, bad_value
from marun.inputs.hosts import check_host, is_host_name, lookup_ipv4, resolve_ipv4
from marun.inputs.numbers import parse_int, parse_port, parse_seconds
from marun.inputs.settings import MAX_CONFIG_BYTES, load_settings
from marun.inputs.textfile import MAX_INPUT_BYTES

INIT = ["--init_method", "tcp://127.0.0.1:29500"]


def _fails_in_one_line(res: object, *words: str) -> str:
    stderr: str = res.stderr  # type: ignore[attr-defined]
    assert res.returncode == 2, stderr  # type: ignore[attr-defined]
    assert stderr.startswith("marun: error: "), stderr
    assert stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr
    for word in words:
        assert word in stderr, stderr
    return stderr


def _plan(cwd: Path, *options: str, env: dict[str, str] | None = None, mode: str = "pytorch"):  # type: ignore[no-untyped-def]
    (cwd / "train.py").write_text("")
    return run_marun(
        ["plan", "--mode", mode, *options, "--", "train.py", *INIT], env=env or {}, cwd=cwd
    )


# -- the strict number parser -----------------------------------------------------------------


@pytest.mark.parametrize("raw", ["²", "\u0661", "+1", "1_0", "1e3", "0x10", "", " ", "-1", "1.0"])
def test_only_ascii_digits_are_integers(raw: str) -> None:
    with pytest.raises(InputError, match="expected an integer from 0 to 9"):
        parse_int("N", raw, 0, 9)


def test_integer_bounds_and_forms() -> None:
    assert parse_int("N", " 7 ", 0, 9) == 7
    assert parse_int("N", 7, 0, 9) == 7
    for bad in ("10", 10, True, "9" * 5000, None):
        with pytest.raises(InputError):
            parse_int("N", bad, 0, 9)
    assert parse_port("P", "65535") == 65535
    with pytest.raises(InputError, match="from 1024 to 65535"):
        parse_port("P", "80", 1024)


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "1e400", float("nan"), "-1", "x"])
def test_seconds_are_finite(raw: object) -> None:
    with pytest.raises(InputError, match="expected a number of seconds"):
        parse_seconds("T", raw)


def test_seconds_forms() -> None:
    assert parse_seconds("T", "2.5") == 2.5
    assert parse_seconds("T", 3) == 3.0


# -- settings: every float setting refuses nan and inf -----------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "grace_period",
        "resolve_timeout",
        "ranktable_timeout",
        "formation_timeout",
        "peer_timeout",
        "recovery_wait",
    ],
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-5"])
def test_float_settings_refuse_non_finite(tmp_path: Path, key: str, value: str) -> None:
    var = "MARUN_" + key.upper()
    with pytest.raises(InputError, match=f"{var}='{value}': expected a number of seconds"):
        load_settings({}, {var: value}, str(tmp_path))
    if value.strip("-").isalpha():  # YAML's own .nan, .inf, -.inf
        (tmp_path / "marun.yaml").write_text(f"{key}: {value[:-3]}.{value[-3:]}\n")
        with pytest.raises(InputError, match="expected a number of seconds"):
            load_settings({}, {}, str(tmp_path))


def test_nan_through_the_cli(tmp_path: Path) -> None:
    _fails_in_one_line(_plan(tmp_path, "--grace-period", "nan"), "--grace-period", "nan")
    _fails_in_one_line(
        _plan(tmp_path, env={"MARUN_RANKTABLE_TIMEOUT": "inf"}), "MARUN_RANKTABLE_TIMEOUT='inf'"
    )


def test_nproc_per_node_beyond_any_machine(tmp_path: Path) -> None:
    """Once spun forever building 10**20 processes."""
    _fails_in_one_line(
        _plan(tmp_path, "--nproc-per-node", "9" * 20), "--nproc-per-node", "from 1 to 1024"
    )


# -- files: encoding, size, nesting, names ----------------------------------------------------


def test_config_file_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_bytes(b"nic: \xff\xfe\n")
    _fails_in_one_line(_plan(tmp_path, "--config", "site.yaml"), "site.yaml", "not UTF-8")


def test_default_marun_yaml_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "marun.yaml").write_bytes(b"\x80\x81: 1\n")
    _fails_in_one_line(_plan(tmp_path), "marun.yaml", "not UTF-8")


def test_config_file_name_too_long(tmp_path: Path) -> None:
    long_name = "c" * 300 + ".yaml"
    res = _plan(tmp_path, "--config", long_name)
    _fails_in_one_line(res, "config file", "too long")
    assert len(res.stderr) < 800  # the name is cut in the message


def test_config_file_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").mkdir()
    _fails_in_one_line(_plan(tmp_path, "--config", "d.yaml"), "config file", "not a directory")


def test_config_nested_too_deeply(tmp_path: Path) -> None:
    (tmp_path / "marun.yaml").write_text("nic: " + "[" * 100_000 + "]" * 100_000 + "\n")
    _fails_in_one_line(_plan(tmp_path), "marun.yaml")


@pytest.mark.parametrize("loader", ["libyaml", "pure Python"])
def test_config_nested_too_deeply_with_either_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loader: str
) -> None:
    """libyaml (in PyYAML's wheels, so the loader marun uses) stops at its nesting limit; the
    pure parser, where a PyYAML is built without it, stops at Python's recursion limit. Either
    way the same line."""
    import yaml

    if loader == "libyaml":
        assert hasattr(yaml, "CSafeLoader"), "PyYAML without libyaml: its wheels ship it"
    else:
        monkeypatch.delattr(yaml, "CSafeLoader")
    (tmp_path / "marun.yaml").write_text("[" * 1500 + "]" * 1500 + "\n")
    with pytest.raises(InputError, match=r"marun\.yaml: nested too deeply: expected a plain"):
        load_settings({}, {}, str(tmp_path))


def test_config_too_large_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / "marun.yaml"
    with open(big, "wb") as fh:  # sparse: the size is what counts, nothing is written
        fh.truncate(MAX_CONFIG_BYTES + 1)
    _fails_in_one_line(_plan(tmp_path), "marun.yaml", f"at most {MAX_CONFIG_BYTES} bytes")


@pytest.mark.parametrize("command", ["plan", "run"])
def test_config_of_three_million_numbers_is_refused_unparsed(tmp_path: Path, command: str) -> None:
    # 6 MB of YAML: parsed, it held plan and run for minutes; its size alone refuses it now.
    (tmp_path / "marun.yaml").write_text("[" + ",".join("7" * 3_000_000) + "]\n")
    (tmp_path / "train.py").write_text("open('started', 'w').close()\n")
    res = run_marun([command, "--mode", "pytorch", "--", "train.py", *INIT], cwd=tmp_path)
    _fails_in_one_line(res, "marun.yaml", "6000002 bytes", f"at most {MAX_CONFIG_BYTES} bytes")
    assert not (tmp_path / "started").exists()


def test_config_list_of_lists_is_not_a_word_list(tmp_path: Path) -> None:
    # Aliases nest a list in itself many times over: stringified, it grows exponentially.
    laughs = "[&a [x, x], &b [*a, *a], &c [*b, *b], &d [*c, *c], [*d, *d]]"
    for words in (laughs, "[[-x, A], -v]"):
        (tmp_path / "marun.yaml").write_text(f"mpirun_extra_args: {words}\n")
        with pytest.raises(InputError, match="mpirun_extra_args"):
            load_settings({}, {}, str(tmp_path))


def _ascend(cwd: Path, table: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    (cwd / "train.py").write_text("")
    return run_marun(
        ["plan", "--mode", "ascend", "--", "train.py"],
        env={"RANK_TABLE_FILE": table, "RANK_ID": "0", **(env or {})},
        cwd=cwd,
    )


@pytest.mark.parametrize("script", ["a" * 5000 + ".py", "a/" * 3000 + "x.sh", "\x1b]0;x\x07.py"])
def test_odd_script_names(tmp_path: Path, script: str) -> None:
    res = run_marun(["plan", "--mode", "pytorch", "--", script, *INIT], cwd=tmp_path)
    _fails_in_one_line(res, "SCRIPT=")
    assert "\x1b" not in res.stderr and "\x07" not in res.stderr


def test_rank_table_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_bytes(b'{"status": "completed\xff"}')
    _fails_in_one_line(_ascend(tmp_path, "t.json"), "rank table", "not UTF-8")


def test_rank_table_nested_too_deeply(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text("[" * 200_000 + "]" * 200_000)
    _fails_in_one_line(_ascend(tmp_path, "t.json"), "rank table", "nested too deeply")


def test_rank_table_too_large_is_not_read(tmp_path: Path) -> None:
    with open(tmp_path / "t.json", "wb") as fh:
        fh.truncate(MAX_INPUT_BYTES + 1)
    _fails_in_one_line(_ascend(tmp_path, "t.json"), "rank table", "bytes")


def test_rank_table_name_too_long(tmp_path: Path) -> None:
    _fails_in_one_line(_ascend(tmp_path, "t" * 5000 + ".json"), "RANK_TABLE_FILE")


def test_rank_table_huge_numbers(tmp_path: Path) -> None:
    table = json.loads((DATA / "ranktables" / "server_list_2x2.json").read_text())
    table["server_list"][0]["device"][0]["rank_id"] = "9" * 5000
    (tmp_path / "t.json").write_text(json.dumps(table))
    _fails_in_one_line(_ascend(tmp_path, "t.json"), "rank_id", "a non-negative integer")


def test_volcano_host_file_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "worker.host").write_bytes(b"node-\xff\nnode-b\n")
    res = _plan(
        tmp_path,
        env={"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "MARUN_VOLCANO_DIR": str(tmp_path)},
        mode="mindspore",
    )
    _fails_in_one_line(res, "worker.host", "not UTF-8")


def test_volcano_host_file_with_a_bad_name(tmp_path: Path) -> None:
    (tmp_path / "worker.host").write_text("node-a\n-oProxyCommand=touch x\n")
    res = _plan(
        tmp_path,
        env={"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "0", "MARUN_VOLCANO_DIR": str(tmp_path)},
        mode="mindspore",
    )
    _fails_in_one_line(res, "worker.host entry='-oProxyCommand=touch x'", "expected a host name")


# -- host names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["a..b", "x" * 64 + ".job", "-a", "a;b", "a b", "a\nb", "", ".", "h:1", "a" * 254, "é.job"],
)
def test_bad_host_names(name: str) -> None:
    assert not is_host_name(name)
    with pytest.raises(InputError, match="expected a host name"):
        check_host("host", name)
    with pytest.raises(InputError, match="expected a host name"):
        lookup_ipv4(name)  # refused before the resolver's IDNA codec raises UnicodeError
    with pytest.raises(InputError):
        resolve_ipv4(name, 5.0)  # and not retried for 5 s


@pytest.mark.parametrize(
    "name", ["localhost", "job-worker-0.job", "A1.b-c.", "x" * 63, "10.0.0.1", "::1", "my_task-0"]
)
def test_good_host_names(name: str) -> None:
    assert check_host("host", name) == name


# -- the error line itself --------------------------------------------------------------------


def test_error_line_escapes_control_characters() -> None:
    message = str(bad_value("X\n", "a\x1b[31mred\r\nnext", "something"))
    assert "\n" not in message and "\x1b" not in message and "\r" not in message
    assert "\\x1b[31mred\\r\\nnext" in message
    assert str(InputError("file a\nb: bad")) == "file a\\nb: bad"


def test_error_line_caps_echoed_values() -> None:
    message = str(bad_value("X", "v" * 10_000_000, "short"))
    assert len(message) < 300
    assert message.endswith("...: expected short")
    assert len(str(InputError("x" * 100_000))) < 1000


def test_huge_value_through_the_cli(tmp_path: Path) -> None:
    # (an environment string is limited to 128 KiB; a file's value can be larger, same path)
    res = _plan(tmp_path, env={"MA_NUM_GPUS": "7" * 100_000})
    stderr = _fails_in_one_line(res, "MA_NUM_GPUS='77")
    assert len(stderr) < 400


def test_control_characters_through_the_cli(tmp_path: Path) -> None:
    res = _plan(tmp_path, env={"MA_NUM_GPUS": "1\n\x1b[2J"})
    _fails_in_one_line(res, "MA_NUM_GPUS='1\\n\\x1b[2J'")


def test_ms_sched_port_is_checked(tmp_path: Path) -> None:
    res = _plan(tmp_path, env={"MS_SCHED_PORT": "²"}, mode="mindspore")
    _fails_in_one_line(res, "MS_SCHED_PORT='²'")

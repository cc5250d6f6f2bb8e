"""MindSpore's secure channel (`ms_ssl`) and parameter servers (`ms_server_num`), as planned.

Certificates are real, made by `openssl` in the test's directory (tests/ms_certs.py): a CA, and
server and client certificates signed by it in password-protected p12 files; an expired one is
made with `openssl x509 -req -days -1`. The planner reads them with the real `openssl`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import run_marun
from marun.errors import InputError
from marun.inputs.injected import read_platform
from marun.inputs.settings import Settings
from marun.plan.launch_plan import LaunchPlan
from marun.plan.modes.mindspore import plan
from ms_certs import PASSWORD, Certs, make_certs, make_expired_pem, make_p12

NODE_ENV = {
    "MA_NUM_HOSTS": "2",
    "MA_NUM_GPUS": "2",
    "VC_TASK_INDEX": "0",
    "VC_WORKER_HOSTS": "127.0.0.1,127.0.0.1",
}
PASSWORDS = {"MARUN_MS_CLIENT_PASSWORD": PASSWORD, "MARUN_MS_SERVER_PASSWORD": PASSWORD}
# The planner reads the certificates with the real `openssl` (their dates, the p12 files): not
# yet a fact gathered on the platform value (part 12's named gap), so these start it.
pytestmark = pytest.mark.starts_processes("openssl: the mindspore planner reads certificates")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"), days=365)


def _tls(certs: Certs, **more: Any) -> dict[str, Any]:
    return {
        "ms_ssl": True,
        "ms_server_cert": str(certs.server),
        "ms_client_cert": str(certs.client),
        "ms_ca_cert": str(certs.ca),
        **more,
    }


def _plan(tmp_path: Path, env: dict[str, str], **settings: Any) -> LaunchPlan:
    settings.setdefault("run_dir", str(tmp_path / "run"))
    (tmp_path / "train.py").touch()
    platform = read_platform(
        ["train.py"], env=env, cwd=str(tmp_path), settings=Settings(nic="lo", **settings)
    )
    return plan(platform, all_nodes=False)


def _refusal(tmp_path: Path, env: dict[str, str], **settings: Any) -> str:
    with pytest.raises(InputError) as exc:
        _plan(tmp_path, env, **settings)
    return str(exc.value)


def test_plans_the_config_file_and_hands_its_path_and_passwords(
    tmp_path: Path, certs: Certs
) -> None:
    launch = _plan(tmp_path, {**NODE_ENV, **PASSWORDS}, **_tls(certs))
    (node,) = launch.nodes
    (config,) = node.files
    assert config.path == str(tmp_path / "run" / "mindspore_tls.json")
    assert config.mode == 0o600
    assert json.loads(config.content) == {
        "server_cert_path": str(certs.server),
        "crl_path": "",
        "client_cert_path": str(certs.client),
        "ca_cert_path": str(certs.ca),
        "cipher_list": Settings().ms_cipher_list,
        "cert_expire_warning_time_in_day": 90,
    }
    assert PASSWORD not in config.content
    assert [p.name for p in node.processes] == ["scheduler", "worker0", "worker1"]
    for proc in node.processes:
        assert proc.env["MARUN_MS_TLS_CONFIG"] == config.path
        assert proc.env["MARUN_MS_CLIENT_PASSWORD"] == PASSWORD
        assert proc.env["MARUN_MS_SERVER_PASSWORD"] == PASSWORD
        assert PASSWORD not in " ".join(proc.argv)
    assert launch.notes == ()  # valid for a year: nothing within the 90-day window


def test_off_by_default_plans_nothing(tmp_path: Path) -> None:
    (node,) = _plan(tmp_path, NODE_ENV).nodes
    assert node.files == ()
    assert not any("MARUN_MS_TLS_CONFIG" in p.env for p in node.processes)


def test_passwords_from_files_and_crl_and_own_cipher_list(tmp_path: Path, certs: Certs) -> None:
    (tmp_path / "client.pw").write_text(PASSWORD + "\n")
    (tmp_path / "server.pw").write_text(PASSWORD + "\n")
    (tmp_path / "revoked.crl").write_text("")  # only its existence is marun's to check
    settings = _tls(
        certs,
        ms_client_password_file="client.pw",
        ms_server_password_file="server.pw",
        ms_crl="revoked.crl",
        ms_cipher_list="ECDHE-RSA-AES128-GCM-SHA256",
        ms_cert_expire_warning_days=30,
    )
    (node,) = _plan(tmp_path, NODE_ENV, **settings).nodes
    data = json.loads(node.files[0].content)
    assert data["crl_path"] == str(tmp_path / "revoked.crl")
    assert data["cipher_list"] == "ECDHE-RSA-AES128-GCM-SHA256"
    assert data["cert_expire_warning_time_in_day"] == 30
    assert node.processes[0].env["MARUN_MS_CLIENT_PASSWORD"] == PASSWORD


def test_warns_within_the_window(tmp_path: Path) -> None:
    soon = make_certs(tmp_path / "soon", days=20)
    launch = _plan(tmp_path, {**NODE_ENV, **PASSWORDS}, **_tls(soon))
    assert len(launch.notes) == 2, launch.notes  # server and client; the CA has a year
    assert all("within ms_cert_expire_warning_days=90" in n for n in launch.notes)
    assert "ms_server_cert" in launch.notes[0] and "in 20 day(s)" in launch.notes[0]


def test_refuses_an_expired_certificate(tmp_path: Path, certs: Certs) -> None:
    expired_ca = make_expired_pem(tmp_path / "old", "ca")
    settings = _tls(certs, ms_ca_cert=str(expired_ca))
    message = _refusal(tmp_path, {**NODE_ENV, **PASSWORDS}, **settings)
    assert message.startswith(f"ms_ca_cert: certificate {expired_ca} expired on ")

    fresh = make_certs(tmp_path / "fresh")
    expired_client = make_p12(tmp_path / "fresh", "old-client", days=-1)
    settings = _tls(fresh, ms_client_cert=str(expired_client))
    message = _refusal(tmp_path, {**NODE_ENV, **PASSWORDS}, **settings)
    assert message.startswith(f"ms_client_cert: certificate {expired_client} expired on ")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"ms_server_cert": None}, "ms_server_cert"),
        ({"ms_ca_cert": "missing.pem"}, "ms_ca_cert"),
        ({"ms_client_cert": "."}, "ms_client_cert"),  # a directory, not a file
        ({"ms_crl": "missing.crl"}, "ms_crl"),
        ({"ms_client_password_file": "missing.pw"}, "ms_client_password_file"),
        ({"ms_cert_expire_warning_days": -1}, "ms_cert_expire_warning_days"),
        ({"ms_cipher_list": " "}, "ms_cipher_list"),
    ],
)
def test_refuses_missing_or_bad_settings(
    tmp_path: Path, certs: Certs, change: dict[str, Any], expected: str
) -> None:
    env = {**NODE_ENV, "MARUN_MS_SERVER_PASSWORD": PASSWORD}
    if "ms_client_password_file" not in change:
        env["MARUN_MS_CLIENT_PASSWORD"] = PASSWORD
    message = _refusal(tmp_path, env, **_tls(certs, **change))
    assert expected in message
    assert not (tmp_path / "run").exists()  # nothing written


def test_refuses_a_missing_or_wrong_password(tmp_path: Path, certs: Certs) -> None:
    env = {**NODE_ENV, "MARUN_MS_CLIENT_PASSWORD": PASSWORD}
    message = _refusal(tmp_path, env, **_tls(certs))
    assert "MARUN_MS_SERVER_PASSWORD" in message and "ms_server_password_file" in message
    wrong = {**NODE_ENV, **PASSWORDS, "MARUN_MS_SERVER_PASSWORD": "not-it"}
    message = _refusal(tmp_path, wrong, **_tls(certs))
    assert message.startswith(f"ms_server_cert={str(certs.server)!r}: expected")
    assert "password opens" in message and "not-it" not in message


def test_without_openssl_says_expiry_was_not_checked(
    tmp_path: Path, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no openssl here
    launch = _plan(tmp_path, {**NODE_ENV, **PASSWORDS}, **_tls(certs))
    assert launch.notes == ("ms_ssl: openssl is not on PATH: certificate expiry was not checked",)
    assert launch.nodes[0].files[0].mode == 0o600


# -- through the real command --------------------------------------------------------------------


def _cli_env(certs: Certs, tmp_path: Path) -> dict[str, str]:
    return {
        **NODE_ENV,
        **PASSWORDS,
        "MARUN_NIC": "lo",
        "MARUN_RUN_DIR": str(tmp_path / "run"),
        "MARUN_MS_SSL": "1",
        "MARUN_MS_SERVER_CERT": str(certs.server),
        "MARUN_MS_CLIENT_CERT": str(certs.client),
        "MARUN_MS_CA_CERT": str(certs.ca),
    }


def test_plan_masks_the_passwords(tmp_path: Path, certs: Certs, script: Path) -> None:
    res = run_marun(
        ["plan", "--mode", "mindspore", "--format", "json", "--", "train.py"],
        env=_cli_env(certs, tmp_path),
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert PASSWORD not in res.stdout + res.stderr
    env = json.loads(res.stdout)["nodes"][0]["processes"][1]["env"]
    assert env["MARUN_MS_CLIENT_PASSWORD"] == env["MARUN_MS_SERVER_PASSWORD"] == "***"
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_refusal_is_one_line_and_starts_nothing(tmp_path: Path, certs: Certs) -> None:
    marker = tmp_path / "started"
    (tmp_path / "train.py").write_text(f"open({str(marker)!r}, 'w')\n")
    env = {**_cli_env(certs, tmp_path), "MARUN_MS_SERVER_PASSWORD": "wrong"}
    res = run_marun(["run", "--mode", "mindspore", "--", "train.py"], env=env, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("marun: error: ms_server_cert")
    assert "wrong" not in res.stderr.replace("'wrong'", "")  # the value is a path, never the pw
    assert not marker.exists() and not (tmp_path / "run").exists()


# -- parameter servers ----------------------------------------------------------------------------


def test_inherited_server_num_is_refused_in_one_line(tmp_path: Path, script: Path) -> None:
    env = {**NODE_ENV, "MARUN_NIC": "lo", "MS_SERVER_NUM": "1"}
    res = run_marun(["plan", "--mode", "mindspore", "--", "train.py"], env=env, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1
    assert res.stderr.startswith("marun: error: MS_SERVER_NUM='1': expected 0")
    assert "ms_server_num" in res.stderr
    # MS_SERVER_NUM=0 asks for nothing: planned as before.
    env["MS_SERVER_NUM"] = "0"
    res = run_marun(["plan", "--mode", "mindspore", "--", "train.py"], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr


def test_servers_planned_when_asked(tmp_path: Path) -> None:
    env = {**NODE_ENV, "MS_ENABLE_RECOVERY": "1", "MS_RECOVERY_PATH": "/shared/recovery"}
    (node,) = _plan(tmp_path, env, ms_server_num=2).nodes
    by_name = {p.name: p for p in node.processes}
    assert list(by_name) == ["scheduler", "server0", "server1", "worker0", "worker1"]
    for proc in node.processes:
        assert proc.env["MS_SERVER_NUM"] == "2"
    server = by_name["server1"]
    assert server.env["MS_ROLE"] == "MS_PSERVER" and server.role == "server"
    assert server.env["MS_SCHED_HOST"] == by_name["scheduler"].env["MS_SCHED_HOST"]
    assert server.env["MS_NODE_ID"] == "server1"  # stable under recovery
    assert Path(server.log).name == "server_1.log"
    # Node 1 runs no server, but its workers wait for node 0's.
    (other,) = _plan(tmp_path, {**NODE_ENV, "VC_TASK_INDEX": "1"}, ms_server_num=2).nodes
    assert [p.name for p in other.processes] == ["worker2", "worker3"]
    assert all(p.env["MS_SERVER_NUM"] == "2" for p in other.processes)


def test_bad_server_num_is_refused(tmp_path: Path) -> None:
    assert "ms_server_num" in _refusal(tmp_path, NODE_ENV, ms_server_num=-1)
    message = _refusal(tmp_path, {**NODE_ENV, "MS_SERVER_NUM": "3"}, ms_server_num=2)
    assert message.startswith("MS_SERVER_NUM='3': expected 2")


def test_a_legacy_p12_is_read_and_a_binary_password_file_refused(
    tmp_path: Path, certs: Certs
) -> None:
    d = certs.server.parent
    legacy = tmp_path / "legacy.p12"
    subprocess.run(
        ["openssl", "pkcs12", "-export", "-legacy", "-in", str(d / "server.pem"),
         "-inkey", str(d / "server.key"), "-out", str(legacy), "-passout", "env:P12_PASS"],
        env={**os.environ, "P12_PASS": PASSWORD}, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    settings = _tls(certs, ms_server_cert=str(legacy))
    (node,) = _plan(tmp_path, {**NODE_ENV, **PASSWORDS}, **settings).nodes
    assert json.loads(node.files[0].content)["server_cert_path"] == str(legacy)

    (tmp_path / "binary.pw").write_bytes(b"\xff\xfe\x00")
    env = {**NODE_ENV, "MARUN_MS_CLIENT_PASSWORD": PASSWORD}
    message = _refusal(tmp_path, env, **_tls(certs, ms_server_password_file="binary.pw"))
    assert message.startswith("ms_server_password_file='binary.pw': expected a UTF-8 text file")


def test_a_password_file_others_may_read_is_noted(tmp_path: Path, certs: Certs) -> None:
    """Kubernetes mounts a secret 0644 by default: said in a note (and a logged warning), not
    refused; a 0600 or 0400 file says nothing."""
    for name, mode in (("client.pw", 0o644), ("server.pw", 0o400)):
        (tmp_path / name).write_text(PASSWORD + "\n")
        (tmp_path / name).chmod(mode)
    settings = _tls(certs, ms_client_password_file="client.pw", ms_server_password_file="server.pw")
    launch = _plan(tmp_path, NODE_ENV, **settings)
    noted = [n for n in launch.notes if "password file" in n]
    assert noted == [
        f"ms_ssl: ms_client_password_file {tmp_path / 'client.pw'} is readable by group and "
        "others (mode 0644): a password file should be 0600 or 0400 (Kubernetes: the secret's "
        "defaultMode: 0400)"
    ]
    (tmp_path / "client.pw").chmod(0o600)
    launch = _plan(tmp_path, NODE_ENV, **settings)
    assert not [n for n in launch.notes if "password file" in n]


# A list with what the documents' example list holds: DHE suites, which MindSpore 2.10 refuses,
# and the typo `ECDHE-R SA` (a space inside a suite's name).
DOCUMENTED_EXAMPLE = (
    "ECDHE-R SA-AES256-GCM-SHA384:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES128-GCM-SHA256:DHE-RSA-AES128-GCM-SHA256:DHE-DSS-AES128-GCM-SHA256"
)


def test_a_cipher_list_mindspore_refuses_is_a_note(tmp_path: Path, certs: Certs) -> None:
    launch = _plan(
        tmp_path, {**NODE_ENV, **PASSWORDS}, **_tls(certs, ms_cipher_list=DOCUMENTED_EXAMPLE)
    )
    (note,) = launch.notes
    assert note.startswith(
        "ms_cipher_list: MindSpore refuses 'ECDHE-R SA-AES256-GCM-SHA384', "
        "'DHE-RSA-AES128-GCM-SHA256', 'DHE-DSS-AES128-GCM-SHA256' (init() fails with 'The "
        "cipher is wrong'"
    )
    # Still written as given: MindSpore, not marun, has the last word.
    assert json.loads(launch.nodes[0].files[0].content)["cipher_list"] == DOCUMENTED_EXAMPLE


@pytest.mark.parametrize(
    ("cipher_list", "refused"),
    [
        (Settings().ms_cipher_list, []),
        ("ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-CCM", []),
        ("ECDHE-RSA-AES128-GCM-SHA256: ECDHE-RSA-AES256-GCM-SHA384", [" ECDHE-RSA-AES256-GCM"]),
        ("HIGH:!aNULL", ["'HIGH'", "'!aNULL'"]),
        ("ECDHE-RSA-AES128-GCM-SHA256:", ["''"]),
        (":".join(f"DHE-X{i}" for i in range(6)), ["'DHE-X0'", "'DHE-X3'", "and 2 more"]),
    ],
)
def test_cipher_notes(cipher_list: str, refused: list[str]) -> None:
    from marun.plan.modes.mindspore_tls import cipher_notes

    notes = cipher_notes(cipher_list)
    assert bool(notes) == bool(refused)
    for word in refused:
        assert word in notes[0]

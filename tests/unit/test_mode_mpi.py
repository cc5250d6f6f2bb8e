"""MPI mode's plan, through the real CLI: sshd (through marun.mpi.sshd_bootstrap) on every node, the
hostfile and mpi-leader (with mpirun's argv) on node 0, sshd only on the others.

The environment is the platform's own (MA_VJ_NAME, MA_TASK_NAME=worker, VC_TASK_INDEX,
MA_NUM_HOSTS, MA_NUM_GPUS, VC_WORKER_HOSTS or a Volcano .host file). Nothing here is mocked
except where noted; the rendered sshd config is checked by the real sshd (`sshd -t`, `sshd -T`,
and a key login over the exact ssh options the plan gives mpirun).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, clean_env, run_marun
from marun.inputs.records import replace
from mpi_plans import (
    JOB,
    files_of,
    job_dir,
    mount_ssh_secret,
    mpirun_of,
    plan_json,
    platform_env,
    procs_of,
)

SECRET_VALUES = ("tok-VALUE-1", "sk VALUE 2", "hunter2")


@pytest.fixture
def job(tmp_path: Path) -> Path:
    return job_dir(tmp_path)


def ssh_words(key: str, port: int = 36666) -> list[str]:
    """The ssh options mpirun and the leader use, word by word."""
    return [
        *("-p", str(port), "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"),
        *("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"),
        *("-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"),
    ]


def leader_argv(job: Path, hosts: int, mpirun: list[str], key: str) -> list[str]:
    run = job / "run" / JOB
    peers = [f"--ssh-option={w}" for w in ssh_words(key)]
    return [
        *(sys.executable, "-m", "marun.mpi.leader", "--hostfile", f"{run}/hostfile"),
        *("--port", "36666"),
        *(peers if hosts > 1 else ()),
        *("--formation-timeout", "600", "--"),
        *mpirun,
    ]


def expected_mpirun(
    job: Path,
    np: int,
    key: str,
    forwarded: list[str],
    *,
    hosts: int = 1,
    tail: tuple[str, ...] = (),
) -> list[str]:
    """mpirun's argv as docs/platform-contract.md and docs/mpi.md give it, flag by flag: on
    several hosts Open MPI's interfaces by network (lo's is 127.0.0.0/8 here) and NCCL's left to
    each node; on one host both by name."""
    run = job / "run" / JOB
    net = "lo" if hosts == 1 else "127.0.0.0/8"
    nccl = ("-x", "NCCL_SOCKET_IFNAME=lo") if hosts == 1 else ()
    return [
        "mpirun",
        *("-np", str(np)),
        *("--hostfile", f"{run}/hostfile"),
        "--mca",
        "plm_rsh_args",
        " ".join(ssh_words(key)),
        "--allow-run-as-root",  # these tests run as root; the non-root case is below
        *("--bind-to", "none", "--map-by", "slot"),
        *("--mca", "pml", "ob1", "--mca", "btl", "^openib"),
        *("--mca", "btl_tcp_if_include", net, "--mca", "oob_tcp_if_include", net),
        "--tag-output",
        *("--mca", "orte_abort_on_non_zero_status", "1"),
        *("--mca", "plm_rsh_no_tree_spawn", "1"),
        *("--mca", "orte_keep_fqdn_hostnames", "1"),
        *nccl,
        *[w for name in forwarded for w in ("-x", name)],
        *("-x", "NCCL_SOCKET_FAMILY=AF_INET", "-x", "HOROVOD_MPI_THREADS_DISABLE=1"),
        sys.executable,
        str(job / "train.py"),
        *tail,
    ]


# The default `mpi_forward_env` (`*`), as docs/mpi.md states it: every variable of node 0's
# container but per-node ones, the login session's, marun's own and Open MPI's.
NOT_FORWARDED = {"MA_TASK_INDEX", "VC_TASK_INDEX", "VK_TASK_INDEX", "MA_CURRENT_IP"}
NOT_FORWARDED |= {"MA_CURRENT_HOST_IP", "HOSTNAME", "NCCL_SOCKET_IFNAME", "HOME", "USER"}
NOT_FORWARDED |= {"LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "MAIL", "TMPDIR"}
NOT_FORWARDED |= {"SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "DISPLAY"}
NOT_FORWARDED |= {"LS_COLORS"}


def default_forwarded(env: Mapping[str, str]) -> list[str]:
    return sorted(
        name
        for name in env
        if name.isidentifier()
        and name not in NOT_FORWARDED
        and not name.startswith(("OMPI_", "ORTE_", "OPAL_", "PMIX_", "MARUN_"))
    )


def _pattern_hosts(n: int) -> list[str]:
    return [f"{JOB}-worker-{i}.{JOB}" for i in range(n)]


_VC = [f"modelarts-job-x-worker-{i}.modelarts-job-x" for i in range(3)]

# (hosts, MA_NUM_GPUS, slots, how the hosts are given, expected host names or None = this host)
CASES = [
    pytest.param(1, 8, 8, "pattern", None, id="1-node-8-gpus"),
    pytest.param(2, 8, 8, "pattern", _pattern_hosts(2), id="2-nodes-pattern"),
    pytest.param(3, 0, 1, "VC_WORKER_HOSTS", _VC, id="3-nodes-cpu-vc-hosts"),
    pytest.param(2, 2, 2, "volcano-file", ["w0.job", "w1.job"], id="2-nodes-volcano-file"),
]


@pytest.mark.parametrize(("hosts", "gpus", "slots", "source", "names"), CASES)
def test_all_nodes_plan(
    job: Path, hosts: int, gpus: int, slots: int, source: str, names: list[str] | None
) -> None:
    extra: dict[str, str] = {}
    if source == "VC_WORKER_HOSTS":
        extra["VC_WORKER_HOSTS"] = ",".join(_VC)
    elif source == "volcano-file":
        (job / "volcano" / "worker.host").write_text("".join(n + "\n" for n in names or []))
    env = platform_env(job, hosts, gpus, **extra)
    data = plan_json(job, env, "--epochs", "3")

    expected_hosts = names or [socket.gethostname()]
    assert data["mode"] == "mpi"
    assert [n["index"] for n in data["nodes"]] == list(range(hosts))
    assert [n["host"] for n in data["nodes"]] == expected_hosts
    run = job / "run" / JOB

    node0 = data["nodes"][0]
    assert files_of(node0)["hostfile"] == "".join(f"{h} slots={slots}\n" for h in expected_hosts)
    assert [f["path"] for f in node0["files"]] == [f"{run}/sshd_config", f"{run}/hostfile"]
    procs = procs_of(node0)
    assert list(procs) == ["sshd", "mpi-leader"]
    forwarded = default_forwarded(clean_env(env))
    assert {"PATH", "LD_LIBRARY_PATH", "MA_NUM_HOSTS", "MA_VJ_NAME"} <= set(forwarded)
    mpirun = expected_mpirun(
        job,
        hosts * slots,
        str(job / "ssh" / "id_rsa"),
        forwarded,
        hosts=hosts,
        tail=("--epochs", "3"),
    )
    leader = procs["mpi-leader"]
    assert leader["argv"] == leader_argv(job, hosts, mpirun, str(job / "ssh" / "id_rsa"))
    assert (leader["role"], leader["rank"], leader["daemon"]) == ("leader", None, False)
    assert leader["env"] == {}
    assert leader["log"] == str(job / "marun_logs" / "mpirun.log")
    assert leader["cwd"] == str(job)

    for node in data["nodes"]:
        sshd = procs_of(node)["sshd"]
        bootstrap = [sys.executable, "-m", "marun.mpi.sshd_bootstrap", "--run-dir", str(run), "--"]
        assert sshd["argv"][:-5] == bootstrap  # the mounted authorized_keys needs no option
        assert sshd["argv"][-4:] == ["-D", "-e", "-f", f"{run}/sshd_config"]
        assert os.path.basename(sshd["argv"][-5]) == "sshd"
        assert (sshd["role"], sshd["daemon"], sshd["rank"]) == ("sshd", True, None)
        assert sshd["log"] == f"{run}/sshd.log"
        assert files_of(node)["sshd_config"] == files_of(node0)["sshd_config"]
    for node in data["nodes"][1:]:
        assert list(procs_of(node)) == ["sshd"]  # daemons only: it ends with the job
        assert [f["path"] for f in node["files"]] == [f"{run}/sshd_config"]

    notes = " ".join(data["notes"])
    assert ("mpi-leader first forms the cluster" in notes) == (hosts > 1)
    assert ("nodes 1-" in notes) == (hosts > 2)
    assert ("node 1 runs sshd only, and ends with the job" in notes) == (hosts == 2)
    assert "no client key" not in notes


def test_this_node_only_on_a_worker(job: Path) -> None:
    """Without --all-nodes, node 2 of 3 plans its sshd only (no hostfile, no mpirun) and the job's
    coordination with node 0, as in every mode."""
    res = run_marun(
        ["plan", "--mode", "mpi", "--format", "json", "--", "train.py"],
        env=platform_env(job, 3, 8, index=2),
        cwd=job,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    (node,) = data["nodes"]
    assert (node["index"], node["host"]) == (2, f"{JOB}-worker-2.{JOB}")
    assert list(procs_of(node)) == ["sshd"]
    assert list(files_of(node)) == ["sshd_config"]
    assert any("nodes 1-2 run sshd only, and end with the job" in n for n in data["notes"])
    coordination = data["coordination"]
    assert (coordination["host"], coordination["port"]) == (f"{JOB}-worker-0.{JOB}", 36668)
    assert (coordination["nodes"], coordination["index"], coordination["leader"]) == (3, 2, 0)


def _sshd_options(node: Mapping[str, Any]) -> list[str]:
    """sshd_bootstrap's options between `--run-dir R` and `--`."""
    argv = procs_of(node)["sshd"]["argv"]
    return list(argv[5 : argv.index("--")])


def test_single_node_without_a_mounted_key_uses_a_per_job_key(job: Path) -> None:
    for name in ("id_rsa", "id_rsa.pub", "authorized_keys"):
        (job / "ssh" / name).unlink()
    data = plan_json(job, platform_env(job, 1, 2))
    run = job / "run" / JOB
    argv = mpirun_of(procs_of(data["nodes"][0])["mpi-leader"]["argv"])
    assert argv[argv.index("plm_rsh_args") + 1].startswith(f"-p 36666 -i {run}/id_ed25519 ")
    assert _sshd_options(data["nodes"][0]) == ["--new-identity", f"{run}/id_ed25519"]
    assert any(f"per-job key at {run}/id_ed25519" in n for n in data["notes"])


# The platform's ssh secret as found (files, their mode), hosts -> sshd_bootstrap's key options,
# or the bad input named. Volcano mounts 0600 for root; a key file of ours that others may read
# is one ssh refuses ("UNPROTECTED PRIVATE KEY FILE").
KEY_CASES = [
    pytest.param(("id_rsa", "id_rsa.pub", "authorized_keys"), 0o600, 3, [], None, id="volcano"),
    pytest.param(
        ("id_rsa", "id_rsa.pub"), 0o600, 2, ["--authorize", "id_rsa.pub"], None, id="pub-only"
    ),
    pytest.param(("id_rsa",), 0o600, 1, [], None, id="1-node-key-only"),
    pytest.param(("id_rsa",), 0o600, 2, None, "authorized_keys or id_rsa.pub", id="no-pub"),
    pytest.param((), 0o600, 2, None, "the platform's ssh key", id="no-key-2-nodes"),
    pytest.param(
        ("id_rsa", "id_rsa.pub", "authorized_keys"),
        0o644,
        2,
        None,
        "='0644': expected 0600: ssh ignores a private key that others can read",
        id="key-0644",
    ),
]


@pytest.mark.parametrize(("present", "mode", "hosts", "options", "error"), KEY_CASES)
def test_mounted_keys(
    job: Path,
    present: tuple[str, ...],
    mode: int,
    hosts: int,
    options: list[str] | None,
    error: str | None,
) -> None:
    ssh = job / "ssh"
    for name in ("id_rsa", "id_rsa.pub", "authorized_keys", "config"):
        (ssh / name).unlink()
    if present:
        mount_ssh_secret(ssh, mode=mode, files=present)
    env = platform_env(job, hosts, 1)
    if error is not None:
        res = _bad(job, env, "train.py")
        assert error in res.stderr
        assert str(ssh) in res.stderr
        return
    assert options is not None
    data = plan_json(job, env)
    expected = [str(ssh / w) if w.startswith("id_rsa") else w for w in options]
    for node in data["nodes"]:
        assert _sshd_options(node) == expected


def test_nic_from_ma_current_ip_and_node_local_vars_stay_home(job: Path) -> None:
    """No configured NIC: MA_CURRENT_IP picks the interface holding it. Variables that are this
    node's own (its index, its address) are never shipped to the other nodes' ranks."""
    env = platform_env(job, 2, 1, MARUN_NIC="", MA_CURRENT_IP="127.0.0.1", VK_TASK_INDEX="0")
    argv = mpirun_of(procs_of(plan_json(job, env)["nodes"][0])["mpi-leader"]["argv"])
    # lo's network, by CIDR: the same on every node whatever it calls its interface
    assert argv[argv.index("btl_tcp_if_include") + 1] == "127.0.0.0/8"
    assert not any(w.startswith("NCCL_SOCKET_IFNAME") for w in argv)  # each node's own
    shipped = {argv[i + 1] for i, w in enumerate(argv) if w == "-x"}
    assert not shipped & {"MA_CURRENT_IP", "VC_TASK_INDEX", "VK_TASK_INDEX"}
    assert "MA_NUM_HOSTS" in shipped


def test_users_nccl_socket_ifname_is_forwarded_by_name(job: Path) -> None:
    env = platform_env(job, 2, 1, NCCL_SOCKET_IFNAME="ib0")
    argv = mpirun_of(procs_of(plan_json(job, env)["nodes"][0])["mpi-leader"]["argv"])
    assert argv.count("NCCL_SOCKET_IFNAME") == 1
    assert not any(w.startswith("NCCL_SOCKET_IFNAME=") for w in argv)


def test_extra_args_replace_marun_defaults(job: Path) -> None:
    """A site's own --mca/--bind-to/-x replace marun's (Open MPI refuses an MCA parameter given
    twice), and go before the script."""
    extra = "--mca btl tcp,self --bind-to core -x PATH --display-map"
    env = platform_env(job, 2, 1, MARUN_MPIRUN_EXTRA_ARGS=extra)
    argv = mpirun_of(procs_of(plan_json(job, env)["nodes"][0])["mpi-leader"]["argv"])
    assert "^openib" not in argv
    assert argv.count("--bind-to") == 1
    assert argv.count("PATH") == 1
    script = argv.index(str(job / "train.py")) - 1
    assert argv[script - len(extra.split()) : script] == extra.split()
    assert argv[argv.index("pml") + 1] == "ob1"  # the rest of marun's defaults stay


@pytest.mark.parametrize(
    ("hosts", "concurrent", "startups"),
    [(63, None, "100:30:200"), (150, "150", "150:30:300")],
)
def test_large_jobs(job: Path, hosts: int, concurrent: str | None, startups: str) -> None:
    """From 64 hosts up, all ssh launches go at once (horovodrun's practice); every sshd takes
    every node's handshake at once."""
    names = ",".join(f"w{i}.job" for i in range(hosts))
    data = plan_json(job, platform_env(job, hosts, 8, VC_WORKER_HOSTS=names))
    argv = mpirun_of(procs_of(data["nodes"][0])["mpi-leader"]["argv"])
    assert argv[argv.index("-np") + 1] == str(hosts * 8)
    if concurrent is None:
        assert "plm_rsh_num_concurrent" not in argv
    else:
        assert argv[argv.index("plm_rsh_num_concurrent") + 1] == concurrent
    assert f"MaxStartups {startups}\n" in files_of(data["nodes"][0])["sshd_config"]


def test_sshd_config_content(job: Path) -> None:
    env = platform_env(job, 2, 1, MARUN_SSHD_PORT="2222", LD_LIBRARY_PATH="/opt/my libs")
    data = plan_json(job, env)
    text = files_of(data["nodes"][1])["sshd_config"]
    run = job / "run" / JOB
    lines = text.splitlines()
    for line in [
        "Port 2222",
        f"HostKey {run}/ssh_host_ed25519_key",
        f"PidFile {run}/sshd.pid",
        f"AuthorizedKeysFile {job}/ssh/authorized_keys {run}/authorized_keys",
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "ChallengeResponseAuthentication no",
        "PermitRootLogin prohibit-password",
        "AllowUsers root",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
    ]:
        assert line in lines
    setenv = next(line for line in lines if line.startswith("SetEnv "))
    assert shlex.split(setenv)[1:3] == [
        f"PATH={os.environ['PATH']}",
        "LD_LIBRARY_PATH=/opt/my libs",
    ]
    assert "$" not in text
    argv = mpirun_of(procs_of(data["nodes"][0])["mpi-leader"]["argv"])
    assert argv[argv.index("plm_rsh_args") + 1].startswith("-p 2222 ")


@pytest.mark.parametrize("fmt", ["json", "table", "yaml"])
def test_secrets_travel_by_name_only(job: Path, fmt: str) -> None:
    """A secret named in mpi_forward_env goes as `-x NAME`; one a pattern matched stays home;
    no secret value appears in any output format."""
    env = platform_env(
        job,
        2,
        1,
        MA_API_TOKEN=SECRET_VALUES[0],
        OBS_SECRET_ACCESS_KEY=SECRET_VALUES[1],
        MARUN_MPI_FORWARD_ENV="PATH,MA_*,VC_*,OBS_SECRET_ACCESS_KEY",
    )
    res = run_marun(
        ["plan", "--mode", "mpi", "--all-nodes", "--format", fmt, "--", "train.py"],
        env=env,
        cwd=job,
    )
    assert res.returncode == 0, res.stderr
    for value in SECRET_VALUES:
        assert value not in res.stdout + res.stderr
    if fmt == "table":
        assert "-x OBS_SECRET_ACCESS_KEY " in res.stdout
    else:
        data = json.loads(res.stdout) if fmt == "json" else yaml.safe_load(res.stdout)
        argv = mpirun_of(procs_of(data["nodes"][0])["mpi-leader"]["argv"])
        shipped = [argv[i + 1] for i, w in enumerate(argv) if w == "-x"]
        assert "OBS_SECRET_ACCESS_KEY" in shipped
        defaults = ("NCCL_SOCKET_IFNAME=", "NCCL_SOCKET_FAMILY=", "HOROVOD_MPI_THREADS_DISABLE=")
        assert not any("=" in s and not s.startswith(defaults) for s in shipped)
        assert "MA_API_TOKEN" not in argv
        assert any("MA_API_TOKEN" in note for note in data["notes"])  # why it stayed home


def _bad(job: Path, env: Mapping[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    res = run_marun(
        ["plan", "--mode", "mpi", "--all-nodes", "--format", "json", "--", *command],
        env=env,
        cwd=job,
    )
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert not (job / "run").exists()
    return res


BAD = [
    pytest.param({"VC_WORKER_HOSTS": ""}, "VC_WORKER_HOSTS=''", id="empty-host-list"),
    pytest.param({"VC_WORKER_HOSTS": "a,b"}, "MA_NUM_HOSTS=3", id="host-count-mismatch"),
    pytest.param(
        {"VC_WORKER_HOSTS": "a b,c,d"}, "VC_WORKER_HOSTS entry='a b'", id="host-with-space"
    ),
    pytest.param({"MARUN_SSHD_PORT": "0"}, "MARUN_SSHD_PORT='0'", id="port-0"),
    pytest.param({"MARUN_SSHD_PORT": "65536"}, "MARUN_SSHD_PORT='65536'", id="port-too-big"),
    pytest.param({"MARUN_SSHD_PORT": "ssh"}, "MARUN_SSHD_PORT='ssh'", id="port-not-a-number"),
    pytest.param({"MARUN_MPIRUN_EXTRA_ARGS": "-np 4"}, "no -np", id="extra-np"),
    pytest.param({"MARUN_MPIRUN_EXTRA_ARGS": "--hostfile h"}, "no --hostfile", id="extra-hosts"),
    pytest.param({"MARUN_MPIRUN_EXTRA_ARGS": "--mca btl"}, "--mca NAME VALUE", id="extra-mca"),
    pytest.param(
        {"MARUN_MPIRUN_EXTRA_ARGS": "-x MY_TOKEN=hunter2"},
        "MY_TOKEN=***",
        id="extra-secret-value",
    ),
    pytest.param({"MARUN_MPIRUN_EXTRA_ARGS": "'open"}, "MARUN_MPIRUN_EXTRA_ARGS", id="extra-quote"),
    pytest.param({"MARUN_MPI_FORWARD_ENV": "PATH,*X"}, "mpi_forward_env='*X'", id="forward-star-x"),
    pytest.param({"MARUN_MPIRUN_EXTRA_ARGS": "0"}, "'0' is not an option", id="extra-stray"),
    pytest.param({"MARUN_MPIRUN_EXTRA_ARGS": "-1"}, "'-1' is not an option", id="extra-number"),
    pytest.param({"MARUN_MPIRUN_EXTRA_ARGS": "-inf"}, "'-inf' is not an option", id="extra-inf"),
    pytest.param(
        {"MARUN_MPIRUN_EXTRA_ARGS": "-oProxyCommand=x"}, "is not an option", id="extra-ssh-opt"
    ),
    pytest.param({"MARUN_MPI_FORWARD_ENV": "PATH,A-B"}, "mpi_forward_env='A-B'", id="forward-name"),
    pytest.param({"MA_VJ_NAME": "../etc"}, "MA_VJ_NAME='../etc'", id="job-name-path"),
    pytest.param({"MARUN_RUN_DIR": "/tmp/a b"}, "run_dir='/tmp/a b'", id="run-dir-space"),
    pytest.param({"MARUN_NIC": "nosuchnic0"}, "nic='nosuchnic0'", id="nic"),
    pytest.param({"VC_TASK_INDEX": "3"}, "VC_TASK_INDEX='3'", id="index-out-of-range"),
    pytest.param(
        {"MARUN_JOB_PORT": "36666"},
        "job_port=36666: expected a port other than sshd_port=36666",
        id="job-port-is-sshd-port",
    ),
    pytest.param(
        {"MARUN_JOB_PORT": "0"},
        "job_port=0: expected a port 1-65535 for an MPI job of",
        id="job-port-off-with-several-nodes",
    ),
    pytest.param({"MARUN_FORMATION_TIMEOUT": "0"}, "formation_timeout=0.0", id="formation-0"),
    pytest.param(
        {"MARUN_FORMATION_TIMEOUT": "inf"}, "MARUN_FORMATION_TIMEOUT='inf'", id="formation-inf"
    ),
    pytest.param({"MARUN_PEER_TIMEOUT": "-1"}, "MARUN_PEER_TIMEOUT='-1'", id="peer-negative"),
    pytest.param({"MARUN_PEER_TIMEOUT": "soon"}, "MARUN_PEER_TIMEOUT='soon'", id="peer-word"),
    # run_mpi.sh's variables: honoured, checked like marun's own, never against a different one
    pytest.param({"MY_SSHD_PORT": "ssh"}, "MY_SSHD_PORT='ssh'", id="my-sshd-port-word"),
    pytest.param(
        {"MY_SSHD_PORT": "2222", "MARUN_SSHD_PORT": "3333"},
        "MY_SSHD_PORT='2222' (the platform's run_mpi.sh variable) but sshd_port=3333: expected "
        "one of them, or the same value in both (set sshd_port, MARUN_SSHD_PORT, alone)",
        id="my-sshd-port-disagrees",
    ),
    # The default port set on purpose does not lose to MY_SSHD_PORT in silence (part 19, item 9).
    pytest.param(
        {"MY_SSHD_PORT": "2222", "MARUN_SSHD_PORT": "36666"},
        "MY_SSHD_PORT='2222' (the platform's run_mpi.sh variable) but sshd_port=36666",
        id="my-sshd-port-disagrees-with-the-default-set",
    ),
    pytest.param({"MY_MPI_SLOTS": "0"}, "MY_MPI_SLOTS='0'", id="my-slots-0"),
    pytest.param(
        {"MY_MPI_SLOTS": "3", "MARUN_NPROC_PER_NODE": "2"},
        "MY_MPI_SLOTS='3' (the platform's run_mpi.sh variable) but nproc_per_node=2",
        id="my-slots-disagree",
    ),
    pytest.param(
        {"MY_MPI_BTL_TCP_IF": "eth9"},
        "MY_MPI_BTL_TCP_IF='eth9' (the platform's run_mpi.sh variable) but nic='lo'",
        id="my-btl-if-disagrees",
    ),
    pytest.param(
        {"MARUN_NIC": "", "MY_MPI_BTL_TCP_IF": "nosuch0"},
        "MY_MPI_BTL_TCP_IF='nosuch0': expected an interface with an IPv4 address",
        id="my-btl-if-absent",
    ),
    pytest.param(
        {"MARUN_NIC": "nosuch0,nosuch1"},
        "nic='nosuch0,nosuch1': expected a list naming at least one interface with an IPv4",
        id="nic-list-none-here",
    ),
    pytest.param(
        {"MARUN_NIC": "lo,,lo"}, "nic='lo,,lo': expected interface names, each once", id="nic-list"
    ),
    # The same host twice: refused by `plan` as by `run` (part 19, item 12).
    pytest.param(
        {"VC_WORKER_HOSTS": "h0.job,h1.job,H0.job."},
        "host of node 2='H0.job.': expected a host of its own (node 0 has it too",
        id="same-host-twice",
    ),
]


@pytest.mark.parametrize(("extra", "message"), BAD)
def test_bad_input(job: Path, extra: dict[str, str], message: str) -> None:
    res = _bad(job, platform_env(job, 3, 1, **extra), "train.py")
    assert message in res.stderr
    assert "hunter2" not in res.stderr


def test_missing_script_is_bad_input(job: Path) -> None:
    assert "SCRIPT='nope.py'" in _bad(job, platform_env(job, 2, 1), "nope.py").stderr


def test_non_root_plan(tmp_path: Path) -> None:
    """As a non-root user (`nobody`, by uid: this test run is root): no --allow-run-as-root,
    sshd admits that user, and the ssh dir is that user's, or the configured one, where Volcano
    mounts the secret 0644 for a non-root user (root's files: ssh accepts them)."""
    import pwd

    from marun.inputs.injected import read_platform
    from marun.inputs.settings import Settings
    from marun.mpi import planner as mpi

    nobody = pwd.getpwnam("nobody")
    env = {"MA_VJ_NAME": JOB, "MA_TASK_NAME": "worker", "VC_TASK_INDEX": "0"}
    env.update({"MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "1", "PATH": os.environ["PATH"]})
    settings = Settings(nic="lo", run_dir=str(tmp_path))
    platform = read_platform([sys.executable], env, str(tmp_path), settings)
    plan = mpi.plan(replace(platform, uid=nobody.pw_uid), all_nodes=True)
    argv = plan.nodes[0].processes[1].argv
    assert "--allow-run-as-root" not in argv
    assert f"-i {tmp_path}/{JOB}/id_ed25519 " in " ".join(argv)  # nobody has no mounted key
    config = plan.nodes[0].files[0].content
    assert "AllowUsers nobody\n" in config
    assert f"AuthorizedKeysFile {nobody.pw_dir}/.ssh/authorized_keys " in config

    ssh = tmp_path / "ssh"
    ssh.mkdir()
    mount_ssh_secret(ssh, mode=0o644)
    env["MA_NUM_HOSTS"] = "2"
    settings = replace(settings, ssh_dir=str(ssh))
    platform = read_platform([sys.executable], env, str(tmp_path), settings)
    plan = mpi.plan(replace(platform, uid=nobody.pw_uid), all_nodes=True)
    assert f"-i {ssh}/id_rsa " in " ".join(plan.nodes[0].processes[1].argv)
    assert f"AuthorizedKeysFile {ssh}/authorized_keys " in plan.nodes[1].files[0].content


def test_find_sshd(tmp_path: Path) -> None:
    from marun.mpi.planner import find_sshd

    assert find_sshd("/nonexistent", extra_dirs=()) is None
    sshd = tmp_path / "sshd"
    sshd.write_text("#!/bin/sh\n")
    sshd.chmod(0o755)
    assert find_sshd("/nonexistent", extra_dirs=(str(sshd.parent),)) == str(sshd)
    if shutil.which("sshd"):
        assert find_sshd(os.environ["PATH"]) == shutil.which("sshd")


def test_plan_without_sshd_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine has sshd installed, so its absence is simulated by replacing the lookup."""
    from marun.inputs.injected import read_platform
    from marun.inputs.settings import Settings
    from marun.mpi import planner as mpi

    monkeypatch.setattr(mpi, "find_sshd", lambda *_: None)
    env = {"MA_VJ_NAME": JOB, "MA_NUM_HOSTS": "1", "PATH": os.environ["PATH"]}
    platform = read_platform([sys.executable], env, str(REPO), Settings(nic="lo"))
    plan = mpi.plan(platform, all_nodes=False)
    assert plan.nodes[0].processes[0].argv[-5] == "sshd"
    assert any("the image needs openssh-server" in n for n in plan.notes)


# -- the template: found in a checkout and in an installed wheel's layout ----------------------


def test_missing_template_is_an_installation_error() -> None:
    from marun.errors import InputError, MarunError
    from marun.mpi.sshd_config import read_template

    with pytest.raises(MarunError, match="reinstall marun") as info:
        read_template("no-such-template")
    assert not isinstance(info.value, InputError)


def test_user_variables_reach_every_rank_by_name(job: Path) -> None:
    """By default every variable of node 0's container travels as `-x NAME` (S3_*, SHARED_*,
    the user's own, secrets by name), none of the per-node or session ones, no value in argv;
    run_mpi.sh's Horovod defaults unless the user set them."""
    env = platform_env(
        job,
        2,
        1,
        S3_ENDPOINT="https://obs.example",
        SHARED_DIR="/cache",
        MY_FLAG="1",
        MY_API_KEY="hunter2",
        HOROVOD_MPI_THREADS_DISABLE="0",
        OMPI_MCA_x="y",
    )
    data = plan_json(job, env)
    argv = mpirun_of(procs_of(data["nodes"][0])["mpi-leader"]["argv"])
    shipped = [argv[i + 1] for i, w in enumerate(argv) if w == "-x"]
    for name in (
        "S3_ENDPOINT",
        "SHARED_DIR",
        "MY_FLAG",
        "MY_API_KEY",
        "HOROVOD_MPI_THREADS_DISABLE",
    ):
        assert name in shipped
    for name in ("VC_TASK_INDEX", "HOME", "PWD", "OMPI_MCA_x", "MARUN_NIC", "MARUN_RUN_DIR"):
        assert name not in shipped
    assert "NCCL_SOCKET_FAMILY=AF_INET" in shipped
    assert "HOROVOD_MPI_THREADS_DISABLE=1" not in shipped  # the user's 0 wins, by name
    assert "hunter2" not in json.dumps(data)


@pytest.mark.parametrize(
    "extra",
    [
        "--mca btl_tcp_if_include eth0",
        "-x FOO --oversubscribe",
        "--report-bindings -v",
        "--bind-to core --map-by ppr:1:node",
        "--output-filename=/tmp/x",
    ],
)
def test_well_formed_mpirun_extra_args_pass(job: Path, extra: str) -> None:
    plan_json(job, platform_env(job, 2, 1, MARUN_MPIRUN_EXTRA_ARGS=extra))


@pytest.mark.parametrize(
    ("hosts", "listed"),
    [
        ("10.0.0.1,10.0.0.2", "hostfile lists addresses:"),
        ("a.job,b.job", "hostfile lists host names:"),
        ("a.job,10.0.0.2", "hostfile lists host names and addresses:"),
    ],
)
def test_the_hostfile_note_says_what_it_lists(job: Path, hosts: str, listed: str) -> None:
    data = plan_json(job, platform_env(job, 2, 1, VC_WORKER_HOSTS=hosts))
    assert any(note.startswith(listed) for note in data["notes"]), data["notes"]


# -- the platform's run_mpi.sh variables ------------------------------------------------------


def test_run_mpi_sh_variables_are_honoured(job: Path) -> None:
    """MY_SSHD_PORT, MY_MPI_SLOTS and MY_MPI_BTL_TCP_IF mean for marun what they meant for
    run_mpi.sh: sshd's port, the slots of each host, the interfaces of btl_tcp_if_include."""
    env = platform_env(
        job, 2, 1, MY_SSHD_PORT="2222", MY_MPI_SLOTS="3", MY_MPI_BTL_TCP_IF="nosuch0,lo"
    )
    env["MARUN_NIC"] = ""
    data = plan_json(job, env)
    node0, node1 = data["nodes"]
    for node in (node0, node1):
        assert "Port 2222\n" in files_of(node)["sshd_config"]
    assert files_of(node0)["hostfile"] == "".join(f"{h} slots=3\n" for h in _pattern_hosts(2))
    argv = mpirun_of(procs_of(node0)["mpi-leader"]["argv"])
    assert argv[argv.index("-np") + 1] == "6"
    assert argv[argv.index("btl_tcp_if_include") + 1] == "nosuch0,lo"
    assert argv[argv.index("oob_tcp_if_include") + 1] == "nosuch0,lo"
    assert "-p 2222" in argv[argv.index("plm_rsh_args") + 1]
    notes = "\n".join(data["notes"])
    assert "MY_SSHD_PORT=2222 (run_mpi.sh's variable) taken as sshd_port 2222" in notes
    assert "MY_MPI_SLOTS=3 (run_mpi.sh's variable) taken as 3 rank(s) per host" in notes
    assert "name the configured interfaces nosuch0,lo (each node uses those it has)" in notes


def test_run_mpi_sh_variables_agreeing_with_marun_settings_pass(job: Path) -> None:
    env = platform_env(
        job,
        2,
        1,
        MY_SSHD_PORT="2222",
        MARUN_SSHD_PORT="2222",
        MY_MPI_SLOTS="2",
        MARUN_NPROC_PER_NODE="2",
        MY_MPI_BTL_TCP_IF="lo",
    )
    data = plan_json(job, env)
    argv = mpirun_of(procs_of(data["nodes"][0])["mpi-leader"]["argv"])
    assert argv[argv.index("-np") + 1] == "4"


def test_empty_run_mpi_sh_variables_are_unset(job: Path) -> None:
    env = platform_env(job, 2, 1, MY_SSHD_PORT="", MY_MPI_SLOTS="", MY_MPI_BTL_TCP_IF="")
    data = plan_json(job, env)
    assert "Port 36666\n" in files_of(data["nodes"][0])["sshd_config"]
    assert not any("run_mpi.sh's variable" in note for note in data["notes"])


def test_a_single_host_nic_list(job: Path) -> None:
    data = plan_json(job, platform_env(job, 1, 2, MARUN_NIC="nosuch0,lo"))
    argv = mpirun_of(procs_of(data["nodes"][0])["mpi-leader"]["argv"])
    assert "NCCL_SOCKET_IFNAME=lo" in argv  # this host's interfaces of the list
    assert argv[argv.index("btl_tcp_if_include") + 1] == "nosuch0,lo"  # as run_mpi.sh gave it


def test_empty_variables_are_not_forwarded(job: Path) -> None:
    # run_mpi.sh skips empty variables; `-x NAME` would set one, empty, on every node.
    for forward in ("*", "EMPTY_ONE,MY_FLAG", "EMPTY*,MY_*"):
        env = platform_env(job, 2, 1, EMPTY_ONE="", MY_FLAG="1", MARUN_MPI_FORWARD_ENV=forward)
        argv = mpirun_of(procs_of(plan_json(job, env)["nodes"][0])["mpi-leader"]["argv"])
        shipped = [argv[i + 1] for i, w in enumerate(argv) if w == "-x"]
        assert "MY_FLAG" in shipped
        assert "EMPTY_ONE" not in shipped


def test_mpi_rank_files_give_each_rank_its_own_output_file(job: Path) -> None:
    """Part 19, item 12: as the platform's MPI documents keep each rank's output in its own
    file, `mpi_rank_files` adds `--output-filename <log_dir>/ranks` (off by default: the tagged
    mpirun.log holds every rank's lines either way)."""
    env = platform_env(job, 2, 1)

    def mpirun(extra: Mapping[str, str]) -> list[str]:
        data = plan_json(job, {**env, **extra})
        return list(procs_of(data["nodes"][0])["mpi-leader"]["argv"])

    assert "--output-filename" not in mpirun({})
    argv = mpirun({"MARUN_MPI_RANK_FILES": "1"})
    at = argv.index("--output-filename")
    assert argv[at + 1] == str(job / "marun_logs" / "ranks")
    assert argv.index("--tag-output") < at < len(argv) - 1

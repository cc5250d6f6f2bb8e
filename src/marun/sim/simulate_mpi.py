"""`marun simulate --mode mpi`: MPI on simulated hosts, one network namespace per node (its own
address, host name, /etc/hosts naming every node as the platform does, /run and /dev/shm), a
Volcano-style ssh secret shared by all, and on each host `marun run --mode mpi` as PID 1, as in
a container. Needs root; says what is missing otherwise."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from marun.errors import InputError, bad_value
from marun.inputs.injected import SSH_KEY, Platform
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec
from marun.sim.shared import JOB, outer_supervision, script_words

if TYPE_CHECKING:
    from marun.sim.netns import NetnsCluster


def run_mpi_simulation(
    platform: Platform,
    nodes: int,
    devices: int,
    marun_options: Sequence[str],
    show_plan: bool = True,
) -> int:
    """MPI on simulated hosts: one network namespace per node (its own address, host name,
    /etc/hosts naming every node as the platform does, /run and /dev/shm), a Volcano-style ssh
    secret shared by all, and on each host `marun run --mode mpi` as PID 1, as in a container.
    Needs root; says what is missing otherwise."""
    from marun.inputs.injected import resolve_command
    from marun.sim.netns import NetnsCluster, available

    if nodes < 1 or devices < 1:
        raise bad_value("--nodes/--devices", f"{nodes}/{devices}", "integers >= 1")
    if not platform.command:
        raise InputError("no script given: expected `marun simulate [OPTIONS] -- SCRIPT [ARGS...]`")
    resolve_command(platform.command, platform.cwd, platform.python)
    reason = available()
    if reason:
        raise InputError(
            f"simulate --mode mpi builds one network namespace per node: {reason}; run it as "
            "root, or simulate the job in another mode"
        )
    from marun.plan.modes.common import log_dir
    from marun.runtime.execute import execute

    sim_dir = os.path.join(log_dir(platform), "simulate")
    watching = outer_supervision(platform, sim_dir)  # checked before anything is made
    ssh_dir = _ssh_secret(sim_dir)
    hosts_dir = os.path.join(sim_dir, "hosts")
    os.makedirs(hosts_dir, exist_ok=True)
    if not platform.settings.console_ranks:
        # sshd's own lines (every login, every disconnect) go to its log only; the ranks'
        # output comes through the leader (the other nodes run sshd only).
        marun_options = (*marun_options, "--console-ranks", "leader")
    with NetnsCluster(nodes, job=JOB, task="worker", workdir=Path(hosts_dir)) as cluster:
        processes = []
        for i in range(nodes):
            host = cluster.host_dir(i)
            (host / "tmp").mkdir(parents=True, exist_ok=True)
            env = _host_env(nodes, devices, i, ssh_dir, host)
            options = (
                "--supervise",
                "--log-dir",
                os.path.join(sim_dir, f"node{i}"),
                *marun_options,
            )
            if i == 0 and show_plan:
                _show_mpi_plan(cluster, platform, env, options)
            processes.append(_host_process(cluster, i, platform, env, options, sim_dir))
        plan = LaunchPlan(
            "simulate-mpi",
            (NodePlan(0, "localhost", processes=tuple(processes)),),
            supervision=watching,
        )
        from marun.launch import open_link

        return execute(plan, open_link)


def _host_process(
    cluster: NetnsCluster,
    i: int,
    platform: Platform,
    env: Mapping[str, str],
    options: Sequence[str],
    sim_dir: str,
) -> ProcessSpec:
    """Host i's `marun run --mode mpi`, PID 1 of its own PID namespace, as in a container."""
    inner = (
        platform.python, "-m", "marun", "run", "--mode", "mpi", *options,
        "--", *script_words(platform),
    )  # fmt: skip
    return ProcessSpec(
        name=f"node{i}",
        argv=tuple(cluster.command(i, inner, pid1=True, cwd=platform.cwd)),
        env=dict(env),
        cwd=platform.cwd,
        log=os.path.join(sim_dir, f"node{i}", "marun.log"),
        role="node",
    )


def _ssh_secret(sim_dir: str) -> str:
    """A fresh key pair where Volcano's ssh plugin mounts it in every pod; its directory."""
    from marun._files import private_dir
    from marun.mpi.run_dir import AUTHORIZED_KEYS
    from marun.mpi.ssh_keys import generate_key, write_authorized_keys

    ssh_dir = os.path.join(sim_dir, "ssh")
    private_dir(ssh_dir)
    key = os.path.join(ssh_dir, SSH_KEY)
    if os.path.exists(key):
        os.remove(key)
        os.remove(key + ".pub")
    generate_key(key, f"{JOB}-simulated")
    write_authorized_keys([key + ".pub"], os.path.join(ssh_dir, AUTHORIZED_KEYS))
    return ssh_dir


def _host_env(nodes: int, devices: int, i: int, ssh_dir: str, host: Path) -> dict[str, str]:
    """What the platform injects in host i's container, and where its files go."""
    return {
        "MA_NUM_HOSTS": str(nodes),
        "MA_NUM_GPUS": str(devices),
        "VC_TASK_INDEX": str(i),
        "MA_VJ_NAME": JOB,
        "MA_TASK_NAME": "worker",
        "MARUN_SSH_DIR": ssh_dir,
        "MARUN_RUN_DIR": str(host / "run"),  # hosts share /tmp: each its own files
        "TMPDIR": str(host / "tmp"),
        "MARUN_SHARED_CONSOLE": "1",
    }


def _show_mpi_plan(
    cluster: NetnsCluster, platform: Platform, env: Mapping[str, str], run_options: Sequence[str]
) -> None:
    """The simulated MPI job's plan, before anything starts, as the other modes show theirs:
    `marun plan --all-nodes` on host 0, so its addresses and interfaces are the simulated
    host's own."""
    import sys

    argv = (
        platform.python, "-m", "marun", "plan", "--mode", "mpi", "--all-nodes", "--format",
        "table", *run_options, "--", *script_words(platform),
    )  # fmt: skip
    res = cluster.run(0, argv, {**os.environ, **env}, timeout=120, cwd=platform.cwd)
    sys.stdout.write(res.stdout + "\n")
    sys.stdout.flush()
    sys.stderr.write(res.stderr)  # a refusal: the run below says it again, and ends

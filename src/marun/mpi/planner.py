"""MPI mode (the platform's Horovod, MPI and MindSpore-GPU engines): sshd on every node, mpirun
on node 0. It replaces the platform's `run_mpi.sh`; docs/mpi.md tells the whole story.

This module only plans; `marun run` carries the plan out. Every node runs sshd; node 0 runs
mpirun besides, and the job's coordination (marun.job, as in every mode) joins the nodes:
- `sshd` (a daemon): `python -m marun.mpi.sshd_bootstrap` makes the run directory private, generates
  the host key (and the per-job client key of a single-node job without a mounted key), refuses
  an sshd whose `sshd -T` accepts passwords, then execs `sshd -D -e -f <run>/sshd_config`.
- node 0: `mpi-leader` (`python -m marun.mpi.leader ... -- mpirun ...`) forms the cluster
  (every host resolved and every peer's sshd letting node 0 in, all at once, within
  `formation_timeout`), rewrites the hostfile with addresses, runs mpirun and exits with its
  status: node 0's end is mpirun's, and the job's (fail-fast: a failure stops every node with
  its code).
- other nodes: daemons only (sshd). Their marun arrives at node 0's coordinator, and ends when
  the job ends, with the job's exit code, as a TensorFlow parameter server's does; node 0 lost,
  or silent for `peer_timeout`, ends it too (docs/supervision.md).

Every generated file lives in the run directory, `<run_dir>/<MA_VJ_NAME or "local">` (file
names in marun.mpi.run_dir). Choices a reviewer should know:
- The hostfile in the plan lists host NAMES (`<host> slots=<n>`). Once the cluster has formed,
  the leader rewrites it with each host's IPv4 address: Open MPI then never waits on DNS
  (Volcano #1972) and has no domain to strip.
- Variables reach the ranks as `-x NAME` only, never `-x NAME=value`: Open MPI ships the values
  inside its launch message to each node's orted, so no value appears in an argv, in `ps` or in
  this plan. The set is `mpi_forward_env`: by default `*`, every variable of node 0's container
  (what the user set for the job, S3_*, SHARED_*, the image's own), as the ranks on node 0 see
  them; the ranks on the other nodes are started by an sshd session, which has none of them.
  Never forwarded: variables that differ per node (VC_TASK_INDEX, MA_CURRENT_IP, HOSTNAME, ...:
  node 0's value would overwrite each node's own), the login session's (HOME, PWD, SHLVL, ...),
  marun's own settings (MARUN_*) and Open MPI's (OMPI_*, PMIX_*). `*` forwards secret-named
  variables too, by name: every container of the job holds the same values already. Narrower
  `PREFIX*` patterns never sweep in a secret-named variable (run_mpi.sh's unanchored `SHARED_`
  shipped `JOB_SHARED_TOKEN`); name one in full to forward it, still by name only.
- Unless the user set them, the ranks get what run_mpi.sh sets for Horovod over NCCL:
  `NCCL_SOCKET_FAMILY=AF_INET` and `HOROVOD_MPI_THREADS_DISABLE=1`.
- `plm_rsh_no_tree_spawn 1` always: mpirun itself sshes to every node, so the only ssh path the
  job needs is node 0 -> each node, which is exactly what mpi-leader checks before starting
  mpirun; a tree spawn would also need every node to reach every other with a key only node 0
  may hold. From 64 hosts up (horovodrun's threshold) `plm_rsh_num_concurrent <hosts>` lets all
  launches run at once instead of 128 at a time, as horovodrun does.
- The other nodes learn how the job ended from the job's coordination (node 0's `job_port`),
  not from ssh: one protocol for every mode, with arrival, fail-fast, lost nodes, the hang
  watchdog and job.json.
- Several nodes need the platform's key (`id_rsa` with `authorized_keys` or `id_rsa.pub` in
  `ssh_dir`): a per-job key would exist on node 0 only. Its absence, or a key of ours that others
  can read (ssh ignores it), is bad input, found before anything starts.
- The ssh options are one tuple (`ssh_options`): mpirun gets them as the single string its
  `plm_rsh_args` must be (built here, with shlex.join, and never parsed back), the leader as one
  `--ssh-option=WORD` each, to check each peer with exactly the ssh mpirun will run. Paths in them
  are refused unless they need no quoting: Open MPI splits that string at spaces and would pass
  quotes on to ssh.
- run_mpi.sh's own variables are honoured as the settings they stand for: `MY_SSHD_PORT` is
  `sshd_port`, `MY_MPI_SLOTS` the ranks per host (Open MPI's slots; `nproc_per_node`),
  `MY_MPI_BTL_TCP_IF` the `nic` (a comma-separated list, as given, for btl/oob_tcp_if_include).
  Given together with a different marun setting they are bad input naming both; empty, they are
  unset (run_mpi.sh skips empty variables, and marun forwards none with `-x NAME` either).
- Options given in `mpirun_extra_args` replace marun's own (an `--mca NAME`, `-x NAME`,
  `--bind-to`, `--map-by` there drops marun's): Open MPI refuses an MCA parameter given twice,
  and a site must be able to override a default (sagemaker-training-toolkit #70). `-np` and the
  host list stay marun's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from marun._files import find_executable
from marun.errors import bad_value
from marun.inputs.injected import SSH_KEY, Platform
from marun.inputs.nic import Nic, choose_nic
from marun.mpi.mpirun_command import (
    extra_overrides,
    forwarded_names,
    hostfile_content,
    mpirun_argv,
    mpirun_ssh_options,
    ssh_options,
)
from marun.mpi.setup import (
    MY_MPI_BTL_TCP_IF,
    MY_MPI_SLOTS,
    MY_SSHD_PORT,
    MpiSetup,
    configured_nic,
    platform_value,
    read_setup,
)
from marun.mpi.sshd_config import render_sshd_config, session_env
from marun.plan.coordination import JobShape
from marun.plan.launch_plan import FileSpec, LaunchPlan, NodePlan, ProcessSpec
from marun.plan.modes.common import log_dir, script_argv

SSHD_DIRS = ("/usr/sbin",)  # not on a non-root user's PATH on Debian/Ubuntu


def find_sshd(search_path: str | None, extra_dirs: Sequence[str] = SSHD_DIRS) -> str | None:
    return find_executable("sshd", extra_dirs, search_path)


def _notes(
    platform: Platform,
    setup: MpiSetup,
    sshd: str | None,
    nic: Nic | None,
    held: Sequence[str],
) -> tuple[str, ...]:
    notes = _cluster_notes(setup, nic)
    if sshd is None:
        notes.append(
            "sshd is not on PATH nor in " + ", ".join(SSHD_DIRS) + ": the image needs "
            "openssh-server (the plan shows it as plain 'sshd')"
        )
    if not setup.platform_key:
        where = platform.ssh_key()
        notes.append(
            f"no client key at {where}: marun will generate a per-job key at {setup.client_key} "
            f"and authorize it in {setup.authorized_keys[1]}"
        )
    if held:
        notes.append(
            "not forwarded to the ranks, secret names matched only by a pattern in "
            f"mpi_forward_env: {', '.join(held)} (name one in full to forward it, by name only)"
        )
    if setup.user is None:
        notes.append(f"uid {platform.uid} has no passwd entry: sshd cannot log it in")
    honoured = {
        MY_SSHD_PORT: f"sshd_port {setup.port}",
        MY_MPI_SLOTS: f"{setup.ranks_per_host} rank(s) per host",
        MY_MPI_BTL_TCP_IF: "the interfaces for btl/oob_tcp_if_include",
    }
    for name, meaning in honoured.items():
        value = platform_value(platform, name)
        if value is not None:
            notes.append(f"{name}={value} (run_mpi.sh's variable) taken as {meaning}")
    return tuple(notes)


def _cluster_notes(setup: MpiSetup, nic: Nic | None) -> list[str]:
    """What a job of several nodes does: formation, the other nodes, the interfaces."""
    hosts = len(setup.hosts)
    notes: list[str] = []
    if nic is not None and hosts > 1:  # node 0 is in the plan
        from marun.inputs.hosts import is_ip

        named = [h for h in setup.hosts if not is_ip(h)]
        listed = (
            "host names"
            if len(named) == hosts
            else "addresses"
            if not named
            else "host names and addresses"
        )
        then = (
            "then writes each host's IPv4 address instead and starts mpirun"
            if named
            else "then starts mpirun"
        )
        notes.append(
            f"hostfile lists {listed}: mpi-leader first forms the cluster (every "
            f"{'name resolved and every ' if named else ''}peer's sshd letting node 0 in with "
            "mpirun's own ssh options, all at once, within "
            f"formation_timeout={setup.formation_timeout:g}s), {then}"
        )
    if hosts > 1:
        others = "node 1 runs" if hosts == 2 else f"nodes 1-{hosts - 1} run"
        notes.append(
            f"{others} sshd only, and end{'s' if hosts == 2 else ''} with the job (its exit code "
            f"is mpirun's), by the job's coordination on node 0's job_port"
        )
        if nic is not None and nic.listed:
            notes.append(
                f"btl_tcp_if_include and oob_tcp_if_include name the configured interfaces "
                f"{nic.ifname} (each node uses those it has); NCCL_SOCKET_IFNAME is left to "
                "each node unless set"
            )
        elif nic is not None:
            net = nic.network()
            notes.append(
                f"btl_tcp_if_include and oob_tcp_if_include name node 0's network {net} (the "
                f"network of {nic.name} {nic.address}), which every node reaches whatever it "
                "calls its interface; NCCL_SOCKET_IFNAME is left to each node unless set"
                if net
                else f"btl_tcp_if_include and oob_tcp_if_include name node 0's interface "
                f"{nic.name!r} (its network is unknown): every node needs an interface of that "
                "name; NCCL_SOCKET_IFNAME is left to each node unless set"
            )
    return notes


def key_options(platform: Platform, setup: MpiSetup, node_0_here: bool) -> tuple[str, ...]:
    """sshd_bootstrap's key options, after checking the keys the platform mounted: a client key
    ssh would refuse, or no way for node 0 to log in to the other nodes, is bad input."""
    from marun.mpi.ssh_keys import check_private_key, check_readable

    hosts = len(setup.hosts)
    if not setup.platform_key:
        if hosts > 1:
            raise bad_value(
                "ssh_dir",
                setup.ssh_dir,
                f"the platform's ssh key ({SSH_KEY}, {SSH_KEY}.pub, authorized_keys: "
                f"Volcano's ssh plugin) for a job of {hosts} nodes; set MARUN_SSH_DIR where it "
                "is mounted",
            )
        return ("--new-identity", setup.client_key)
    if node_0_here:
        check_private_key(setup.client_key, platform.uid)
    mounted_authorized = setup.authorized_keys[0]
    if os.path.exists(mounted_authorized):
        check_readable(mounted_authorized, "authorized_keys")
        return ()
    public = setup.client_key + ".pub"
    if os.path.exists(public):
        check_readable(public, "public key file")
        return ("--authorize", public)
    if hosts > 1:
        raise bad_value(
            "ssh_dir",
            setup.ssh_dir,
            f"authorized_keys or {SSH_KEY}.pub next to {SSH_KEY}: the other nodes "
            "must let node 0's key in",
        )
    return ()


def plan(platform: Platform, all_nodes: bool) -> LaunchPlan:
    setup = read_setup(platform)
    configured, nic_setting = configured_nic(platform)  # checked on every node
    forward, held = forwarded_names(platform)
    extra_overrides(platform.settings.mpirun_extra_args)  # bad input fails on every node
    rsh_options = mpirun_ssh_options(platform.settings.mpirun_extra_args, ssh_options(setup))
    user_argv = script_argv(platform)
    this_node = platform.node_index()  # checked with --all-nodes too: it is the platform's input
    indexes = range(len(setup.hosts)) if all_nodes else (this_node,)
    nic: Nic | None = None
    if 0 in indexes:
        current = platform.env.get("MA_CURRENT_IP")
        nic = choose_nic(configured, hints=[current] if current else [], setting=nic_setting)
    python = platform.python
    hosts = len(setup.hosts)

    sshd = find_sshd(platform.env.get("PATH"))
    sshd_config, sshd_proc = _sshd(platform, setup, sshd, 0 in indexes)
    logs = log_dir(platform)
    nodes = []
    for index in indexes:
        node_files: tuple[FileSpec, ...] = (sshd_config,)
        if index == 0:
            assert nic is not None
            node_files += (
                FileSpec(
                    setup.hostfile, hostfile_content(setup.hosts, setup.ranks_per_host), 0o644
                ),
            )
            peers = tuple(f"--ssh-option={word}" for word in rsh_options) if hosts > 1 else ()
            leader = ProcessSpec(
                name="mpi-leader",
                argv=(
                    *(python, "-m", "marun.mpi.leader", "--hostfile", setup.hostfile),
                    *("--port", str(setup.port), *peers),
                    *("--formation-timeout", f"{setup.formation_timeout:g}"),
                    "--",
                    *mpirun_argv(platform, setup, nic, forward, user_argv),
                ),
                env={},
                cwd=platform.cwd,
                log=os.path.join(logs, "mpirun.log"),
                role="leader",
            )
            node_procs: tuple[ProcessSpec, ...] = (sshd_proc, leader)
        else:
            node_procs = (sshd_proc,)  # daemons only: ends with the job
        nodes.append(NodePlan(index, setup.hosts[index], node_files, node_procs))
    notes = _notes(platform, setup, sshd, nic, held)
    # Node 0 runs mpirun and leads; the others serve sshd only (MA_NUM_HOSTS nodes).
    shape = JobShape(host=setup.hosts[0], nodes=hosts, index=this_node)
    return LaunchPlan("mpi", tuple(nodes), notes, shape=shape)


def _sshd(
    platform: Platform, setup: MpiSetup, sshd: str | None, node_0_here: bool
) -> tuple[FileSpec, ProcessSpec]:
    """Every node's sshd: its config file and its process (a daemon)."""
    session = session_env(platform.env)
    sshd_config = FileSpec(
        setup.sshd_config,
        render_sshd_config(
            port=setup.port,
            host_key=setup.host_key,
            pid_file=setup.pid_file,
            authorized_keys=setup.authorized_keys,
            hosts=len(setup.hosts),
            user=setup.user,
            set_env=session,
        ),
        0o644,
    )
    sshd_proc = ProcessSpec(
        name="sshd",
        argv=(
            *(platform.python, "-m", "marun.mpi.sshd_bootstrap", "--run-dir", setup.run_dir),
            *key_options(platform, setup, node_0_here),
            *("--", sshd or "sshd", "-D", "-e", "-f", setup.sshd_config),
        ),
        env={},
        cwd=setup.run_dir,
        log=setup.sshd_log,
        role="sshd",
        daemon=True,
    )
    return sshd_config, sshd_proc

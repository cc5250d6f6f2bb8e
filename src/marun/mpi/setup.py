"""MPI mode's setup: where its files live, who sshd lets in, the hosts, the ranks per host and
the time-outs, read once from the platform and the settings (the same on every node), with
run_mpi.sh's own variables (MY_SSHD_PORT, MY_MPI_SLOTS, MY_MPI_BTL_TCP_IF) honoured as the
settings they stand for. Bad input fails here, on every node, before anything starts."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from marun.errors import InputError, bad_value, show_value
from marun.inputs.hosts import node_hosts
from marun.inputs.injected import Platform
from marun.inputs.numbers import (
    MAX_PROCS_PER_NODE,
    PORT_MAX,
    PORT_MIN,
    check_port_number,
    check_positive_seconds,
    parse_int,
    parse_port,
)
from marun.inputs.settings import DEFAULT_SSHD_PORT
from marun.mpi import run_dir as run_files

# run_mpi.sh's variables and the marun setting each stands for (docs/mpi.md).
MY_SSHD_PORT, MY_MPI_SLOTS, MY_MPI_BTL_TCP_IF = "MY_SSHD_PORT", "MY_MPI_SLOTS", "MY_MPI_BTL_TCP_IF"
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")
_PLAIN_WORD = re.compile(r"[\w@%+=:,./-]+", re.ASCII)  # what shlex.join leaves unquoted


@dataclass(frozen=True)
class MpiSetup:
    """Where MPI mode's files live, who sshd lets in, and the job's time-outs: the same on every
    node."""

    run_dir: str
    ssh_dir: str
    user: str | None  # the login name sshd allows (mpirun sshes as the user it runs as)
    port: int
    hosts: tuple[str, ...]
    ranks_per_host: int  # Open MPI's slots per host (the hostfile's `slots=`)
    client_key: str  # what mpirun's ssh uses: the platform's key, else the per-job one
    platform_key: bool  # client_key is the platform's mounted key (else marun generates one)
    formation_timeout: float = 600.0
    peer_timeout: float = 60.0

    def path(self, name: str) -> str:
        return os.path.join(self.run_dir, name)

    @property
    def sshd_config(self) -> str:
        return self.path(run_files.SSHD_CONFIG)

    @property
    def hostfile(self) -> str:
        return self.path(run_files.HOSTFILE)

    @property
    def host_key(self) -> str:
        return self.path(run_files.HOST_KEY)

    @property
    def pid_file(self) -> str:
        return self.path(run_files.PID_FILE)

    @property
    def sshd_log(self) -> str:
        return self.path(run_files.SSHD_LOG)

    @property
    def authorized_keys(self) -> tuple[str, str]:
        """The platform's file, then the one marun writes (per-job key, or id_rsa.pub)."""
        return (
            os.path.join(self.ssh_dir, run_files.AUTHORIZED_KEYS),
            self.path(run_files.AUTHORIZED_KEYS),
        )


def _safe_path(setting: str, path: str) -> str:
    if not _PLAIN_WORD.fullmatch(path):
        raise bad_value(
            setting,
            path,
            "a path of letters, digits and _@%+=:,./- only (it goes into mpirun's plm_rsh_args, "
            "which Open MPI splits at spaces, passing quotes on to ssh)",
        )
    return path


def check_hosts(platform: Platform, hosts: Sequence[str]) -> tuple[str, ...]:
    task_var = "VC_" + platform.task_name().replace("-", "_").upper() + "_HOSTS"
    for i, host in enumerate(hosts):
        if not _HOST.fullmatch(host):
            raise bad_value(
                f"host of node {i}",
                host,
                f"a host name or address (from {task_var}, the volcano .host file or the "
                "MA_VJ_NAME pattern)",
            )
    # The same host twice: mpirun would put two nodes' ranks on one machine and the other's
    # sshd would wait for ever. Refused here, so `marun plan` refuses it as `marun run` does.
    seen: dict[str, int] = {}
    for i, host in enumerate(hosts):
        key = host.rstrip(".").lower()
        if key in seen:
            raise bad_value(
                f"host of node {i}",
                host,
                f"a host of its own (node {seen[key]} has it too; from {task_var}, the volcano "
                ".host file or the MA_VJ_NAME pattern)",
            )
        seen[key] = i
    return tuple(hosts)


def platform_value(platform: Platform, name: str) -> str | None:
    """A run_mpi.sh variable's value; None where unset or empty (run_mpi.sh skips those)."""
    value = platform.env.get(name, "").strip()
    return value or None


def _disagree(name: str, raw: str, setting: str, value: object) -> InputError:
    return InputError(
        f"{name}={show_value(raw)} (the platform's run_mpi.sh variable) but {setting}="
        f"{show_value(value)}: expected one of them, or the same value in both (set "
        f"{setting}, MARUN_{setting.upper()}, alone)"
    )


def sshd_port(platform: Platform) -> int:
    """sshd's port: the sshd_port setting, else MY_SSHD_PORT, else DEFAULT_SSHD_PORT. Both given
    with different values is bad input, whatever the setting's value (docs/mpi.md): the default
    port set on purpose (MARUN_SSHD_PORT=36666) does not lose to MY_SSHD_PORT in silence."""
    setting = platform.settings.sshd_port
    port = None if setting is None else check_port_number("sshd_port", setting)
    raw = platform_value(platform, MY_SSHD_PORT)
    if raw is None:
        return DEFAULT_SSHD_PORT if port is None else port
    given = parse_port(MY_SSHD_PORT, raw)
    if port is not None and port != given:
        raise _disagree(MY_SSHD_PORT, raw, "sshd_port", port)
    return given


def _ranks_per_host(platform: Platform) -> int:
    raw = platform_value(platform, MY_MPI_SLOTS)
    if raw is None:
        return platform.devices_per_node()
    given = parse_int(MY_MPI_SLOTS, raw, 1, MAX_PROCS_PER_NODE)
    wanted = platform.settings.nproc_per_node
    if wanted is not None and wanted != given:
        raise _disagree(MY_MPI_SLOTS, raw, "nproc_per_node", wanted)
    return given


def configured_nic(platform: Platform) -> tuple[str | None, str]:
    """(the configured interface or list, the name it came by): `nic`, else MY_MPI_BTL_TCP_IF."""
    raw = platform_value(platform, MY_MPI_BTL_TCP_IF)
    nic = platform.settings.nic
    if raw is None or nic == raw:
        return nic, "nic"
    if nic:
        raise _disagree(MY_MPI_BTL_TCP_IF, raw, "nic", nic)
    return raw, MY_MPI_BTL_TCP_IF


def read_setup(platform: Platform) -> MpiSetup:
    settings = platform.settings
    job = platform.job_name()
    if job is not None and (not _JOB.fullmatch(job) or job in (".", "..")):
        raise bad_value("MA_VJ_NAME", job, "a job name of letters, digits, '.', '-', '_'")
    base = _safe_path("run_dir" if settings.run_dir else "TMPDIR", platform.run_dir())
    entry = platform.passwd()
    ssh_dir = _safe_path("ssh_dir", platform.ssh_dir())
    run_dir = os.path.normpath(os.path.join(base, job or "local"))
    mounted = platform.ssh_key()
    platform_key = os.path.isfile(mounted)
    port = sshd_port(platform)
    if settings.job_port == port:
        raise bad_value("job_port", settings.job_port, f"a port other than sshd_port={port}")
    hosts = check_hosts(platform, node_hosts(platform))
    if settings.job_port == 0 and len(hosts) > 1:
        # The other nodes run sshd only: the job's coordination is what ends them.
        raise bad_value(
            "job_port",
            0,
            f"a port {PORT_MIN}-{PORT_MAX} for an MPI job of {len(hosts)} nodes (the other "
            "nodes end with the job by its coordination; 0 turns it off)",
        )
    return MpiSetup(
        run_dir=run_dir,
        ssh_dir=ssh_dir,
        user=None if entry is None else entry[0],
        port=port,
        hosts=hosts,
        ranks_per_host=_ranks_per_host(platform),
        client_key=mounted if platform_key else os.path.join(run_dir, run_files.JOB_KEY),
        platform_key=platform_key,
        formation_timeout=check_positive_seconds("formation_timeout", settings.formation_timeout),
        peer_timeout=check_positive_seconds("peer_timeout", settings.peer_timeout),
    )

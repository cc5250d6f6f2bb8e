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
  `sshd_port`, `MY_MPI_SLOTS` the slots per host (`nproc_per_node`), `MY_MPI_BTL_TCP_IF` the
  `nic` (a comma-separated list, as given, for btl/oob_tcp_if_include). Given together with a
  different marun setting they are bad input naming both; empty, they are unset (run_mpi.sh
  skips empty variables, and marun forwards none with `-x NAME` either).
- Options given in `mpirun_extra_args` replace marun's own (an `--mca NAME`, `-x NAME`,
  `--bind-to`, `--map-by` there drops marun's): Open MPI refuses an MCA parameter given twice,
  and a site must be able to override a default (sagemaker-training-toolkit #70). `-np` and the
  host list stay marun's.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from marun._files import find_executable
from marun.errors import InputError, bad_value, show_value
from marun.inputs.hosts import node_hosts
from marun.inputs.injected import TASK_INDEX_VARS, Platform
from marun.inputs.nic import Nic, choose_nic
from marun.inputs.numbers import MAX_PROCS_PER_NODE, parse_int, parse_port
from marun.inputs.settings import Settings, default_run_dir
from marun.mpi import run_dir as run_files
from marun.mpi.sshd_config import render_sshd_config, session_env
from marun.plan.launch_plan import FileSpec, LaunchPlan, NodePlan, ProcessSpec
from marun.plan.modes.common import log_dir, script_argv
from marun.redact import is_secret_name, mask_argv

SSHD_DIRS = ("/usr/sbin",)  # not on a non-root user's PATH on Debian/Ubuntu
LARGE_CLUSTER_HOSTS = 64  # horovodrun's _LARGE_CLUSTER_THRESHOLD
PLATFORM_KEY = "id_rsa"  # what Volcano's ssh plugin mounts, with id_rsa.pub and authorized_keys

# run_mpi.sh's variables and the marun setting each stands for (docs/mpi.md).
MY_SSHD_PORT, MY_MPI_SLOTS, MY_MPI_BTL_TCP_IF = "MY_SSHD_PORT", "MY_MPI_SLOTS", "MY_MPI_BTL_TCP_IF"
_DEFAULT_SSHD_PORT = Settings().sshd_port

# Variables whose value is this node's own: forwarding node 0's would overwrite every node's.
NODE_LOCAL_VARS = frozenset({*TASK_INDEX_VARS, "MA_CURRENT_IP", "MA_CURRENT_HOST_IP", "HOSTNAME"})
# The login session's own (sshd sets them for the ranks' session), and per-host scratch space.
SESSION_VARS = frozenset(
    {"HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "MAIL", "TMPDIR"}
    | {"SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "DISPLAY", "LS_COLORS"}
)
# What run_mpi.sh sets for Horovod over NCCL; the user's own value wins.
RANK_DEFAULTS = (("NCCL_SOCKET_FAMILY", "AF_INET"), ("HOROVOD_MPI_THREADS_DISABLE", "1"))
# Open MPI sets these per process; forwarding mpirun's would clobber each rank's.
MPI_OWN_PREFIXES = ("OMPI_", "ORTE_", "OPAL_", "PMIX_")

# mpirun options that decide the process count and the hosts: marun's alone.
_OWNED = frozenset(
    {"-np", "--np", "-n", "--n", "-c"}
    | {"-H", "-host", "--host", "-hostfile", "--hostfile", "-machinefile", "--machinefile"}
    | {"-default-hostfile", "--default-hostfile"}
)
_MCA = frozenset({"-mca", "--mca", "-gmca", "--gmca"})
# An mpirun option word: `-name`, `--name` or `--name=value` (Open MPI's single-dash options take
# their value as the next word, never after `=`).
_OPTION_WORD = re.compile(r"-[A-Za-z][A-Za-z0-9_-]*|--[A-Za-z][A-Za-z0-9_-]*(=.*)?", re.S)
_FLAGS = {"-bind-to": "bind-to", "-map-by": "map-by", "-tag-output": "tag-output"}
_FLAGS.update({"-" + k: v for k, v in _FLAGS.items()})
_FLAGS.update(
    {"-allow-run-as-root": "allow-run-as-root", "--allow-run-as-root": "allow-run-as-root"}
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")
_PLAIN_WORD = re.compile(r"[\w@%+=:,./-]+", re.ASCII)  # what shlex.join leaves unquoted


@dataclass(frozen=True)
class MpiLayout:
    """Where MPI mode's files live, who sshd lets in, and the job's time-outs: the same on every
    node."""

    run_dir: str
    ssh_dir: str
    user: str | None  # the login name sshd allows (mpirun sshes as the user it runs as)
    port: int
    hosts: tuple[str, ...]
    slots: int
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


def _user_and_home(platform: Platform) -> tuple[str | None, str]:
    import pwd

    try:
        entry = pwd.getpwuid(platform.uid)
    except KeyError:
        return None, platform.env.get("HOME") or "/"
    return entry.pw_name, entry.pw_dir


def check_port(port: int, setting: str = "sshd_port") -> int:
    if not 1 <= port <= 65535:
        raise bad_value(
            setting,
            port,
            f"a TCP port in 1-65535 (config key {setting}, MARUN_{setting.upper()})",
        )
    return port


def check_seconds(value: float, setting: str) -> float:
    if not 0 < value < math.inf:
        raise bad_value(setting, value, f"a number of seconds > 0 (MARUN_{setting.upper()})")
    return value


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


def _sshd_port(platform: Platform) -> int:
    port = check_port(platform.settings.sshd_port)
    raw = platform_value(platform, MY_SSHD_PORT)
    if raw is None:
        return port
    given = parse_port(MY_SSHD_PORT, raw)
    if port not in (_DEFAULT_SSHD_PORT, given):
        raise _disagree(MY_SSHD_PORT, raw, "sshd_port", port)
    return given


def _slots(platform: Platform) -> int:
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


def read_layout(platform: Platform) -> MpiLayout:
    settings = platform.settings
    job = platform.job_name()
    if job is not None and (not _JOB.fullmatch(job) or job in (".", "..")):
        raise bad_value("MA_VJ_NAME", job, "a job name of letters, digits, '.', '-', '_'")
    if settings.run_dir:
        base = _safe_path("run_dir", os.path.join(platform.cwd, settings.run_dir))
    else:
        base = _safe_path("TMPDIR", default_run_dir(platform.env))
    user, home = _user_and_home(platform)
    if settings.ssh_dir:
        ssh_dir = _safe_path("ssh_dir", os.path.join(platform.cwd, settings.ssh_dir))
    else:
        ssh_dir = _safe_path("ssh_dir", os.path.join(home, ".ssh"))
    run_dir = os.path.normpath(os.path.join(base, job or "local"))
    mounted = os.path.join(ssh_dir, PLATFORM_KEY)
    platform_key = os.path.isfile(mounted)
    port = _sshd_port(platform)
    if settings.job_port == port:
        raise bad_value("job_port", settings.job_port, f"a port other than sshd_port={port}")
    return MpiLayout(
        run_dir=run_dir,
        ssh_dir=os.path.normpath(ssh_dir),
        user=user,
        port=port,
        hosts=check_hosts(platform, node_hosts(platform)),
        slots=_slots(platform),
        client_key=mounted if platform_key else os.path.join(run_dir, run_files.JOB_KEY),
        platform_key=platform_key,
        formation_timeout=check_seconds(settings.formation_timeout, "formation_timeout"),
        peer_timeout=check_seconds(settings.peer_timeout, "peer_timeout"),
    )


def find_sshd(search_path: str | None, extra_dirs: Sequence[str] = SSHD_DIRS) -> str | None:
    return find_executable("sshd", extra_dirs, search_path)


def hostfile_content(hosts: Sequence[str], slots: int) -> str:
    """Open MPI's hostfile: one `<host> slots=<n>` line per node, node 0 first."""
    return "".join(f"{host} slots={slots}\n" for host in hosts)


def _bad_extra(extra: Sequence[str], expected: str) -> InputError:
    return bad_value("mpirun_extra_args", shlex.join(mask_argv(extra)), expected)


def _is_number(word: str) -> bool:
    """`-1`, `-inf`, `-nan`, `-1e5`: a number with a minus sign, never an mpirun option."""
    try:
        float(word)
    except ValueError:
        return False
    return True


def extra_overrides(extra: Sequence[str]) -> frozenset[str]:
    """Which of marun's own options `mpirun_extra_args` replaces (keys like `mca:btl`, `x:PATH`,
    `bind-to`); bad input if it sets the process count or hosts, lacks an option's value, or puts
    a secret's value on the command line."""
    keys: set[str] = set()
    i = 0
    while i < len(extra):
        word = extra[i]
        option = word.split("=", 1)[0]
        if option in _OWNED:
            raise _bad_extra(
                extra,
                f"no {option}: marun sets -np (MA_NUM_HOSTS x slots) and --hostfile (the job's "
                "hosts)",
            )
        if word in _MCA:
            if i + 2 >= len(extra):
                raise _bad_extra(extra, f"{word} NAME VALUE (two words after {word})")
            keys.add("mca:" + extra[i + 1])
            i += 3
            continue
        if word == "-x":
            if i + 1 >= len(extra):
                raise _bad_extra(extra, "-x NAME (a variable name after -x)")
            name, eq, _ = extra[i + 1].partition("=")
            if eq and is_secret_name(name):
                raise _bad_extra(
                    extra, f"-x {name} without a value (a secret's value would show in ps)"
                )
            keys.add("x:" + name)
            i += 2
            continue
        if option in _FLAGS:
            keys.add(_FLAGS[option])
        if not _OPTION_WORD.fullmatch(word) or _is_number(word):
            raise _bad_extra(
                extra,
                f"mpirun options (-name or --name, each with its value after it); {word!r} is "
                "not an option",
            )
        # The option's value, if the next word is not an option itself (mpirun knows which
        # options take one; marun only keeps stray words such as `0` or `[1,` out).
        i += 2 if i + 1 < len(extra) and not extra[i + 1].startswith("-") else 1
    return frozenset(keys)


def _never_forwarded(name: str) -> bool:
    return (
        not _NAME.fullmatch(name)
        or name in NODE_LOCAL_VARS
        or name in SESSION_VARS
        or name.startswith(MPI_OWN_PREFIXES)
        or name.startswith("MARUN_")
    )


def forwarded_names(platform: Platform) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names forwarded with `-x NAME`, secret names a pattern matched but did not forward)."""
    # An empty variable is not forwarded (run_mpi.sh skips empty ones): `-x NAME` would set
    # it, empty, on every node, over a value the rank's node may have of its own.
    env = {name: value for name, value in platform.env.items() if value != ""}
    names: list[str] = []
    held: list[str] = []
    for entry in platform.settings.mpi_forward_env:
        if entry == "*":  # everything node 0's container has, secrets by name included
            names += [name for name in sorted(env) if not _never_forwarded(name)]
            continue
        prefix = entry[:-1] if entry.endswith("*") else None
        if not _NAME.fullmatch(entry if prefix is None else prefix):
            raise bad_value(
                "mpi_forward_env",
                entry,
                "variable names, PREFIX* patterns or * (everything), comma-separated",
            )
        if prefix is None:
            if entry in env:
                names.append(entry)
            continue
        for name in sorted(env):
            if not name.startswith(prefix) or _never_forwarded(name):
                continue
            if is_secret_name(name):
                held.append(name)
            else:
                names.append(name)
    # NCCL_SOCKET_IFNAME is forwarded on its own, with the chosen NIC when unset.
    unique = tuple(dict.fromkeys(n for n in names if n != "NCCL_SOCKET_IFNAME"))
    return unique, tuple(dict.fromkeys(n for n in held if n not in unique))


def ssh_options(layout: MpiLayout) -> tuple[str, ...]:
    """marun's ssh options for mpirun and the leader: the port, the key, and never a prompt."""
    return (
        *("-p", str(layout.port), "-i", layout.client_key),
        *("-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"),
        *("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"),
        *("-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"),
    )


def plm_rsh_args(options: Sequence[str]) -> str:
    """The one string mpirun's `--mca plm_rsh_args` takes (the only place it is built)."""
    return shlex.join(options)


def mpirun_ssh_options(extra: Sequence[str], ours: Sequence[str]) -> tuple[str, ...]:
    """The ssh options mpirun will run with: the last `plm_rsh_args` given in
    `mpirun_extra_args` (the user's input, split at spaces as Open MPI splits it), else ours."""
    found: tuple[str, ...] | None = None
    for i, word in enumerate(extra[:-2]):
        if word in _MCA and extra[i + 1] == "plm_rsh_args":
            found = tuple(extra[i + 2].split())
    return tuple(ours) if found is None else found


def mpirun_argv(
    platform: Platform,
    layout: MpiLayout,
    nic: Nic,
    forward: Sequence[str],
    user_argv: Sequence[str],
) -> tuple[str, ...]:
    extra = platform.settings.mpirun_extra_args
    overridden = extra_overrides(extra)
    hosts = len(layout.hosts)
    # Open MPI's interfaces: by network (CIDR) on several hosts, which holds on every node
    # whatever it calls its interface; by name on one host.
    # A configured list (eth0,bond0) goes as given: Open MPI takes a list of names, and each
    # node uses those it has.
    peers_net = (nic.network() or nic.name) if hosts > 1 else nic.name
    if nic.listed:
        peers_net = nic.ifname
    ours: list[tuple[str, tuple[str, ...]]] = [
        ("mca:plm_rsh_args", ("--mca", "plm_rsh_args", plm_rsh_args(ssh_options(layout)))),
    ]
    if platform.is_root():
        ours.append(("allow-run-as-root", ("--allow-run-as-root",)))
    ours += [
        ("bind-to", ("--bind-to", "none")),
        ("map-by", ("--map-by", "slot")),
        ("mca:pml", ("--mca", "pml", "ob1")),
        ("mca:btl", ("--mca", "btl", "^openib")),
        ("mca:btl_tcp_if_include", ("--mca", "btl_tcp_if_include", peers_net)),
        ("mca:oob_tcp_if_include", ("--mca", "oob_tcp_if_include", peers_net)),
        ("tag-output", ("--tag-output",)),
        ("mca:orte_abort_on_non_zero_status", ("--mca", "orte_abort_on_non_zero_status", "1")),
        ("mca:plm_rsh_no_tree_spawn", ("--mca", "plm_rsh_no_tree_spawn", "1")),
    ]
    if hosts >= LARGE_CLUSTER_HOSTS:
        ours.append(("mca:plm_rsh_num_concurrent", ("--mca", "plm_rsh_num_concurrent", str(hosts))))
    # Open MPI cuts `job-worker-1.job` to `job-worker-1` before ssh unless told to keep it.
    ours.append(("mca:orte_keep_fqdn_hostnames", ("--mca", "orte_keep_fqdn_hostnames", "1")))
    nccl = "NCCL_SOCKET_IFNAME"
    if platform.env.get(nccl):
        ours.append(("x:" + nccl, ("-x", nccl)))
    elif hosts == 1:
        ours.append(("x:" + nccl, ("-x", f"{nccl}={nic.local_ifname}")))
    # Several hosts: NCCL takes an interface name, not a network, and node 0's name need not be
    # the others' (eth0 here, ib0 there): each rank's NCCL picks its own node's interface.
    ours += [("x:" + name, ("-x", name)) for name in forward]
    ours += [
        ("x:" + name, ("-x", f"{name}={value}"))
        for name, value in RANK_DEFAULTS
        if name not in platform.env
    ]
    argv = ["mpirun", "-np", str(hosts * layout.slots), "--hostfile", layout.hostfile]
    for key, words in ours:
        if key not in overridden:
            argv += words
    return (*argv, *extra, *user_argv)


def _notes(
    platform: Platform,
    layout: MpiLayout,
    sshd: str | None,
    nic: Nic | None,
    held: Sequence[str],
) -> tuple[str, ...]:
    hosts = len(layout.hosts)
    notes: list[str] = []
    if nic is not None and hosts > 1:  # node 0 is in the plan
        from marun.inputs.hosts import is_ip

        named = [h for h in layout.hosts if not is_ip(h)]
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
            f"formation_timeout={layout.formation_timeout:g}s), {then}"
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
    if sshd is None:
        notes.append(
            "sshd is not on PATH nor in " + ", ".join(SSHD_DIRS) + ": the image needs "
            "openssh-server (the plan shows it as plain 'sshd')"
        )
    if not layout.platform_key:
        where = os.path.join(layout.ssh_dir, PLATFORM_KEY)
        notes.append(
            f"no client key at {where}: marun will generate a per-job key at {layout.client_key} "
            f"and authorize it in {layout.authorized_keys[1]}"
        )
    if held:
        notes.append(
            "not forwarded to the ranks, secret names matched only by a pattern in "
            f"mpi_forward_env: {', '.join(held)} (name one in full to forward it, by name only)"
        )
    if layout.user is None:
        notes.append(f"uid {platform.uid} has no passwd entry: sshd cannot log it in")
    honoured = {
        MY_SSHD_PORT: f"sshd_port {layout.port}",
        MY_MPI_SLOTS: f"{layout.slots} slot(s) per host",
        MY_MPI_BTL_TCP_IF: "the interfaces for btl/oob_tcp_if_include",
    }
    for name, meaning in honoured.items():
        value = platform_value(platform, name)
        if value is not None:
            notes.append(f"{name}={value} (run_mpi.sh's variable) taken as {meaning}")
    return tuple(notes)


def key_options(platform: Platform, layout: MpiLayout, node_0_here: bool) -> tuple[str, ...]:
    """sshd_bootstrap's key options, after checking the keys the platform mounted: a client key
    ssh would refuse, or no way for node 0 to log in to the other nodes, is bad input."""
    from marun.mpi.ssh_keys import check_private_key, check_readable

    hosts = len(layout.hosts)
    if not layout.platform_key:
        if hosts > 1:
            raise bad_value(
                "ssh_dir",
                layout.ssh_dir,
                f"the platform's ssh key ({PLATFORM_KEY}, {PLATFORM_KEY}.pub, authorized_keys: "
                f"Volcano's ssh plugin) for a job of {hosts} nodes; set MARUN_SSH_DIR where it "
                "is mounted",
            )
        return ("--new-identity", layout.client_key)
    if node_0_here:
        check_private_key(layout.client_key, platform.uid)
    mounted_authorized = layout.authorized_keys[0]
    if os.path.exists(mounted_authorized):
        check_readable(mounted_authorized, "authorized_keys")
        return ()
    public = layout.client_key + ".pub"
    if os.path.exists(public):
        check_readable(public, "public key file")
        return ("--authorize", public)
    if hosts > 1:
        raise bad_value(
            "ssh_dir",
            layout.ssh_dir,
            f"authorized_keys or {PLATFORM_KEY}.pub next to {PLATFORM_KEY}: the other nodes "
            "must let node 0's key in",
        )
    return ()


def plan(platform: Platform, all_nodes: bool) -> LaunchPlan:
    layout = read_layout(platform)
    configured, nic_setting = configured_nic(platform)  # checked on every node
    forward, held = forwarded_names(platform)
    extra_overrides(platform.settings.mpirun_extra_args)  # bad input fails on every node
    rsh_options = mpirun_ssh_options(platform.settings.mpirun_extra_args, ssh_options(layout))
    user_argv = script_argv(platform)
    this_node = platform.node_index()  # checked with --all-nodes too: it is the platform's input
    indexes = range(len(layout.hosts)) if all_nodes else (this_node,)
    nic: Nic | None = None
    if 0 in indexes:
        current = platform.env.get("MA_CURRENT_IP")
        nic = choose_nic(configured, hints=[current] if current else [], setting=nic_setting)
    python = platform.python
    hosts = len(layout.hosts)

    sshd = find_sshd(platform.env.get("PATH"))
    session = session_env(platform.env)
    sshd_config = FileSpec(
        layout.sshd_config,
        render_sshd_config(
            port=layout.port,
            host_key=layout.host_key,
            pid_file=layout.pid_file,
            authorized_keys=layout.authorized_keys,
            hosts=hosts,
            user=layout.user,
            set_env=session,
        ),
        0o644,
    )
    sshd_proc = ProcessSpec(
        name="sshd",
        argv=(
            *(python, "-m", "marun.mpi.sshd_bootstrap", "--run-dir", layout.run_dir),
            *key_options(platform, layout, 0 in indexes),
            *("--", sshd or "sshd", "-D", "-e", "-f", layout.sshd_config),
        ),
        env={},
        cwd=layout.run_dir,
        log=layout.sshd_log,
        role="sshd",
        daemon=True,
    )
    logs = log_dir(platform)
    nodes = []
    for index in indexes:
        node_files: tuple[FileSpec, ...] = (sshd_config,)
        if index == 0:
            assert nic is not None
            node_files += (
                FileSpec(layout.hostfile, hostfile_content(layout.hosts, layout.slots), 0o644),
            )
            peers: tuple[str, ...] = ()
            if hosts > 1:
                peers = tuple(f"--ssh-option={word}" for word in rsh_options)
            leader = ProcessSpec(
                name="mpi-leader",
                argv=(
                    *(python, "-m", "marun.mpi.leader", "--hostfile", layout.hostfile),
                    *("--port", str(layout.port), *peers),
                    *("--formation-timeout", f"{layout.formation_timeout:g}"),
                    "--",
                    *mpirun_argv(platform, layout, nic, forward, user_argv),
                ),
                env={},
                cwd=platform.cwd,
                log=os.path.join(logs, "mpirun.log"),
                role="leader",
            )
            node_procs: tuple[ProcessSpec, ...] = (sshd_proc, leader)
        else:
            node_procs = (sshd_proc,)  # daemons only: ends with the job
        nodes.append(NodePlan(index, layout.hosts[index], node_files, node_procs))
    return LaunchPlan("mpi", tuple(nodes), _notes(platform, layout, sshd, nic, held))

"""mpirun's command line for node 0's leader: what is forwarded to the ranks (`-x NAME` only,
never a value), the ssh options mpirun's plm_rsh_args carries, marun's own options, and which of
them `mpirun_extra_args` replaces (docs/mpi.md)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from marun.errors import InputError, bad_value
from marun.inputs.injected import TASK_INDEX_VARS, Platform
from marun.inputs.nic import Nic
from marun.mpi.setup import MpiSetup
from marun.redact import is_secret_name, mask_argv

LARGE_CLUSTER_HOSTS = 64  # horovodrun's _LARGE_CLUSTER_THRESHOLD


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


def hostfile_content(hosts: Sequence[str], ranks_per_host: int) -> str:
    """Open MPI's hostfile: one `<host> slots=<n>` line per node, node 0 first (Open MPI's
    slots are the ranks per host)."""
    return "".join(f"{host} slots={ranks_per_host}\n" for host in hosts)


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
                f"no {option}: marun sets -np (MA_NUM_HOSTS x ranks per host) and --hostfile "
                "(the job's hosts)",
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


def ssh_options(setup: MpiSetup) -> tuple[str, ...]:
    """marun's ssh options for mpirun and the leader: the port, the key, and never a prompt."""
    return (
        *("-p", str(setup.port), "-i", setup.client_key),
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


def _rank_files(platform: Platform) -> list[tuple[str, tuple[str, ...]]]:
    """`mpi_rank_files`: Open MPI writes each rank's output to `<log_dir>/ranks/1/rank.<r>/`
    (`stdout`, `stderr`), as the platform's MPI documents keep each rank's output."""
    if not platform.settings.mpi_rank_files:
        return []
    from marun.plan.modes.common import log_dir

    return [("output-filename", ("--output-filename", f"{log_dir(platform)}/ranks"))]


def mpirun_argv(
    platform: Platform,
    setup: MpiSetup,
    nic: Nic,
    forward: Sequence[str],
    user_argv: Sequence[str],
) -> tuple[str, ...]:
    extra = platform.settings.mpirun_extra_args
    overridden = extra_overrides(extra)
    hosts = len(setup.hosts)
    # Open MPI's interfaces: by network (CIDR) on several hosts, which holds on every node
    # whatever it calls its interface; by name on one host.
    # A configured list (eth0,bond0) goes as given: Open MPI takes names, each node uses its own.
    peers_net = (nic.network() or nic.name) if hosts > 1 else nic.name
    if nic.listed:
        peers_net = nic.ifname
    ours: list[tuple[str, tuple[str, ...]]] = [
        ("mca:plm_rsh_args", ("--mca", "plm_rsh_args", plm_rsh_args(ssh_options(setup)))),
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
        *_rank_files(platform),
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
    if platform.settings.max_restarts:
        # Restart rounds: the ranks on every node learn mpirun's round (set anew each round).
        from marun.plan.launch_plan import BUDGET_VAR, ROUND_VAR

        ours += [("x:" + n, ("-x", n)) for n in (ROUND_VAR, BUDGET_VAR) if n not in forward]
    ours += [
        ("x:" + name, ("-x", f"{name}={value}"))
        for name, value in RANK_DEFAULTS
        if name not in platform.env
    ]
    argv = ["mpirun", "-np", str(hosts * setup.ranks_per_host), "--hostfile", setup.hostfile]
    for key, words in ours:
        if key not in overridden:
            argv += words
    return (*argv, *extra, *user_argv)

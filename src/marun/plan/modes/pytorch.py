"""PyTorch-GPU: the platform's appended `--init_method tcp://HOST:PORT [--rank NODE --world_size
NODES]` turned into what torchrun gives each process.

The platform runs the start file once per node and appends the rendezvous address, and on
several nodes this node's rank and the node count (node rank and node COUNT, not process ranks;
docs/platform-contract.md). marun starts one process per device (`--nproc-per-node`, else
MA_NUM_GPUS) with the environment `torch.distributed.run` sets for its workers, so a script
written for torchrun (`init_process_group()` with the default `env://`) runs unchanged. As
torchrun does by default (`--use-env`), no `--local-rank` argument is added.
"""

from __future__ import annotations

from collections.abc import Mapping

from marun.errors import InputError, bad_value
from marun.inputs.hosts import is_host
from marun.inputs.injected import Platform
from marun.inputs.numbers import MAX_NODES, PORT_MAX, PORT_MIN, is_digits, is_port, parse_int
from marun.inputs.records import dataclass
from marun.plan.coordination import JobShape
from marun.plan.launch_plan import ERROR_FILE_VAR, LaunchPlan, NodePlan, ProcessSpec
from marun.plan.modes import torchrun_options
from marun.plan.modes.common import log_dir, script_argv, socket_ifname_env

INIT_METHOD_FORM = (
    f"tcp://HOST:PORT with a host name or IP address and a port {PORT_MIN}-{PORT_MAX}, as the "
    "platform appends it"
)
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
ASYNC_ERROR_VAR = "TORCH_NCCL_ASYNC_ERROR_HANDLING"


@dataclass(frozen=True)
class Rendezvous:
    host: str
    port: int
    node_rank: int
    nodes: int


def parse_init_method(raw: str | None) -> tuple[str, int]:
    """`tcp://HOST:PORT` into (HOST, PORT); anything else is bad input."""
    if raw is None:
        raise InputError(
            "--init_method: not appended to the command; expected `--init_method tcp://HOST:PORT`"
            " after the script's arguments, as the platform's PyTorch-GPU engine appends it"
        )
    text = raw.strip().strip("\"'")
    scheme, sep, rest = text.partition("://")
    if not sep or scheme != "tcp":
        raise bad_value("--init_method", raw, INIT_METHOD_FORM)
    host, sep, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 address; MASTER_ADDR takes it bare
    # The host becomes MASTER_ADDR and a NIC hint: a name or an address, nothing else
    # (`tcp://h:1:2` would make MASTER_ADDR `h:1`).
    if not sep or not is_host(host):
        raise bad_value("--init_method", raw, INIT_METHOD_FORM)
    if not is_digits(port) or len(port) > 5 or not is_port(int(port)):
        raise bad_value("--init_method", raw, INIT_METHOD_FORM)
    return host, int(port)


# torchrun's defaults for --master-addr and --master-port (a static rendezvous).
DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500


def _free_local_port() -> int:
    """A port free now on 127.0.0.1, as torchrun --standalone takes one (`localhost:0`)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((DEFAULT_MASTER_ADDR, 0))
        port: int = sock.getsockname()[1]
        return port


def rendezvous_without_platform(platform: Platform) -> Rendezvous:
    """`--standalone` (this machine alone, 127.0.0.1 and a free port) or `--nnodes`,
    `--node-rank`, `--master-addr`, `--master-port` as torchrun takes them: the rendezvous a
    platform would have appended, given by hand."""
    settings = platform.settings
    if settings.standalone:
        if settings.nnodes not in (None, 1) or settings.master_addr or settings.node_rank:
            raise InputError(
                "--standalone is a job of one node on 127.0.0.1: expected no --nnodes above 1, "
                "--node-rank or --master-addr with it (as torchrun --standalone)"
            )
        port = settings.master_port or _free_local_port()
        return Rendezvous(DEFAULT_MASTER_ADDR, port, 0, 1)
    nodes = settings.nnodes or 1
    node_rank = settings.node_rank or 0
    if node_rank >= nodes:
        raise bad_value("--node-rank", node_rank, f"a node rank below --nnodes={nodes}")
    host = settings.master_addr or DEFAULT_MASTER_ADDR
    if not is_host(host):
        raise bad_value("--master-addr", host, "node 0's host name or IP address")
    if nodes > 1 and not settings.master_addr:
        raise bad_value(
            "--nnodes", nodes, "--master-addr with it (node 0's address, the same on every node)"
        )
    return Rendezvous(host, settings.master_port or DEFAULT_MASTER_PORT, node_rank, nodes)


def _missing_init_method(platform: Platform) -> InputError:
    """Neither the platform's --init_method nor a torchrun-style option: what to give."""
    if platform.command and platform.command[-1].split("=", 1)[0] == "--init_method":
        return InputError(
            "--init_method: appended with no value; expected `--init_method tcp://HOST:PORT`, "
            "as the platform's PyTorch-GPU engine appends it"
        )
    return InputError(
        "--init_method: not appended to the command; expected `--init_method tcp://HOST:PORT` "
        "after the script's arguments, as the platform's PyTorch-GPU engine appends it, or "
        "--standalone for a job on this machine alone (--nnodes, --node-rank, --master-addr "
        "as torchrun takes them for several)"
    )


def read_rendezvous(platform: Platform) -> Rendezvous:
    """The rendezvous: the platform's appended arguments, else the torchrun-style options."""
    given = torchrun_options(platform)
    appended = platform.appended.get("init_method")
    if appended is not None and given:
        raise InputError(
            f"{given[0]} given but the platform appended --init_method {appended}: expected one "
            "or the other (the torchrun-style options are for a job without the platform)"
        )
    if appended is None and given:
        rdzv = rendezvous_without_platform(platform)
        _check_node_count(platform, rdzv.nodes, f"--nnodes={rdzv.nodes}")
        return rdzv
    if appended is None:
        raise _missing_init_method(platform)
    return _read_appended(platform)


def _check_node_count(platform: Platform, nodes: int, shown: str) -> None:
    if platform.env.get("MA_NUM_HOSTS"):
        hosts = platform.num_hosts()
        if hosts != nodes:
            raise InputError(
                f"MA_NUM_HOSTS={platform.env['MA_NUM_HOSTS']!r} but the command gives {shown}: "
                "expected the node count to agree"
            )


def _read_appended(platform: Platform) -> Rendezvous:
    host, port = parse_init_method(platform.appended.get("init_method"))
    raw_rank = platform.appended.get("rank")
    raw_world = platform.appended.get("world_size")
    if raw_rank is None and raw_world is None:
        node_rank, nodes = 0, 1  # one node: the platform appends --init_method only
    elif raw_world is None:
        raise bad_value("--rank", raw_rank, "--world_size with it (the node count), or neither")
    elif raw_rank is None:
        raise bad_value("--world_size", raw_world, "--rank with it (this node's rank), or neither")
    else:
        nodes = parse_int("--world_size", raw_world, 1, MAX_NODES)
        node_rank = parse_int("--rank", raw_rank, 0, MAX_NODES - 1)
        if node_rank >= nodes:
            raise bad_value("--rank", raw_rank, f"a node rank below --world_size={nodes}")
    given = platform.given_task_index()
    if given is not None and raw_rank is not None and given[1] != node_rank:
        raise InputError(
            f"--rank={raw_rank!r} but {given[0]}={platform.env[given[0]]!r}: expected this node's "
            "rank to be its task index (the platform appends --rank from it)"
        )
    stated = platform.given_num_hosts()  # MA_NUM_HOSTS, else Volcano's VC_<TASK>_NUM
    if stated is not None:
        count_var, hosts = stated
        if hosts != nodes:
            shown = (
                f"--world_size={raw_world!r}"
                if raw_world is not None
                else "no --world_size (a one-node job)"
            )
            raise InputError(
                f"{count_var}={platform.env[count_var]!r} but the platform appended "
                f"{shown}: expected the node count to agree"
            )
    return Rendezvous(host, port, node_rank, nodes)


def _node_hosts(platform: Platform, rdzv: Rendezvous) -> tuple[tuple[str, ...], str | None]:
    """Every node's host name, and a note when the platform does not name them."""
    placeholders = tuple(f"node-{i}" for i in range(rdzv.nodes))
    if platform.given_num_hosts() is None:
        return placeholders, "MA_NUM_HOSTS is not set: other nodes are shown as node-<i>"
    from marun.inputs.hosts import node_hosts

    try:
        names = node_hosts(platform)
    except InputError as exc:
        return placeholders, f"node names unknown ({exc}): other nodes are shown as node-<i>"
    return names, None


def _common_env(platform: Platform, rdzv: Rendezvous, nproc: int) -> dict[str, str]:
    """What torchrun sets alike in every process of the job."""
    common: dict[str, str] = {
        "MASTER_ADDR": rdzv.host,
        "MASTER_PORT": str(rdzv.port),
        "WORLD_SIZE": str(rdzv.nodes * nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_WORLD_SIZE": str(rdzv.nodes),
        "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": str(rdzv.nodes * nproc),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": platform.job_name() or "none",
        # rank 0 serves the store (torch's TCPStore), as under torchrun without an agent store
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        # torchrun's workers inherit its agent's setting; marun stops on the same four
        # (marun.runtime.signals.STOP)
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
    }
    # As torchrun: on NCCL a timed-out collective aborts the process instead of hanging (a value
    # the user set is kept, as torchrun keeps it).
    if not platform.env.get(ASYNC_ERROR_VAR):
        common[ASYNC_ERROR_VAR] = "1"
    # As torchrun: several processes on one node each default to every core otherwise.
    if nproc > 1 and not platform.env.get("OMP_NUM_THREADS"):
        common["OMP_NUM_THREADS"] = "1"
    return common


@dataclass(frozen=True)
class _Job:
    """What every node's processes share: computed once, also for a plan of 1,024 nodes."""

    platform: Platform
    rdzv: Rendezvous
    nproc: int
    argv: tuple[str, ...]
    logs: str
    common: Mapping[str, str]


def _node_plan(job: _Job, node: int, host: str, ifname_env: Mapping[str, str]) -> NodePlan:
    """Node `node`'s processes, one per device; `ifname_env` on this node only."""
    platform, rdzv, nproc, argv, logs, common = (
        job.platform, job.rdzv, job.nproc, job.argv, job.logs, job.common
    )  # fmt: skip
    if platform.settings.keep_platform_args:
        return _node_as_the_platform_starts_it(job, node, host, ifname_env)
    processes = []
    for local in range(nproc):
        rank = node * nproc + local
        env = {
            **common,
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "GROUP_RANK": str(node),
            # The node rank, as PyTorchJob sets it (kubeflow/trainer #1790); RANK above is
            # the process rank, as torchrun sets it.
            "NODE_RANK": str(node),
            "ROLE_RANK": str(rank),
            ERROR_FILE_VAR: f"{logs}/rank_{rank}.error.json",
            **ifname_env,
        }
        processes.append(
            ProcessSpec(
                name=f"rank{rank}",
                argv=argv,
                env=env,
                cwd=platform.cwd,
                log=f"{logs}/rank_{rank}.log",
                role="worker",
                rank=rank,
                # rank 0 serves the rendezvous store (torch's TCPStore) on node 0
                listens=(rdzv.port,) if rank == 0 else (),
            )
        )
    return NodePlan(index=node, host=host, processes=tuple(processes))


def _node_as_the_platform_starts_it(
    job: _Job, node: int, host: str, ifname_env: Mapping[str, str]
) -> NodePlan:
    """`--keep-platform-args`: the file once per node with the platform's arguments unchanged
    and none of torchrun's variables, as the platform starts it (a script that parses
    `--init_method --rank --world_size` and starts one process per GPU itself, such as with
    torch.multiprocessing.spawn, computes each global rank from them)."""
    process = ProcessSpec(
        name=f"node{node}",
        argv=job.argv,
        env=dict(ifname_env),
        cwd=job.platform.cwd,
        log=f"{job.logs}/node_{node}.log",
        role="worker",
        rank=node,
        listens=(job.rdzv.port,) if node == 0 else (),
    )
    return NodePlan(index=node, host=host, processes=(process,))


def _processes_per_node(platform: Platform) -> int:
    """--nproc-per-node, else MA_NUM_GPUS; with --keep-platform-args one (the platform's way),
    and more than one asked for is bad input: the appended --rank is the node's."""
    nproc = platform.devices_per_node()
    if not platform.settings.keep_platform_args:
        return nproc
    if platform.settings.nproc_per_node is not None and nproc > 1:
        raise bad_value(
            "--nproc-per-node",
            nproc,
            "1 with --keep-platform-args: the platform's arguments (--rank: the node's rank) are "
            "for one process per node that starts its GPUs' processes itself; or leave out "
            "--keep-platform-args for one process per device with torchrun's env://",
        )
    return 1


def plan(platform: Platform, all_nodes: bool) -> LaunchPlan:
    rdzv = read_rendezvous(platform)
    nproc = _processes_per_node(platform)
    argv = script_argv(platform)  # a missing script fails before the NIC is looked for
    logs = log_dir(platform)

    from marun.inputs.nic import choose_nic

    hints = [h for h in (platform.env.get("MA_CURRENT_IP"), rdzv.host) if h]
    nic = choose_nic(platform.settings.nic, hints)
    ifname_env = socket_ifname_env(platform, nic, SOCKET_IFNAME_VARS)
    job = _Job(platform, rdzv, nproc, argv, logs, _common_env(platform, rdzv, nproc))

    def node_plan(node: int, host: str, this_node: bool) -> NodePlan:
        return _node_plan(job, node, host, ifname_env if this_node else {})

    notes: list[str] = []
    gpus = platform.env.get("MA_NUM_GPUS", "")
    if platform.settings.keep_platform_args and gpus not in ("", "0", "1"):
        notes.append(
            f"--keep-platform-args: the file runs once per node with the platform's arguments, "
            f"as the platform starts it (MA_NUM_GPUS={gpus}: it starts a process per GPU "
            "itself, e.g. torch.multiprocessing.spawn); without the option marun starts one per "
            "device with torchrun's variables"
        )
    if platform.settings.standalone and platform.settings.master_port is None:
        notes.append(
            f"--standalone: the rendezvous is {rdzv.host}:{rdzv.port}, a port free when planned "
            "(as torchrun --standalone takes one); --master-port names one"
        )
    unset = [n for n in SOCKET_IFNAME_VARS if not platform.env.get(n) and n not in ifname_env]
    if unset and nic.guessed:
        # Said, not silently skipped: a NIC guessed from the default route would pin gloo/NCCL
        # to the wrong one (common.socket_ifname_env).
        notes.append(
            f"{' and '.join(unset)} not set: no interface of this host holds "
            f"{' or '.join(hints) or 'a known address'}; gloo and NCCL pick one themselves "
            "(set nic, --nic, to name it)"
        )
    # Node 0's marun leads, at the rendezvous host every node was given.
    shape = JobShape(host=rdzv.host, nodes=rdzv.nodes, index=rdzv.node_rank)
    if not all_nodes:
        this = node_plan(rdzv.node_rank, platform.hostname, True)
        return LaunchPlan("pytorch", (this,), tuple(notes), shape=shape)

    hosts, host_note = _node_hosts(platform, rdzv)
    if host_note and rdzv.nodes > 1:
        notes.append(host_note)
    if rdzv.nodes > 1 and ifname_env:
        notes.append(
            f"{' and '.join(sorted(ifname_env))} set on node {rdzv.node_rank} only: the other "
            "nodes' network interfaces are unknown here; each picks its own when it runs"
        )
    nodes = tuple(
        node_plan(i, platform.hostname if i == rdzv.node_rank else hosts[i], i == rdzv.node_rank)
        for i in range(rdzv.nodes)
    )
    return LaunchPlan("pytorch", nodes, tuple(notes), shape=shape)

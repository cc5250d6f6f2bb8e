"""The `mindspore` mode: a MindSpore dynamic cluster, laid out as msrun lays it out.

One scheduler (`MS_ROLE=MS_SCHED`, the same script; it forms the cluster and trains nothing) on
node 0 and one worker (`MS_ROLE=MS_WORKER`) per device on every node. Every process gets the same
`MS_SCHED_HOST`, `MS_SCHED_PORT`, `MS_WORKER_NUM` (= `RANK_SIZE`) and `MS_TOPO_TIMEOUT` (msrun's
`--cluster_time_out`). The scheduler gets `RANK_ID=0` (as msrun gives it); worker `i` of node `n`
gets `MS_NODE_ID` = `RANK_ID` = `n*local+i` (msrun's `node_rank*local_worker_num+i`: an integer
node id pins the rank, and a worker restarted with the same id re-registers as itself) and
`DEVICE_ID=i`. Logs are msrun's: `<log_dir>/scheduler.log`, `<log_dir>/worker_<rank>.log`.
Parameter servers (`MS_PSERVER`, `MS_SERVER_NUM`) are planned on node 0 when `ms_server_num` asks
for them, and an inherited `MS_SERVER_NUM` that asks for unplanned servers is refused
(mindspore_ps.py). The secure channel (`ms_ssl`: TLS config file and passwords) is
mindspore_tls.py.

The layout comes from the node variables (`MA_NUM_HOSTS`, `VC_TASK_INDEX`, `MA_NUM_GPUS` or
`--nproc-per-node`, the job's host names), or, when `RANK_TABLE_FILE` is set, from the Ascend rank
table (for a rank-table job converted to a dynamic cluster): the scheduler on the table's first
server, one worker per device with the table's rank and physical `device_id`.

`MS_SCHED_HOST` (MindSpore takes an IPv4 address only, no name, no IPv6), first that applies:
1. `MS_SCHED_HOST` already in the environment: the user's override, used as given.
2. A one-node job: 127.0.0.1, as in MindSpore's single-machine scripts and msrun's default;
   nothing leaves the host and no name or NIC is involved.
3. Node 0's entry in the host list is an IPv4 address: that, so every node derives the same
   value from the same input. From a rank table: the first server's address (`host_nic_ip` or
   `container_ip`, else a `server_id` that is an address; MindSpore's examples write
   `"host_nic_ip": "reserve"`), which must be IPv4.
4. On node 0 itself: the address of this node's NIC (`nic`, else the interface holding this
   node's listed address or `MA_CURRENT_IP`, else the default route's): the scheduler binds it.
5. On other nodes: node 0's host name resolved with bounded retries (`resolve_timeout`; DNS for
   a pod's name can appear late). For `--all-nodes` (a dry-run, often on a laptop where the job's
   names never resolve) the wait is at most 2 s; a name that does not resolve stays a name in the
   plan, with a note that each node resolves it when it runs.
`MS_SCHED_PORT` and `MS_TOPO_TIMEOUT` already in the environment likewise win over the settings
`ms_sched_port` and `ms_topo_timeout`: they are MindSpore's own knobs, which a script converted
from MindSpore's tutorials sets.

Disaster recovery: with `MS_ENABLE_RECOVERY=1`, `MS_ENABLE_RECOVERY` and `MS_RECOVERY_PATH`
(required) are set explicitly in every process's env, since MindSpore needs both on every process
and a restarted process must get them again; the scheduler gets `MS_NODE_ID=sched`, as MindSpore's
recovery scripts give it. The scheduler and the workers are then `restart_on_failure`: the
supervisor restarts them (the plan's `max_restarts`, `recovery_wait`) instead of failing fast.

This node's processes also get `GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME` and `HCCL_SOCKET_IFNAME`
(where the user has not set them) naming this node's NIC; other nodes' NICs are theirs to find.

Rank tables: the Ascend engine starts the start file once per device with `RANK_ID`; such a
run plans its own worker only, and the run of rank 0 also the scheduler. `--per-node`, or a run
without `RANK_ID` (a start file run once per node), plans every device of this node's server, as
msrun plans every local worker. The rank table's `RANK_SIZE` and server count must agree with
`RANK_SIZE` and `MA_NUM_HOSTS` where the platform sets them. `RANK_TABLE_FILE` is neither set nor
hidden by marun: the processes inherit it, as under msrun, whose `--rank_table_file` passes it on
so that MindSpore knows the physical devices (it does not form the cluster; MS_* does). The ranks
and device ids marun assigns are the table's, so the two agree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from marun.errors import InputError, bad_value
from marun.inputs.hosts import ResolveError, is_ip, is_ipv4, node_hosts, resolve_ipv4
from marun.inputs.injected import Platform
from marun.inputs.nic import Nic, choose_nic
from marun.inputs.numbers import MAX_SECONDS, PORT_MAX, parse_int, parse_port
from marun.plan.coordination import JobShape
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec
from marun.plan.modes.common import log_dir, pending_table_plan, script_argv, socket_ifname_env
from marun.plan.modes.mindspore_notes import hccl_cm_init_notes, recovery_notes
from marun.plan.modes.mindspore_ps import server_num, with_servers
from marun.plan.modes.mindspore_tls import plan_tls, with_tls

if TYPE_CHECKING:
    from marun.inputs.ranktable import Server

MODE = "mindspore"
LOOPBACK = "127.0.0.1"
DRY_RUN_RESOLVE_TIMEOUT = 2.0  # seconds: --all-nodes must not hang on names that never resolve
IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
SCHEDULER_RECOVERY_NODE_ID = "sched"
PORT_RANGE = (1024, PORT_MAX)  # the MS_SCHED_PORT values MindSpore accepts
MAX_TOPO_TIMEOUT = int(MAX_SECONDS)


@dataclass(frozen=True)
class _Worker:
    rank: int
    device_id: int


@dataclass(frozen=True)
class _Node:
    index: int
    host: str
    workers: tuple[_Worker, ...]
    scheduler: bool


@dataclass(frozen=True)
class _Layout:
    """Who runs where: what the node-variable and the rank-table paths both produce."""

    nodes: tuple[_Node, ...]  # the nodes to plan, in index order
    this_index: int | None  # this node's index; None when a dry-run cannot tell which it is
    nic: Nic  # this node's
    sched_host: str
    worker_num: int
    notes: tuple[str, ...] = ()
    node_count: int = 1  # nodes in the whole job
    # One marun per device (the platform's once-per-device starts from a rank table): each is a
    # slot of its server, by its worker's place among the server's devices, as in ascend mode.
    slots: int = 1
    slot: int = 0

    def shape(self) -> JobShape:
        """Node 0's marun leads, at the scheduler's address every node was given."""
        return JobShape(
            self.sched_host, self.node_count, self.this_index or 0, slots=self.slots, slot=self.slot
        )


# -- MindSpore's own variables, as the environment gives them -----------------------------------


def _given(platform: Platform, name: str) -> str | None:
    value = platform.env.get(name, "").strip()
    return value or None


def _sched_host_override(platform: Platform) -> str | None:
    value = _given(platform, "MS_SCHED_HOST")
    if value is not None and not is_ipv4(value):
        raise bad_value(
            "MS_SCHED_HOST",
            platform.env["MS_SCHED_HOST"],
            "an IPv4 address (MindSpore accepts no host names and no IPv6)",
        )
    return value


def _sched_port(platform: Platform) -> int:
    low, high = PORT_RANGE
    raw = _given(platform, "MS_SCHED_PORT")
    if raw is None:
        port = platform.settings.ms_sched_port
        if not low <= port <= high:
            raise bad_value("ms_sched_port", port, f"a port number from {low} to {high}")
        return port
    return parse_port("MS_SCHED_PORT", platform.env["MS_SCHED_PORT"], low)


def _topo_timeout(platform: Platform) -> int:
    raw = _given(platform, "MS_TOPO_TIMEOUT")
    if raw is None:
        return parse_int("ms_topo_timeout", platform.settings.ms_topo_timeout, 1, MAX_TOPO_TIMEOUT)
    return parse_int("MS_TOPO_TIMEOUT", platform.env["MS_TOPO_TIMEOUT"], 1, MAX_TOPO_TIMEOUT)


def _recovery_env(platform: Platform) -> dict[str, str]:
    enabled = platform.env.get("MS_ENABLE_RECOVERY", "").strip()
    if enabled in ("", "0"):
        return {}
    if enabled != "1":
        raise bad_value(
            "MS_ENABLE_RECOVERY", platform.env["MS_ENABLE_RECOVERY"], "1 (on) or 0 (off)"
        )
    path = _given(platform, "MS_RECOVERY_PATH")
    if path is None:
        raise bad_value(
            "MS_RECOVERY_PATH",
            platform.env.get("MS_RECOVERY_PATH"),
            "a directory for MindSpore's recovery files (MS_ENABLE_RECOVERY=1 requires it)",
        )
    return {"MS_ENABLE_RECOVERY": "1", "MS_RECOVERY_PATH": path}


@dataclass(frozen=True)
class _ClusterSettings:
    """MindSpore's settings for every process, whatever the layout."""

    port: int
    topo_timeout: int
    recovery: Mapping[str, str]  # MS_ENABLE_RECOVERY and MS_RECOVERY_PATH, or nothing


def _cluster_settings(platform: Platform) -> _ClusterSettings:
    return _ClusterSettings(_sched_port(platform), _topo_timeout(platform), _recovery_env(platform))


# -- this node's NIC and node 0's address --------------------------------------------------------


def _this_nic(platform: Platform, listed: str | None, override: str | None) -> Nic:
    """The configured NIC, else the interface holding an address given for this node: its
    entry in the host list or rank table, MA_CURRENT_IP, or the MS_SCHED_HOST override."""
    candidates = (listed or "", platform.env.get("MA_CURRENT_IP", "").strip(), override or "")
    return choose_nic(platform.settings.nic, [a for a in candidates if is_ipv4(a)])


def _resolve_node0(platform: Platform, host: str, all_nodes: bool) -> tuple[str, tuple[str, ...]]:
    if not all_nodes and not platform.dry_run:
        try:
            return resolve_ipv4(host, platform.settings.resolve_timeout), ()
        except ResolveError as exc:
            raise ResolveError(
                f"MS_SCHED_HOST: node 0's {exc} (set MS_SCHED_HOST, or raise resolve_timeout)"
            ) from None
    # A dry run looks the name up once and never waits (outside the cluster it may never
    # resolve); a plan of every node built through the API waits a little.
    timeout = (
        0.0 if platform.dry_run else min(DRY_RUN_RESOLVE_TIMEOUT, platform.settings.resolve_timeout)
    )
    try:
        return resolve_ipv4(host, timeout), ()
    except ResolveError:
        waited = "a dry run does not wait" if platform.dry_run else f"waited {timeout:g}s"
        return host, (
            f"MS_SCHED_HOST shows node 0's host name {host!r}: it did not resolve here "
            f"({waited}); each node resolves it to an IPv4 address when it runs "
            "(MindSpore takes no names)",
        )


def _disagreeing_name(host: str, bound: str) -> tuple[str, ...]:
    """Node 0 binds its own address; the other nodes dial the answer to node 0's name. Where
    that name already answers here with another address, they would dial the wrong one: say so.
    One look, no wait (the name may appear in DNS only later, which is no disagreement)."""
    from marun.inputs.hosts import lookup_ipv4

    try:
        answer = lookup_ipv4(host)
    except (OSError, UnicodeError):
        return ()
    if answer == bound:
        return ()
    return (
        f"node 0's name {host!r} resolves here to {answer}, but its scheduler binds {bound} "
        "(this node's address): the other nodes dial the name's answer; set nic, or "
        "MS_SCHED_HOST, so that the two agree",
    )


# -- the layout from the node variables ----------------------------------------------------------


def _from_node_variables(platform: Platform, all_nodes: bool, override: str | None) -> _Layout:
    count = platform.num_hosts()
    index = platform.node_index()
    local = platform.devices_per_node()
    hosts = node_hosts(platform)
    if is_ip(hosts[0]) and not is_ipv4(hosts[0]):
        raise bad_value("node 0's host", hosts[0], "an IPv4 address or a host name (not IPv6)")
    nic = _this_nic(platform, hosts[index], override)
    notes: tuple[str, ...] = ()
    if override is not None:
        sched_host = override
    elif count == 1:
        sched_host = LOOPBACK
    elif is_ipv4(hosts[0]):
        sched_host = hosts[0]  # what every node reads from the same list
    elif index == 0:
        sched_host = nic.address  # the scheduler binds it: it must be this node's own
        notes = _disagreeing_name(hosts[0], nic.address)
    else:
        sched_host, notes = _resolve_node0(platform, hosts[0], all_nodes)
    planned = range(count) if all_nodes else (index,)
    nodes = tuple(
        _Node(
            index=n,
            host=hosts[n],
            workers=tuple(_Worker(rank=n * local + i, device_id=i) for i in range(local)),
            scheduler=n == 0,
        )
        for n in planned
    )
    return _Layout(nodes, index, nic, sched_host, count * local, notes, count)


# -- the layout from an Ascend rank table --------------------------------------------------------


def _server_address(server: Server) -> str | None:
    """A server's IPv4 address: its host address, else its server_id (server_list tables often
    carry `"host_nic_ip": "reserve"`, the server_id being the address)."""
    for candidate in (server.host_ip, server.server_id):
        if candidate and is_ipv4(candidate):
            return candidate
    return None


def _from_rank_table(
    platform: Platform, all_nodes: bool, override: str | None, raw_path: str
) -> _Layout:
    from marun.inputs.ranktable import (
        layout_notes,
        load_platform_rank_table,
        plans_per_device,
        rank_id_from_env,
        this_server_index,
    )

    table = load_platform_rank_table(platform, raw_path)
    servers = table.servers
    own_rank = rank_id_from_env(platform, table)
    per_device = plans_per_device(MODE, platform)
    notes: list[str] = layout_notes(table)
    this_index: int | None
    try:
        this_index = this_server_index(platform, table)
    except InputError:
        if not all_nodes:
            raise
        this_index = None  # a dry-run elsewhere: plan every server, no NIC variables
        notes.append(
            "which rank-table server this machine is could not be told: no *_SOCKET_IFNAME set"
        )
    listed = _server_address(servers[this_index]) if this_index is not None else None
    nic = _this_nic(platform, listed, override)

    first = servers[0]
    first_address = _server_address(first)
    pod, machine = platform.env.get("MA_CURRENT_IP"), platform.env.get("MA_CURRENT_HOST_IP")
    # In a pod with its own address (MA_CURRENT_IP differs from the machine's MA_CURRENT_HOST_IP)
    # the rank table's addresses are the machines': the scheduler cannot bind node 0's. Node 0's
    # pod address is what the path without a rank table uses: its own on node 0, its name's
    # answer elsewhere.
    in_pod = bool(pod and machine and pod.strip() != machine.strip())
    if override is not None:
        sched_host = override
    elif len(servers) == 1:
        sched_host = LOOPBACK
    elif in_pod and this_index == 0 and not all_nodes:
        sched_host = nic.address
    elif in_pod and platform.env.get("MA_NUM_HOSTS"):
        host0 = node_hosts(platform)[0]
        sched_host, resolved_notes = (
            (host0, ()) if is_ipv4(host0) else _resolve_node0(platform, host0, all_nodes)
        )
        notes.extend(resolved_notes)
    elif first_address is None:
        raise InputError(
            f"rank table {table.path}: first server {first.server_id!r} has no IPv4 address "
            f"(host address {first.host_ip!r}): expected one for MS_SCHED_HOST, or set "
            "MS_SCHED_HOST"
        )
    else:
        sched_host = first_address

    sched_rank = first.devices[0].rank
    if all_nodes or this_index is None:
        planned = range(len(servers))
        if per_device:
            notes.append(
                "per device: the platform starts marun once per device with its RANK_ID; each "
                f"start runs that rank's worker only, rank {sched_rank}'s also the scheduler "
                "(all shown here)"
            )
    else:
        planned = range(this_index, this_index + 1)
    nodes = []
    for n in planned:
        server = servers[n]
        devices = server.devices
        scheduler = n == 0
        if per_device and not all_nodes:
            devices = tuple(d for d in devices if d.rank == own_rank)
            scheduler = own_rank == sched_rank
        nodes.append(
            _Node(
                index=n,
                host=server.server_id,
                workers=tuple(_Worker(d.rank, d.device_id) for d in devices),
                scheduler=scheduler,
            )
        )
    slots, slot = 1, 0
    if per_device and not all_nodes and this_index is not None and own_rank is not None:
        devices = servers[this_index].devices
        slots = len(devices)
        slot = next((i for i, d in enumerate(devices) if d.rank == own_rank), 0)
    return _Layout(
        tuple(nodes),
        this_index,
        nic,
        sched_host,
        table.rank_size,
        tuple(notes),
        len(servers),
        slots,
        slot,
    )


# -- processes -----------------------------------------------------------------------------------


def _processes(
    platform: Platform,
    argv: tuple[str, ...],
    cluster: _ClusterSettings,
    layout: _Layout,
    node: _Node,
) -> tuple[ProcessSpec, ...]:
    logs = log_dir(platform)
    common = {
        "MS_SCHED_HOST": layout.sched_host,
        "MS_SCHED_PORT": str(cluster.port),
        "MS_WORKER_NUM": str(layout.worker_num),
        "MS_TOPO_TIMEOUT": str(cluster.topo_timeout),
        "RANK_SIZE": str(layout.worker_num),
    }
    recovery = cluster.recovery
    ifnames: Mapping[str, str] = {}
    if node.index == layout.this_index:
        ifnames = socket_ifname_env(platform, layout.nic, IFNAME_VARS)
    procs: list[ProcessSpec] = []
    if node.scheduler:
        env = {"MS_ROLE": "MS_SCHED", **common, "RANK_ID": "0", **recovery}
        if recovery:
            env["MS_NODE_ID"] = SCHEDULER_RECOVERY_NODE_ID
        procs.append(
            ProcessSpec(
                name="scheduler",
                argv=argv,
                env={**env, **ifnames},
                cwd=platform.cwd,
                log=os.path.join(logs, "scheduler.log"),
                role="scheduler",
                rank=None,
                restart_on_failure=bool(recovery),
                listens=(cluster.port,),
            )
        )
    for worker in node.workers:
        rank = str(worker.rank)
        env = {
            "MS_ROLE": "MS_WORKER",
            "MS_NODE_ID": rank,
            **common,
            "RANK_ID": rank,
            "DEVICE_ID": str(worker.device_id),
            **recovery,
            **ifnames,
        }
        procs.append(
            ProcessSpec(
                name=f"worker{rank}",
                argv=argv,
                env=env,
                cwd=platform.cwd,
                log=os.path.join(logs, f"worker_{rank}.log"),
                role="worker",
                rank=worker.rank,
                restart_on_failure=bool(recovery),
            )
        )
    return tuple(procs)


def plan(platform: Platform, all_nodes: bool) -> LaunchPlan:
    # Inputs that need no waiting first, so a mistake fails before any bounded wait (a rank table
    # still initializing, a host name that has yet to resolve).
    argv = script_argv(platform)
    inherited = _inherited_notes(platform)
    cluster = _cluster_settings(platform)
    servers = server_num(platform)
    tls = plan_tls(platform)
    override = _sched_host_override(platform)
    rank_table = _given(platform, "RANK_TABLE_FILE")
    if rank_table is not None:
        from marun.inputs.ranktable import RankTableNotReady, plans_per_device

        try:
            layout = _from_rank_table(platform, all_nodes, override, rank_table)
        except RankTableNotReady:  # a dry run: marun plan never waits
            then = "the scheduler and one worker per device"
            if plans_per_device(MODE, platform) and not all_nodes:
                then = (
                    f"rank {platform.env['RANK_ID'].strip()}'s worker (on rank 0 the scheduler too)"
                )
            return pending_table_plan(MODE, platform, rank_table, then)
    else:
        layout = _from_node_variables(platform, all_nodes, override)
    nodes = tuple(
        with_tls(
            NodePlan(
                index=node.index,
                host=node.host,
                processes=with_servers(_processes(platform, argv, cluster, layout, node), servers),
            ),
            tls,
        )
        for node in layout.nodes
    )
    cpu_only = rank_table is None and platform.env.get("MA_NUM_GPUS", "").strip() == "0"
    framework = hccl_cm_init_notes(platform) + recovery_notes(
        platform, dict(cluster.recovery), layout.node_count, cpu_only
    )
    notes = inherited + layout.notes + framework + (tls.notes if tls is not None else ())
    return LaunchPlan(mode=MODE, nodes=nodes, notes=notes, shape=layout.shape())


# Variables marun sets per process; one inherited from the container is replaced, and said so.
_PER_PROCESS = ("MS_ROLE", "MS_WORKER_NUM")


def _inherited_notes(platform: Platform) -> tuple[str, ...]:
    """MS_NODE_ID in the container's environment would reach the scheduler (which must have
    none) and every process marun does not give its own: refused. The per-process ones marun
    sets are replaced, with a note, so that nobody wonders where their value went."""
    if platform.env.get("MS_NODE_ID", "").strip():
        raise bad_value(
            "MS_NODE_ID",
            platform.env["MS_NODE_ID"],
            "no MS_NODE_ID in the environment: marun gives each worker its own (the "
            "scheduler must have none); unset it",
        )
    found = [f"{k}={platform.env[k]!r}" for k in _PER_PROCESS if platform.env.get(k, "").strip()]
    if not found:
        return ()
    return (
        f"inherited {', '.join(found)}: replaced by marun's own value for each process (the "
        "scheduler and every worker get theirs)",
    )

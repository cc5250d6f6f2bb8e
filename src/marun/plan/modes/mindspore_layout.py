"""The mindspore mode's layout: who runs where (the scheduler, one worker per device), this
node's NIC and node 0's address (MS_SCHED_HOST), from the node variables or from an Ascend rank
table. marun.plan.modes.mindspore turns a layout into processes; its docstring has the rules."""

from __future__ import annotations

from marun.errors import InputError, bad_value
from marun.inputs.hosts import ResolveError, is_ip, is_ipv4, node_hosts, resolve_ipv4
from marun.inputs.injected import Platform
from marun.inputs.nic import Nic, choose_nic
from marun.inputs.ranktable import RankTable, Server
from marun.inputs.records import dataclass
from marun.plan.coordination import JobShape

MODE = "mindspore"
LOOPBACK = "127.0.0.1"
DRY_RUN_RESOLVE_TIMEOUT = 2.0  # seconds: --all-nodes must not hang on names that never resolve


@dataclass(frozen=True)
class Worker:
    rank: int
    device_id: int


@dataclass(frozen=True)
class Node:
    index: int
    host: str
    workers: tuple[Worker, ...]
    scheduler: bool


@dataclass(frozen=True)
class Layout:
    """Who runs where: what the node-variable and the rank-table paths both produce."""

    nodes: tuple[Node, ...]  # the nodes to plan, in index order
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


def from_node_variables(platform: Platform, all_nodes: bool, override: str | None) -> Layout:
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
        Node(
            index=n,
            host=hosts[n],
            workers=tuple(Worker(rank=n * local + i, device_id=i) for i in range(local)),
            scheduler=n == 0,
        )
        for n in planned
    )
    return Layout(nodes, index, nic, sched_host, count * local, notes, count)


# -- the layout from an Ascend rank table --------------------------------------------------------


def _server_address(server: Server) -> str | None:
    """A server's IPv4 address: its host address, else its server_id (server_list tables often
    carry `"host_nic_ip": "reserve"`, the server_id being the address)."""
    for candidate in (server.host_ip, server.server_id):
        if candidate and is_ipv4(candidate):
            return candidate
    return None


def from_rank_table(
    platform: Platform, all_nodes: bool, override: str | None, raw_path: str
) -> Layout:
    from marun.inputs.ranktable_platform import (
        layout_notes,
        load_platform_rank_table,
        plans_per_device,
        rank_id_from_env,
        which_server,
    )

    table = load_platform_rank_table(platform, raw_path)
    servers = table.servers
    own_rank = rank_id_from_env(platform, table)
    per_device = plans_per_device(MODE, platform)
    notes: list[str] = layout_notes(table)
    this_index: int | None
    try:
        choice = which_server(platform, table)
        this_index = choice.index
        notes.append(
            f"this node is rank table server {servers[this_index].server_id} "
            f"(#{this_index}): {choice.rule}"
        )
    except InputError:
        if not all_nodes:
            raise
        this_index = None  # a dry-run elsewhere: plan every server, no NIC variables
        notes.append(
            "which rank-table server this machine is could not be told: no *_SOCKET_IFNAME set"
        )
    listed = _server_address(servers[this_index]) if this_index is not None else None
    nic = _this_nic(platform, listed, override)
    sched_host = _table_sched_host(platform, table, this_index, nic, override, all_nodes, notes)
    nodes = _table_nodes(table, this_index, own_rank, per_device, all_nodes, notes)
    slots, slot = 1, 0
    if per_device and not all_nodes and this_index is not None and own_rank is not None:
        devices = servers[this_index].devices
        slots = len(devices)
        slot = next((i for i, d in enumerate(devices) if d.rank == own_rank), 0)
    return Layout(
        nodes,
        this_index,
        nic,
        sched_host,
        table.rank_size,
        tuple(notes),
        len(servers),
        slots,
        slot,
    )


def _table_sched_host(
    platform: Platform,
    table: RankTable,
    this_index: int | None,
    nic: Nic,
    override: str | None,
    all_nodes: bool,
    notes: list[str],
) -> str:
    """MS_SCHED_HOST for a rank-table job (the module docstring's rules); notes appended."""
    servers = table.servers
    first = servers[0]
    first_address = _server_address(first)
    pod, machine = platform.env.get("MA_CURRENT_IP"), platform.env.get("MA_CURRENT_HOST_IP")
    # In a pod with its own address (MA_CURRENT_IP differs from the machine's MA_CURRENT_HOST_IP)
    # the rank table's addresses are the machines': the scheduler cannot bind node 0's. Node 0's
    # pod address is what the path without a rank table uses: its own on node 0, its name's
    # answer elsewhere.
    in_pod = bool(pod and machine and pod.strip() != machine.strip())
    if override is not None:
        return override
    if len(servers) == 1:
        return LOOPBACK
    if in_pod and this_index == 0 and not all_nodes:
        return nic.address
    if in_pod and platform.given_num_hosts() is not None:
        host0 = node_hosts(platform)[0]
        if is_ipv4(host0):
            return host0
        sched_host, resolved_notes = _resolve_node0(platform, host0, all_nodes)
        notes.extend(resolved_notes)
        return sched_host
    if first_address is None:
        raise InputError(
            f"rank table {table.path}: first server {first.server_id!r} has no IPv4 address "
            f"(host address {first.host_ip!r}): expected one for MS_SCHED_HOST, or set "
            "MS_SCHED_HOST"
        )
    return first_address


def _table_nodes(
    table: RankTable,
    this_index: int | None,
    own_rank: int | None,
    per_device: bool,
    all_nodes: bool,
    notes: list[str],
) -> tuple[Node, ...]:
    """The servers to plan: every one (`all_nodes`, or this one unknown), else this one; per
    device, only this start's own worker (and the scheduler on the scheduler's rank)."""
    servers = table.servers
    sched_rank = servers[0].devices[0].rank
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
        devices = servers[n].devices
        scheduler = n == 0
        if per_device and not all_nodes:
            devices = tuple(d for d in devices if d.rank == own_rank)
            scheduler = own_rank == sched_rank
        workers = tuple(Worker(d.rank, d.device_id) for d in devices)
        nodes.append(Node(n, servers[n].server_id, workers, scheduler))
    return tuple(nodes)

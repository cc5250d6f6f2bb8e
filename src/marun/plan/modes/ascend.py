"""`ascend`: the rank-table (HCCL) launch on Ascend, one process per device.

The Ascend-Powered-Engine platform runs the start file once per device, each time with
RANK_TABLE_FILE, ASCEND_DEVICE_ID, RANK_ID and RANK_SIZE (docs/platform-contract.md). By default
marun is that
start file and plans the one process of RANK_ID; with `--per-node` the start file runs once per
node and marun plans one process per device of this node's server in the rank table.

Each process gets (the HCCL tutorial's layout, davincirun's variables):
- `DEVICE_ID`: the physical device_id of its rank in the table; the table, not the platform's
  ASCEND_DEVICE_ID, is authoritative for which card a rank drives;
- `ASCEND_DEVICE_ID`: the platform's value for the process the platform started, otherwise the
  device's position on its server (davincirun's numbering);
- `RANK_ID`, `RANK_SIZE` (the table's rank count), `RANK_TABLE_FILE` (absolute: the process runs
  in its own directory);
- `HCCL_CONNECT_TIMEOUT=1800` unless set, as davincirun does;
- `HCCL_SOCKET_IFNAME` unless set, when `nic` is configured or an interface here holds the
  server's address; never from a default-route guess, which would pin HCCL to the wrong NIC;
- cwd `<working dir>/device<DEVICE_ID>` so per-device compiler caches and logs do not collide;
- log `<working dir>/device<DEVICE_ID>/rank_<RANK_ID>.log`: the tutorial's script writes
  `train.log<i>` there, named by device; marun names it by rank, which stays unique when nodes
  share a working directory on a shared file system.
"""

from __future__ import annotations

import os

from marun.errors import InputError
from marun.inputs.injected import Platform
from marun.inputs.ranktable import (
    Device,
    RankTable,
    RankTableNotReady,
    Server,
)
from marun.inputs.ranktable_platform import (
    layout_notes,
    load_platform_rank_table,
    plans_per_device,
    rank_id_from_env,
    which_server,
)
from marun.inputs.records import replace
from marun.plan.coordination import JobShape
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec
from marun.plan.modes.common import pending_table_plan, script_argv, socket_ifname_env

MODE = "ascend"
HCCL_CONNECT_TIMEOUT = "1800"  # davincirun's; HCCL's 120 s default can expire while ranks compile


def _table_path(platform: Platform) -> str:
    raw = platform.env.get("RANK_TABLE_FILE", "")
    if not raw.strip():
        raise InputError(
            "RANK_TABLE_FILE is not set: expected the path of the Ascend rank table (the "
            "Ascend-Powered-Engine platform sets it), or another --mode"
        )
    return raw


def _hccl_ifname(platform: Platform, server: Server, local_addresses: set[str]) -> dict[str, str]:
    if platform.env.get("HCCL_SOCKET_IFNAME"):
        return {}
    from marun.inputs.nic import choose_nic

    if platform.settings.nic:
        return socket_ifname_env(
            platform, choose_nic(platform.settings.nic), ("HCCL_SOCKET_IFNAME",)
        )
    if server.host_ip is None or server.host_ip not in local_addresses:
        return {}  # what choose_nic would say, without scanning the interfaces per server
    nic = choose_nic(None, [server.host_ip])
    if nic.address != server.host_ip:  # choose_nic fell back to a guess
        return {}
    return socket_ifname_env(platform, nic, ("HCCL_SOCKET_IFNAME",))


def _process(
    platform: Platform,
    table: RankTable,
    server: Server,
    device: Device,
    argv: tuple[str, ...],
    ifname: dict[str, str],
    started_by_platform: bool,
) -> ProcessSpec:
    position = server.devices.index(device)
    platform_id = platform.env.get("ASCEND_DEVICE_ID", "").strip()
    env = {
        "DEVICE_ID": str(device.device_id),
        "ASCEND_DEVICE_ID": platform_id if started_by_platform and platform_id else str(position),
        "RANK_ID": str(device.rank),
        "RANK_SIZE": str(table.rank_size),
        "RANK_TABLE_FILE": table.path,
    }
    if not platform.env.get("HCCL_CONNECT_TIMEOUT"):
        env["HCCL_CONNECT_TIMEOUT"] = HCCL_CONNECT_TIMEOUT
    env.update(ifname)
    cwd = os.path.join(platform.cwd, f"device{device.device_id}")
    return ProcessSpec(
        name=f"rank{device.rank}",
        argv=argv,
        env=env,
        cwd=cwd,
        log=os.path.join(cwd, f"rank_{device.rank}.log"),
        role="worker",
        rank=device.rank,
    )


def _interfaces(platform: Platform, first: Server) -> tuple[dict[str, str] | None, set[str]]:
    """(HCCL_SOCKET_IFNAME for every server, when a configured NIC or variable fixes it; else
    this host's addresses, to find each server's interface by). The interfaces are read once
    for the whole plan (a plan of every node of a 1,024-server table read them once per
    server), and with a configured NIC the answer is the same for all."""
    if platform.env.get("HCCL_SOCKET_IFNAME") or platform.settings.nic:
        return _hccl_ifname(platform, first, set()), set()
    from marun.inputs.nic import ipv4_by_interface

    return None, {a for addrs in ipv4_by_interface().values() for a in addrs}


def _planned_servers(
    platform: Platform,
    table: RankTable,
    own_rank: int | None,
    per_device: bool,
    all_nodes: bool,
    notes: list[str],
) -> list[int]:
    """The servers this plan holds: every one, this device's, or this node's."""
    if all_nodes:
        if per_device:
            notes.append(
                "per device: the platform starts marun once per device with its RANK_ID; each "
                "start runs only that rank's process (all shown here)"
            )
        return list(range(len(table.servers)))
    if per_device:
        if own_rank is None:
            raise InputError(
                "RANK_ID is not set: expected this device's rank (the platform sets it when it "
                "runs the start file once per device), or --per-node if it runs once per node"
            )
        return [table.device_of_rank(own_rank)[0]]
    choice = which_server(platform, table)
    notes.append(
        f"this node is rank table server {table.servers[choice.index].server_id} "
        f"(#{choice.index}): {choice.rule}"
    )
    return [choice.index]


def plan(platform: Platform, all_nodes: bool) -> LaunchPlan:
    argv = script_argv(platform)  # before the wait on the table: a missing script fails at once
    per_device = plans_per_device(MODE, platform)
    raw_table = _table_path(platform)
    try:
        table = load_platform_rank_table(platform, raw_table)
    except RankTableNotReady:  # a dry run: marun plan never waits
        rank = platform.env.get("RANK_ID", "").strip()
        then = (
            f"rank {rank}'s process on its device"
            if per_device and rank and not all_nodes
            else "one process per device"
        )
        return pending_table_plan(MODE, platform, raw_table, then)
    own_rank = rank_id_from_env(platform, table)
    notes: list[str] = []
    indexes = _planned_servers(platform, table, own_rank, per_device, all_nodes, notes)

    fixed, local = _interfaces(platform, table.servers[indexes[0]])
    nodes = []
    for index in indexes:
        server = table.servers[index]
        ifname = dict(fixed) if fixed is not None else _hccl_ifname(platform, server, local)
        if not ifname and not platform.env.get("HCCL_SOCKET_IFNAME"):
            why = (
                f"no interface here holds {server.host_ip}"
                if server.host_ip
                else "the rank table gives no address for it"
            )
            notes.append(
                f"server {server.server_id}: HCCL_SOCKET_IFNAME not set, {why} (set nic to choose "
                "an interface)"
            )
        devices = server.devices
        if per_device and not all_nodes:
            devices = tuple(d for d in devices if d.rank == own_rank)
        processes = tuple(
            _process(
                platform,
                table,
                server,
                device,
                argv,
                ifname,
                started_by_platform=per_device and device.rank == own_rank,
            )
            for device in devices
        )
        nodes.append(
            NodePlan(index=index, host=server.host_ip or server.server_id, processes=processes)
        )
    if not all_nodes:
        notes.extend(_device_id_notes(nodes[0]))
    notes.extend(layout_notes(table))
    shape = _shape(platform, table, nodes[0] if not all_nodes else None)
    return LaunchPlan(mode=MODE, nodes=tuple(nodes), notes=tuple(notes), shape=shape)


def _device_id_notes(node: NodePlan) -> list[str]:
    """Where the card's physical id (the table's) and the container's own numbering differ."""
    notes = []
    for proc in node.processes:
        physical, logical = proc.env["DEVICE_ID"], proc.env["ASCEND_DEVICE_ID"]
        if physical != logical:
            notes.append(
                f"{proc.name}: DEVICE_ID={physical} is the card's physical id (the rank "
                f"table's, for HCCL); this container sees it as ASCEND_DEVICE_ID={logical}. "
                "A script choosing its device (set_context(device_id=...), "
                "torch.npu.set_device) takes ASCEND_DEVICE_ID"
            )
    return notes


def _shape(platform: Platform, table: RankTable, node: NodePlan | None) -> JobShape:
    """The table's first server leads. Each of the platform's once-per-device starts is a slot
    of its server, by its process's place among the server's devices (`node`: this start's
    plan; None for a whole-job plan)."""
    leader = table.servers[0]
    shape = JobShape(
        leader.host_ip or leader.server_id,
        len(table.servers),
        0,
        addresses=tuple(s.host_ip or s.server_id for s in table.servers),
    )
    if node is None:
        return shape
    shape = replace(shape, index=node.index)
    if platform.settings.per_node or not node.processes:
        return shape
    devices = table.servers[node.index].devices
    rank = node.processes[0].rank
    slot = next((i for i, d in enumerate(devices) if d.rank == rank), 0)
    return replace(shape, slots=len(devices), slot=slot)

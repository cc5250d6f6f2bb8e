"""The rank table as this container's platform gives it: RANK_TABLE_FILE read (and waited for)
from the platform's environment, whether each of the platform's once-per-device starts plans
its own rank, which of the table's servers this node is, and the layouts the platform
allocates (others are notes). The table itself (its formats,
the file, the wait) is marun.inputs.ranktable's."""

from __future__ import annotations

import os

from marun.errors import InputError, bad_value
from marun.inputs.injected import TASK_INDEX_VARS, Platform
from marun.inputs.numbers import MAX_NODES, is_digits, parse_int
from marun.inputs.ranktable import (
    COMPLETED,
    INITIALIZING,
    RankTable,
    RankTableNotReady,
    parse_rank_table,
    read_table_text,
)
from marun.inputs.records import dataclass

# This node's own address as the platform states it: container IP, then the physical host's
# (a group_list `server_id` is usually the host's IP; davincirun matches MA_CURRENT_HOST_IP).
_OWN_ADDRESS_VARS = ("MA_CURRENT_IP", "MA_CURRENT_HOST_IP")


def table_path(platform: Platform, raw: str) -> str:
    """RANK_TABLE_FILE as an absolute path (processes may run in a directory of their own)."""
    path = os.path.normpath(os.path.join(platform.cwd, raw))
    if not os.path.isfile(path):
        raise bad_value("RANK_TABLE_FILE", raw, "an existing rank table file")
    return path


def load_platform_rank_table(platform: Platform, raw: str) -> RankTable:
    """The table RANK_TABLE_FILE=`raw` names, waited for, and checked against what the platform
    says of the job's size (RANK_SIZE, MA_NUM_HOSTS) where it says it. A dry run (`marun plan`)
    reads it once and never waits: `RankTableNotReady` goes to the planner, which plans what it
    can and says that `marun run` would wait (`pending_note`)."""
    path = table_path(platform, raw)
    if platform.dry_run:
        table = parse_rank_table(read_table_text(path), path)
    else:
        table = load_rank_table(path, platform.settings.ranktable_timeout)
    raw_size = platform.env.get("RANK_SIZE", "")
    if raw_size.strip() and raw_size.strip() != str(table.rank_size):
        raise bad_value(
            "RANK_SIZE",
            raw_size,
            f"{table.rank_size}, the number of ranks in rank table {table.path}",
        )
    stated = platform.given_num_hosts()  # MA_NUM_HOSTS, else Volcano's VC_<TASK>_NUM
    if stated is not None and stated[1] != len(table.servers):
        raise bad_value(
            stated[0],
            platform.env[stated[0]],
            f"{len(table.servers)}, the number of servers in rank table {table.path}",
        )
    return table


def pending_note(platform: Platform, raw: str, then: str) -> str:
    """What a dry run says of a table still `initializing`: what `marun run` does instead."""
    return (
        f"rank table {table_path(platform, raw)}: status is {INITIALIZING!r} (the platform fills "
        f"it in once every pod of the job is placed); marun run waits for {COMPLETED!r}, up to "
        f"ranktable_timeout={platform.settings.ranktable_timeout:g}s, then plans {then} from it. "
        "A dry run does not wait: no process is shown; run marun plan again once it is complete"
    )


def plans_per_device(mode: str, platform: Platform) -> bool:
    """Whether each of the platform's once-per-device starts plans its own rank's processes:
    ascend always (unless --per-node); mindspore from a rank table when the start has its
    RANK_ID (the worker of that rank, and on the scheduler's rank the scheduler too)."""
    if platform.settings.per_node:
        return False
    if mode == "ascend":
        return True
    return (
        mode == "mindspore"
        and bool(platform.env.get("RANK_TABLE_FILE", "").strip())
        and bool(platform.env.get("RANK_ID", "").strip())
    )


# -- which server is this node ----------------------------------------------------------------


def rank_id_from_env(platform: Platform, table: RankTable) -> int | None:
    """RANK_ID as the platform set it for this device, validated against the table."""
    raw = platform.env.get("RANK_ID", "")
    if raw.strip() == "":
        return None
    text = raw.strip()
    if not is_digits(text) or len(text) > 12 or int(text) >= table.rank_size:
        raise bad_value(
            "RANK_ID",
            raw,
            f"an integer from 0 to {table.rank_size - 1} (rank table {table.path} has "
            f"{table.rank_size} ranks)",
        )
    return int(text)


def _local_addresses(platform: Platform) -> set[str]:
    from marun.inputs.nic import ipv4_by_interface

    found = {a for addrs in ipv4_by_interface().values() for a in addrs}
    found.update(platform.env[v].strip() for v in _OWN_ADDRESS_VARS if platform.env.get(v))
    return found


def _node_index(platform: Platform, table: RankTable) -> int | None:
    """The platform's node index, if it gives one, checked against the table's servers."""
    name = next((n for n in TASK_INDEX_VARS if platform.env.get(n, "").strip()), None)
    if name is None:
        return None
    raw = platform.env[name]
    if platform.given_num_hosts() is not None:
        index = platform.node_index()  # validates it against the node count
    else:
        index = parse_int(name, raw, 0, MAX_NODES - 1)
    if index >= len(table.servers):
        raise bad_value(
            name,
            raw,
            f"an index below {len(table.servers)}, the servers in rank table {table.path}",
        )
    return index


@dataclass(frozen=True)
class ServerChoice:
    """Which of the table's servers this node is, and the rule that said so (for the plan)."""

    index: int
    rule: str


def _matching(table: RankTable, addresses: set[str], container: bool) -> list[int]:
    """The servers holding one of `addresses`: as their container_ip, or else as their
    server_id or host address."""
    if container:
        return [i for i, s in enumerate(table.servers) if s.container_ip in addresses]
    return [
        i
        for i, s in enumerate(table.servers)
        if s.server_id in addresses or (s.host_ip is not None and s.host_ip in addresses)
    ]


def _by_pod_address(platform: Platform, table: RankTable) -> ServerChoice | None:
    """The one server whose address is this pod's own (MA_CURRENT_IP, the downward API's
    status.podIP): its container_ip (the Ascend Operator's tables), else its server_id or host
    address (a pod on the host network). Several matching (every simulated node on 127.0.0.1)
    tell nothing."""
    own = platform.env.get("MA_CURRENT_IP", "").strip()
    if not own:
        return None
    for container, what in ((True, "container_ip"), (False, "server_id or host address")):
        found = _matching(table, {own}, container)
        if len(found) == 1:
            return ServerChoice(found[0], f"its {what} is this pod's MA_CURRENT_IP={own}")
    return None


def which_server(platform: Platform, table: RankTable) -> ServerChoice:
    """Which of the table's servers this node is, by the first of: RANK_ID's server; the
    server holding this pod (MA_CURRENT_INSTANCE_NAME, group_list tables); the one server whose
    container_ip, else server_id or host address, is this pod's MA_CURRENT_IP; the node index
    (MA_TASK_INDEX/VC_TASK_INDEX/VK_TASK_INDEX); the server whose server_id or host address is
    one of this machine's addresses or MA_CURRENT_HOST_IP; the only server.

    This pod's own address comes before its index: the Ascend Operator orders a table's servers
    by the pod annotation `hccl/rankIndex`, which it numbers in the order of its cached pod
    list, not by the pods' Volcano indexes (mind-cluster component/ascend-operator,
    pkg/controllers/v1/pod.go and pkg/ranktable/common/common.go)."""
    rank = rank_id_from_env(platform, table)
    if rank is not None:
        return ServerChoice(table.device_of_rank(rank)[0], f"it holds RANK_ID={rank}")
    pod = platform.env.get("MA_CURRENT_INSTANCE_NAME", "").strip()
    if pod:
        holding = [i for i, server in enumerate(table.servers) if pod in server.pod_names]
        if holding:
            return ServerChoice(holding[0], f"it lists this pod, MA_CURRENT_INSTANCE_NAME={pod}")
    node = _node_index(platform, table)  # checked even where the address decides
    index_name = next((n for n in TASK_INDEX_VARS if platform.env.get(n, "").strip()), "")
    by_address = _by_pod_address(platform, table)
    if by_address is not None:
        if node is not None and node != by_address.index:
            # Not an error: the operator's order need not be the pods' (see above).
            by_address = ServerChoice(
                by_address.index,
                f"{by_address.rule}; it is server {by_address.index} of the table, not "
                f"{index_name}={node}: the table's order is not the pods'",
            )
        return by_address
    if node is not None:
        return ServerChoice(
            node, f"{index_name}={node}, by position (no server's address is MA_CURRENT_IP)"
        )
    matches = _matching(table, _local_addresses(platform), container=False)
    if len(matches) == 1:
        return ServerChoice(matches[0], "its address is one of this machine's")
    if len(table.servers) == 1:
        return ServerChoice(0, "it is the table's only server")
    ids = ", ".join(s.server_id for s in table.servers)
    if matches:
        both = ", ".join(table.servers[i].server_id for i in matches)
        raise InputError(
            f"rank table {table.path}: servers {both} "
            "all hold addresses of this machine: expected exactly one; set VC_TASK_INDEX or "
            "RANK_ID to say which node this is"
        )
    raise InputError(
        f"rank table {table.path}: none of its servers ({ids}) is this machine: expected "
        "RANK_ID, MA_CURRENT_IP, VC_TASK_INDEX or an interface address to match one"
    )


def this_server_index(platform: Platform, table: RankTable) -> int:
    """Which of the table's servers this node is (`which_server`, without the rule)."""
    return which_server(platform, table).index


# -- waiting for the table ------------------------------------------------------------------


class _StillWaiting(Exception):
    """An attempt worth repeating; `error` is what to report if it is the last."""

    def __init__(self, error: InputError) -> None:
        super().__init__(str(error))
        self.error = error


def load_rank_table(path: str, timeout: float, interval: float = 1.0) -> RankTable:
    """Read the table, re-reading every `interval` seconds while its status is `initializing`
    (the platform writes the device addresses once every pod is placed), for at most `timeout`
    seconds. Once the table has been seen initializing, a read that fails to parse is taken for
    the platform's rewrite in progress and retried too; the last error is reported at the end."""
    try:  # the usual case, a table written before the start: no retry machinery on the path to
        return parse_rank_table(read_table_text(path), path)  # exec (tenacity: 10 ms of imports)
    except RankTableNotReady:
        pass  # the first look of the loop below says "waiting for rank table", and waits
    from tenacity import RetryCallState, retry, retry_if_exception_type, stop_after_delay

    timeout = max(0.0, timeout)
    # The read above saw it initializing: from here on a read that fails to parse is the
    # platform's rewrite in flight (the first attempt below may land on it: a busy machine takes
    # longer than a rewrite to get there). `said`: "waiting for rank table" logged once.
    said = False

    def pause(state: RetryCallState) -> float:
        # Never sleep past the deadline: the last look is at the deadline itself.
        return max(0.0, min(interval, timeout - (state.seconds_since_start or 0.0)))

    @retry(
        retry=retry_if_exception_type(_StillWaiting),
        stop=stop_after_delay(timeout),
        wait=pause,
        reraise=True,
    )
    def attempt() -> RankTable:
        nonlocal said
        if not said:
            from marun.log import get_logger

            get_logger().info(
                "waiting for rank table", path=path, status=INITIALIZING, timeout=timeout
            )
            said = True
        try:
            return parse_rank_table(read_table_text(path), path)
        except RankTableNotReady:
            raise _StillWaiting(
                InputError(
                    f"rank table {path}: status is still {INITIALIZING!r} after waiting "
                    f"{timeout:g}s: expected {COMPLETED!r} (raise ranktable_timeout, "
                    "MARUN_RANKTABLE_TIMEOUT, to wait longer)"
                )
            ) from None
        except InputError as exc:
            raise _StillWaiting(exc) from None

    try:
        return attempt()
    except _StillWaiting as last:
        raise last.error from None


# -- what the hardware allows ----------------------------------------------------------------

# Devices a server can give one job on the platform: 1, 2, 4 or 8 of its 8 NPUs, and all 8 when
# the job spans servers (HCCL's ring and mesh layouts assume these). Other layouts are notes, not
# errors: hand-written tables, simulations (`marun simulate --nodes 2 --devices 2`) and hardware
# with other counts (SuperPoD servers) are real and marun cannot tell them from a mistake.
SERVER_DEVICE_COUNTS = (1, 2, 4, 8)
MULTI_SERVER_DEVICES = 8


# A server's 8 NPUs are two groups of 4 (devices 0-3 and 4-7), joined to each other more slowly
# than within a group: the platform gives a job of 2 or 4 devices on a server devices of one group.
DEVICE_GROUP = 4


def _group_notes(table: RankTable) -> list[str]:
    """A note for a lone server's 2 or 4 devices that span both groups (3,4 or 2-5)."""
    server = table.servers[0]
    ids = sorted(device.device_id for device in server.devices)
    if len(ids) not in (2, 4) or ids[-1] >= 2 * DEVICE_GROUP:
        return []
    if len({device_id // DEVICE_GROUP for device_id in ids}) == 1:
        return []
    return [
        f"rank table {table.path}: server {server.server_id}'s devices "
        f"{','.join(map(str, ids))} span both groups of 4 (0-3 and 4-7); the platform gives a job "
        f"of {len(ids)} devices on a server devices of one group, and HCCL may refuse or slow "
        "down another layout"
    ]


def layout_notes(table: RankTable) -> list[str]:
    """Plan notes for a device layout the platform does not allocate (docs/platform-contract.md)."""
    counts = [len(server.devices) for server in table.servers]
    if len(counts) == 1:
        if counts[0] in SERVER_DEVICE_COUNTS:
            return _group_notes(table)
        return [
            f"rank table {table.path}: server {table.servers[0].server_id} has {counts[0]} "
            "devices; the platform allocates 1, 2, 4 or 8 devices on a server, and HCCL may "
            "refuse another count"
        ]
    odd = [
        (server.server_id, count)
        for server, count in zip(table.servers, counts)
        if count != MULTI_SERVER_DEVICES
    ]
    if not odd:
        return []
    shown = ", ".join(f"{sid} has {count}" for sid, count in odd[:3])
    more = f" and {len(odd) - 3} more" if len(odd) > 3 else ""
    return [
        f"rank table {table.path}: {len(odd)} of {len(counts)} servers do not have 8 "
        f"devices ({shown}{more}); the platform gives a job that spans servers all 8 devices "
        "of each, and HCCL may refuse another layout"
    ]

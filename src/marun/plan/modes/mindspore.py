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
supervisor restarts them (the plan's `recovery_restarts`, `recovery_wait`) instead of failing fast.

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

from marun.errors import bad_value
from marun.inputs.hosts import is_ipv4
from marun.inputs.injected import Platform
from marun.inputs.numbers import MAX_SECONDS, PORT_MAX, parse_int, parse_port
from marun.inputs.records import dataclass
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec
from marun.plan.modes.common import log_dir, pending_table_plan, script_argv, socket_ifname_env
from marun.plan.modes.mindspore_layout import (
    MODE,
    Layout,
    Node,
    from_node_variables,
    from_rank_table,
)
from marun.plan.modes.mindspore_notes import hccl_cm_init_notes, recovery_notes
from marun.plan.modes.mindspore_ps import server_num, with_servers
from marun.plan.modes.mindspore_tls import plan_tls, with_tls

IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
SCHEDULER_RECOVERY_NODE_ID = "sched"
PORT_RANGE = (1024, PORT_MAX)  # the MS_SCHED_PORT values MindSpore accepts
MAX_TOPO_TIMEOUT = int(MAX_SECONDS)
# MindSpore's retry intervals (seconds; its defaults when unset), checked, never set by marun
RETRY_LOWER, RETRY_UPPER = "MS_RETRY_INTERVAL_LOWER", "MS_RETRY_INTERVAL_UPPER"
DEFAULT_RETRY_LOWER, DEFAULT_RETRY_UPPER = 3, 5
MAX_RETRY_INTERVAL = 3600


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


def _retry_interval(platform: Platform, name: str) -> int | None:
    """One of MindSpore's retry intervals, or None when unset. Not `_given`: MindSpore takes an
    empty value for its default but a blank one to stoi, which throws."""
    raw = platform.env.get(name, "")
    return parse_int(name, raw, 1, MAX_RETRY_INTERVAL) if raw != "" else None


def _check_retry_intervals(platform: Platform) -> None:
    """MindSpore's `MS_RETRY_INTERVAL_LOWER` and `_UPPER`: passed through as given (msrun sets
    neither), but checked. Each process reads them with C++'s stoi and draws a whole number of
    seconds uniformly between them for its heartbeat to the scheduler and the CPU collective
    library's retries: a value that is no number aborts every process in `init()`, 0 spins the
    heartbeat, a lower bound above the upper one is undefined. An unset one is MindSpore's
    default (3 and 5)."""
    low, up = _retry_interval(platform, RETRY_LOWER), _retry_interval(platform, RETRY_UPPER)
    lower = DEFAULT_RETRY_LOWER if low is None else low
    upper = DEFAULT_RETRY_UPPER if up is None else up
    if lower <= upper:  # (MindSpore's defaults are in order)
        return
    if low is None:  # the upper bound alone is below MindSpore's default lower one
        raise bad_value(
            RETRY_UPPER,
            platform.env[RETRY_UPPER],
            f"at least {lower} ({RETRY_LOWER}, MindSpore's default)",
        )
    whose = "" if up is not None else ", MindSpore's default"
    raise bad_value(
        RETRY_LOWER, platform.env[RETRY_LOWER], f"at most {upper} ({RETRY_UPPER}{whose})"
    )


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
    _check_retry_intervals(platform)
    return _ClusterSettings(_sched_port(platform), _topo_timeout(platform), _recovery_env(platform))


# -- processes -----------------------------------------------------------------------------------


def _scheduler(
    platform: Platform,
    argv: tuple[str, ...],
    cluster: _ClusterSettings,
    common: Mapping[str, str],
    ifnames: Mapping[str, str],
) -> ProcessSpec:
    """MindSpore's scheduler (`common`: every process's MS_*; `ifnames`: this node's NIC)."""
    recovery = cluster.recovery
    env = {"MS_ROLE": "MS_SCHED", **common, "RANK_ID": "0", **recovery}
    if recovery:
        env["MS_NODE_ID"] = SCHEDULER_RECOVERY_NODE_ID
    return ProcessSpec(
        name="scheduler",
        argv=argv,
        env={**env, **ifnames},
        cwd=platform.cwd,
        log=os.path.join(log_dir(platform), "scheduler.log"),
        role="scheduler",
        rank=None,
        restart_on_failure=bool(recovery),
        listens=(cluster.port,),
    )


def _processes(
    platform: Platform,
    argv: tuple[str, ...],
    cluster: _ClusterSettings,
    layout: Layout,
    node: Node,
) -> tuple[ProcessSpec, ...]:
    logs = log_dir(platform)
    common = {
        "MS_SCHED_HOST": layout.sched_host,
        "MS_SCHED_PORT": str(cluster.port),
        "MS_WORKER_NUM": str(layout.worker_num),
        "MS_TOPO_TIMEOUT": str(cluster.topo_timeout),
        "RANK_SIZE": str(layout.worker_num),
    }
    # As msrun's processes see it (part 19): one OpenMP thread each unless the user says otherwise.
    if not platform.env.get("OMP_NUM_THREADS"):
        common["OMP_NUM_THREADS"] = "1"
    recovery = cluster.recovery
    ifnames: Mapping[str, str] = {}
    if node.index == layout.this_index:
        ifnames = socket_ifname_env(platform, layout.nic, IFNAME_VARS)
    procs: list[ProcessSpec] = []
    if node.scheduler:
        procs.append(_scheduler(platform, argv, cluster, common, ifnames))
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
        from marun.inputs.ranktable import RankTableNotReady
        from marun.inputs.ranktable_platform import plans_per_device

        try:
            layout = from_rank_table(platform, all_nodes, override, rank_table)
        except RankTableNotReady:  # a dry run: marun plan never waits
            then = "the scheduler and one worker per device"
            if plans_per_device(MODE, platform) and not all_nodes:
                then = (
                    f"rank {platform.env['RANK_ID'].strip()}'s worker (on rank 0 the scheduler too)"
                )
            return pending_table_plan(MODE, platform, rank_table, then)
    else:
        layout = from_node_variables(platform, all_nodes, override)
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

"""The plan's coordination section: how the marun of each node of a multi-node job reports to
node 0's (the leader's) so that the nodes start together and end together.

Built once here from each mode's notion of the leader's address (pytorch: the init_method host;
tensorflow: the chief or first worker; mindspore: MS_SCHED_HOST; ascend: the rank table's first
server; mpi: the first host, where mpirun runs). A single-node job gets none and pays nothing for
coordination. The protocol is in marun.job and
docs/supervision.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marun.errors import bad_value
from marun.inputs.injected import Platform
from marun.plan.launch_plan import LaunchPlan

# Where the job's shared secret comes from, in order (the secret itself never enters the plan).
TOKEN_VAR = "MARUN_JOB_TOKEN"
HEARTBEAT = 1.0  # seconds between heartbeats, both ways (marun.job)
MIN_PEER_TIMEOUT = 3 * HEARTBEAT  # a node is lost after this many missed heartbeats at least
NO_SECRET_NOTE = (
    "WARNING: no job secret (set MARUN_JOB_TOKEN, or mount Volcano's ssh key): anyone who can "
    "reach node 0's job port from one of the job's hosts can stop the job with a forged "
    "failure; messages are checked by job id and source address only"
)


@dataclass(frozen=True)
class Coordination:
    host: str  # the leader's address or name, as every node reaches it
    port: int
    nodes: int  # nodes (containers) in the job
    index: int  # this node's
    job: str  # the job's id; a message with another is refused
    hosts: tuple[str, ...] = ()  # every node's host (source addresses allowed); empty: unknown
    leader: int = 0  # the node whose marun runs the coordinator
    slots: int = 1  # marun processes per node (Ascend per device: one per device)
    slot: int = 0  # this marun's among them
    arrival_timeout: float = 300.0
    peer_timeout: float = 60.0
    hang_timeout: float | None = None
    auth: str = "none"  # token (MARUN_JOB_TOKEN), ssh-key (Volcano's ssh secret) or none
    ssh_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "nodes": self.nodes,
            "index": self.index,
            "leader": self.leader,
            "slots": self.slots,
            "slot": self.slot,
            "job": self.job,
            "hosts": list(self.hosts),
            "arrival_timeout": self.arrival_timeout,
            "peer_timeout": self.peer_timeout,
            "hang_timeout": self.hang_timeout,
            "auth": self.auth,
            "ssh_dir": self.ssh_dir,
        }

    def describe(self) -> str:
        hang = "off" if self.hang_timeout is None else f"{self.hang_timeout:g}s"
        return (
            f"coordination: node {self.leader} at {self.host}:{self.port}, {self.nodes} nodes x "
            f"{self.slots} slot(s), this node {self.index} slot {self.slot}; arrival "
            f"{self.arrival_timeout:g}s, peer {self.peer_timeout:g}s, hang {hang}; auth "
            f"{self.auth}" + (f"\n{NO_SECRET_NOTE}" if self.auth == "none" else "")
        )


def coordination_from_dict(data: Mapping[str, Any]) -> Coordination:
    """The inverse of `Coordination.to_dict`."""
    hang = data.get("hang_timeout")
    return Coordination(
        host=str(data["host"]),
        port=int(data["port"]),
        nodes=int(data["nodes"]),
        index=int(data["index"]),
        job=str(data["job"]),
        hosts=tuple(str(h) for h in data.get("hosts", ())),
        leader=int(data.get("leader", 0)),
        slots=int(data.get("slots", 1)),
        slot=int(data.get("slot", 0)),
        arrival_timeout=float(data.get("arrival_timeout", 300.0)),
        peer_timeout=float(data.get("peer_timeout", 60.0)),
        hang_timeout=None if hang is None else float(hang),
        auth=str(data.get("auth", "none")),
        ssh_dir=None if data.get("ssh_dir") is None else str(data["ssh_dir"]),
    )


def ssh_key_path(platform: Platform) -> str:
    import os

    base = platform.settings.ssh_dir or os.path.join(
        platform.env.get("HOME") or os.path.expanduser("~"), ".ssh"
    )
    return os.path.join(base, "id_rsa")


def _auth(platform: Platform) -> str:
    import os

    if platform.env.get(TOKEN_VAR):
        return "token"
    if os.path.isfile(ssh_key_path(platform)):
        return "ssh-key"
    return "none"


def _job_hosts(platform: Platform, nodes: int) -> tuple[str, ...]:
    from marun.errors import InputError
    from marun.inputs.hosts import node_hosts

    if not platform.env.get("MA_NUM_HOSTS") or platform.num_hosts() != nodes:
        return ()
    try:
        return node_hosts(platform)
    except InputError:
        return ()


def _layout(mode: str, platform: Platform, plan: LaunchPlan) -> tuple[str, int, int, int, int]:
    """(leader host, nodes, leader index, slots, slot) for `mode`; nodes 1: no coordination."""
    node = plan.nodes[0]
    if mode == "mpi":
        # [part12-spine stop-gap until floor's job-shape work: the planner should state this.]
        # Node 0 runs mpirun; every other node is daemons only (sshd).
        from marun.inputs.hosts import node_hosts

        hosts = node_hosts(platform)
        return hosts[0], len(hosts), 0, 1, 0
    if mode == "pytorch":
        from marun.plan.modes.pytorch import read_rendezvous

        rdzv = read_rendezvous(platform)
        return rdzv.host, rdzv.nodes, 0, 1, 0
    if mode == "tensorflow":
        # The containers in the plan's order (ps, chief, workers); the leader is the first that
        # is not a parameter server, which ends with the job rather than on its own.
        from marun.inputs.tf_hosts import split_address
        from marun.plan.modes.tensorflow import _read_job, build_cluster, has_cluster

        if not has_cluster(platform):  # appended flags, or TF_PS_HOSTS / TF_WORKER_HOSTS
            return platform.hostname, 1, 0, 1, 0
        _, _, ps, workers = _read_job(platform)
        if node.processes and node.processes[0].role == "evaluator":
            return platform.hostname, 1, 0, 1, 0  # outside the cluster: not coordinated
        cluster = build_cluster(ps, workers, platform.settings.tf_chief)
        first = (cluster.get("chief") or cluster["worker"])[0]
        host = (split_address(first) or (first, 0))[0]
        return host, len(ps) + len(workers), len(ps), 1, 0
    if mode == "mindspore":
        sched = node.processes[0].env.get("MS_SCHED_HOST", "") if node.processes else ""
        count = platform.num_hosts()
        if not platform.env.get("RANK_TABLE_FILE"):
            return sched, count, 0, 1, 0
        from marun.inputs.ranktable import load_platform_rank_table, plans_per_device

        table = load_platform_rank_table(platform, platform.env["RANK_TABLE_FILE"])
        count = len(table.servers)
        ranks = [p.rank for p in node.processes if p.role == "worker"]
        if not plans_per_device(mode, platform) or not ranks:
            return sched, count, 0, 1, 0
        # One marun per device (the platform's once-per-device starts): each is a slot of its
        # server, by its worker's place among the server's devices, as in ascend mode.
        server = table.servers[node.index]
        slot = next((i for i, d in enumerate(server.devices) if d.rank == ranks[0]), 0)
        return sched, count, 0, len(server.devices), slot
    if mode == "ascend":
        import os

        from marun.inputs.ranktable import load_rank_table

        path = os.path.normpath(os.path.join(platform.cwd, platform.env["RANK_TABLE_FILE"]))
        table = load_rank_table(path, platform.settings.ranktable_timeout)
        leader = table.servers[0]
        host = leader.host_ip or leader.server_id
        if platform.settings.per_node or not node.processes:
            return host, len(table.servers), 0, 1, 0
        server = table.servers[node.index]
        rank = node.processes[0].rank
        slot = next((i for i, d in enumerate(server.devices) if d.rank == rank), 0)
        return host, len(table.servers), 0, len(server.devices), slot
    return platform.hostname, 1, 0, 1, 0


def job_id(
    name: str | None,
    mode: str,
    leader: str,
    port: int,
    nodes: int,
    slots: int,
    hosts: tuple[str, ...],
) -> str:
    """The job's id, the same on every node of the job and unlike another job's on the same
    network: the platform's job name (MA_VJ_NAME; `-` when unset) and a digest of everything
    else every node knows alike: the mode, node 0's address and job port, the job's size and
    its hosts. Two jobs that share all of these (no name, one init_method, hosts unknown) are
    still told apart at run time: a node's marun that is already there keeps its place
    (docs/supervision.md, "How jobs are told apart")."""
    import hashlib
    import json

    what = [name or "", mode, leader, port, nodes, slots, list(hosts)]
    digest = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:12]
    return f"{name or '-'}.{digest}"


def coordination_for(mode: str, platform: Platform, plan: LaunchPlan) -> Coordination | None:
    """This node's coordination section, or None (one node, or a whole-job plan)."""
    if len(plan.nodes) != 1 or platform.settings.job_port == 0:
        return None  # job_port 0: the user turned coordination off
    from marun.inputs.ranktable import still_initializing

    if platform.dry_run and still_initializing(platform):
        return None  # the table gives the job's layout; a dry run does not wait for it
    host, nodes, leader, slots, slot = _layout(mode, platform, plan)
    if nodes <= 1:
        # One node, even with one marun per device (Ascend per device): the job is this node;
        # it pays nothing for coordination.
        return None
    settings = platform.settings
    for name in ("arrival_timeout", "peer_timeout"):
        if getattr(settings, name) <= 0:
            raise bad_value(name, getattr(settings, name), "a number of seconds > 0")
    if settings.peer_timeout < MIN_PEER_TIMEOUT:
        raise bad_value(
            "peer_timeout",
            settings.peer_timeout,
            f"a number of seconds >= {MIN_PEER_TIMEOUT:g} (a heartbeat goes every "
            f"{HEARTBEAT:g}s; a node is lost after missing several)",
        )
    if settings.hang_timeout is not None and settings.hang_timeout <= 0:
        raise bad_value("hang_timeout", settings.hang_timeout, "a number of seconds > 0")
    if not 1 <= settings.job_port <= 65535:
        raise bad_value("job_port", settings.job_port, "a port 1-65535, or 0 for no coordination")
    hosts = _job_hosts(platform, nodes)
    return Coordination(
        host=host,
        port=settings.job_port,
        nodes=nodes,
        index=plan.nodes[0].index,
        # TensorFlow's ps and worker nodes are tasks of their own, with host lists of their own:
        # not something every node knows alike.
        job=job_id(
            platform.job_name(),
            mode,
            host,
            settings.job_port,
            nodes,
            slots,
            () if mode == "tensorflow" else hosts,
        ),
        hosts=hosts,
        leader=leader,
        slots=slots,
        slot=slot,
        arrival_timeout=float(settings.arrival_timeout),
        peer_timeout=float(settings.peer_timeout),
        hang_timeout=None if settings.hang_timeout is None else float(settings.hang_timeout),
        auth=_auth(platform),
        ssh_dir=settings.ssh_dir,
    )

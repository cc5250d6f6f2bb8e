"""The plan's coordination section (how the marun of each node of a multi-node job reports to
node 0's, the leader's, so that the nodes start together and end together) and the job's shape
each planner states (`JobShape`), from which marun.plan.build_coordination builds that section.

Values only: this module imports nothing of marun.plan, so the plan value (launch_plan) holds a
`Coordination` without an import circle. The protocol is in marun.job and docs/supervision.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from marun.inputs.records import dataclass

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from typing import Any

# Where the job's shared secret comes from, in order (the secret itself never enters the plan).
# The one spelling of the name: marun.job.protocol reads the secret from it.
TOKEN_VAR = "MARUN_JOB_TOKEN"
HEARTBEAT = 1.0  # seconds between heartbeats, both ways (marun.job)
MIN_PEER_TIMEOUT = 3 * HEARTBEAT  # a node is lost after this many missed heartbeats at least
NO_SECRET_NOTE = (
    "WARNING: no job secret (set MARUN_JOB_TOKEN, or mount Volcano's ssh key): anyone who can "
    "reach node 0's job port from one of the job's hosts can stop the job with a forged "
    "failure; messages are checked by job id and source address only"
)


@dataclass(frozen=True)
class JobShape:
    """The job's shape as this node's planner knows it, stated in the plan (`LaunchPlan.shape`)
    so that nothing reads the inputs again after the planner: node `leader`'s marun at `host`
    leads `nodes` nodes, this is node `index`; `slots` marun processes per node (Ascend per
    device: one per device), this one slot `slot`. `nodes` 1: the job is this node (no
    coordination). `hosts_in_id`: whether every node knows the platform's host list alike, so
    that it may enter the job id (not TensorFlow's ps and worker tasks, each with its own)."""

    host: str
    nodes: int
    index: int
    leader: int = 0
    slots: int = 1
    slot: int = 0
    hosts_in_id: bool = True
    # every node's address as the planner knows it (Ascend: the rank table's servers), index i
    # at position i; empty: unknown (a liveness hub's children find it here or in the hosts)
    addresses: tuple[str, ...] = ()

    @classmethod
    def one_node(cls, host: str, index: int = 0) -> JobShape:
        return cls(host=host, nodes=1, index=index)


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
    progress_timeout: float | None = None  # no step while ranks print: a hang (marun.progress)
    auth: str = "none"  # token (MARUN_JOB_TOKEN), ssh-key (Volcano's ssh secret) or none
    ssh_key: str | None = None  # Volcano's private key, the secret's source, when auth is ssh-key
    # hot spares (marun.plan.spares): of `nodes`, this many wait for a lost node's place
    spares: int = 0
    # liveness hubs (marun.plan.hubs): nodes per group whose heartbeats go through the group's
    # first node; 0: every node's go to node 0 directly
    hub_group: int = 0
    hub_hosts: tuple[str, ...] = ()  # group g's hub (node g * hub_group) at hub_hosts[g - 1]

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
            "progress_timeout": self.progress_timeout,
            "auth": self.auth,
            "ssh_key": self.ssh_key,
            **({"spares": self.spares} if self.spares else {}),  # (a plan without: as before)
            **(
                {"hub_group": self.hub_group, "hub_hosts": list(self.hub_hosts)}
                if self.hub_group
                else {}
            ),
        }

    def describe(self) -> str:
        hang = "off" if self.hang_timeout is None else f"{self.hang_timeout:g}s"
        if self.progress_timeout is not None:
            hang += f", progress {self.progress_timeout:g}s"
        return (
            f"coordination: node {self.leader} at {self.host}:{self.port}, {self.nodes} nodes x "
            f"{self.slots} slot(s), this node {self.index} slot {self.slot}; arrival "
            f"{self.arrival_timeout:g}s, peer {self.peer_timeout:g}s, hang {hang}; auth "
            f"{self.auth}" + (f"\n{NO_SECRET_NOTE}" if self.auth == "none" else "")
        )


def coordination_from_dict(data: Mapping[str, Any]) -> Coordination:
    """The inverse of `Coordination.to_dict`."""
    hang = data.get("hang_timeout")
    steps = data.get("progress_timeout")
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
        progress_timeout=None if steps is None else float(steps),
        auth=str(data.get("auth", "none")),
        ssh_key=None if data.get("ssh_key") is None else str(data["ssh_key"]),
        spares=int(data.get("spares", 0)),
        hub_group=int(data.get("hub_group", 0)),
        hub_hosts=tuple(str(h) for h in data.get("hub_hosts", ())),
    )

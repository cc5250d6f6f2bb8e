"""The one mode-independent step from the job's shape to the plan's coordination section.

Each planner states the job's shape it already knows (`LaunchPlan.shape`: node 0's address,
the node count, this node's index, slots per node); this step adds what is the same in every
mode (the settings' port and time-outs, the job's secret, the platform's host list, the job id)
and reads no mode's inputs again. A single-node job gets no section and pays nothing for
coordination; neither does a whole-job plan (`--all-nodes`) nor a job with `job_port` 0.
"""

from __future__ import annotations

import os

from marun.errors import InputError, bad_value
from marun.inputs.injected import Platform
from marun.inputs.numbers import PORT_MAX, PORT_MIN, check_positive_seconds, is_port
from marun.plan.coordination import HEARTBEAT, MIN_PEER_TIMEOUT, TOKEN_VAR, Coordination, JobShape
from marun.plan.hubs import hub_group
from marun.plan.launch_plan import LaunchPlan

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from typing import Any


def _auth(platform: Platform) -> str:
    if platform.env.get(TOKEN_VAR):
        return "token"
    if os.path.isfile(platform.ssh_key()):
        return "ssh-key"
    return "none"


def _job_hosts(platform: Platform, nodes: int) -> tuple[str, ...]:
    from marun.inputs.hosts import node_hosts

    if platform.given_num_hosts() is None or platform.num_hosts() != nodes:
        return ()
    try:
        return node_hosts(platform)
    except InputError:
        return ()


def job_id(
    name: str | None,
    mode: str,
    leader: str,
    port: int,
    nodes: int,
    slots: int,
    hosts: tuple[str, ...],
    rendezvous: tuple[str, ...] = (),
    hub_group: int = 0,
) -> str:
    """The job's id, the same on every node of the job and unlike another job's on the same
    network: the platform's job name (MA_VJ_NAME; `-` when unset) and a digest of everything
    else every node knows alike: the mode, node 0's address and job port, the job's size, its
    hosts and the rendezvous the platform appended to every node alike (`--init_method`,
    `--world_size`): two hand-run jobs on one
    host with one job port but their own rendezvous ports are two jobs, never one; and its
    liveness hubs' group size (every node must take the same: a node that took another is
    refused at its hello as another job's, not left beating a node 0 that ignores it). Two jobs
    that share all of these are still told apart at run time: a node's marun that is already
    there keeps its place (docs/supervision.md, "How jobs are told apart")."""
    import hashlib  # here: OpenSSL's library costs a single-node run's exec path 3 MiB
    import json

    what = [name or "", mode, leader, port, nodes, slots, list(hosts)]
    if rendezvous:  # (kept out when empty: the ids of jobs without one stay as they were)
        what.append(list(rendezvous))
    if hub_group:  # (likewise)
        what.append(["hubs", hub_group])
    digest = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:12]
    return f"{name or '-'}.{digest}"


def _check_settings(platform: Platform) -> None:
    settings = platform.settings
    for name in ("arrival_timeout", "peer_timeout"):
        check_positive_seconds(name, getattr(settings, name))
    if settings.peer_timeout < MIN_PEER_TIMEOUT:
        raise bad_value(
            "peer_timeout",
            settings.peer_timeout,
            f"a number of seconds >= {MIN_PEER_TIMEOUT:g} (a heartbeat goes every "
            f"{HEARTBEAT:g}s; a node is lost after missing several)",
        )
    for name in ("hang_timeout", "progress_timeout"):
        if getattr(settings, name) is not None:
            check_positive_seconds(name, getattr(settings, name))
    if settings.hub_group == 1:
        raise bad_value(
            "hub_group",
            1,
            "0 (no liveness hubs) or a group of at least 2 nodes (default: 64 above 1,024 nodes)",
        )
    if not is_port(settings.job_port):
        raise bad_value(
            "job_port", settings.job_port, f"a port {PORT_MIN}-{PORT_MAX}, or 0 for no coordination"
        )


def coordination_for(plan: LaunchPlan, platform: Platform) -> Coordination | None:
    """This node's coordination section from the shape `plan` states, or None (one node, a
    whole-job plan, coordination turned off with job_port 0)."""
    shape = plan.shape
    if shape is None:
        # A planner that states no shape is a bug, not "one node": a new mode cannot fall
        # through without coordination (tests/unit/test_modes.py checks every planner).
        raise TypeError(f"the {plan.mode} planner's plan states no job shape (LaunchPlan.shape)")
    if len(plan.nodes) != 1:
        return None
    if platform.settings.job_port == 0 or shape.nodes <= 1:
        # One node, even with one marun per device (Ascend per device): the job is this node.
        return None
    _check_settings(platform)
    _check_leader(plan.mode, shape.host)
    return _section(plan.mode, shape, platform)


# The appended flags every node of a job is given alike (not --rank). TensorFlow's host lists
# are not among them: the same cluster also comes from TF_*_HOSTS, and node 0's task is in the
# id already.
_SHARED_FLAGS = ("init_method", "world_size")


def _rendezvous(platform: Platform) -> tuple[str, ...]:
    return tuple(
        f"{flag}={platform.appended.get(flag)}"
        for flag in _SHARED_FLAGS
        if platform.appended.get(flag) is not None
    )


def _check_leader(mode: str, host: str) -> None:
    """Node 0's address, where every node's marun dials: a host name or an IP address. A rank
    table's placeholder `server_id` (the documents' `10.*.*.*`) is neither."""
    from marun.inputs.hosts import is_host

    if not is_host(host):
        raise bad_value(
            "node 0's address",
            host,
            f"a host name or an IP address every node can reach ({mode} mode takes it from the "
            "platform's inputs: a rank table's server_id or host_nic_ip, --init_method, the host "
            "lists)",
        )


def _section(mode: str, shape: JobShape, platform: Platform) -> Coordination:
    settings = platform.settings
    hosts = _job_hosts(platform, shape.nodes)
    auth = _auth(platform)
    hubs = _hubs(settings.hub_group, settings.job_port, shape, hosts)
    return Coordination(
        host=shape.host,
        port=settings.job_port,
        nodes=shape.nodes,
        index=shape.index,
        job=job_id(
            platform.job_name(),
            mode,
            shape.host,
            settings.job_port,
            shape.nodes,
            shape.slots,
            hosts if shape.hosts_in_id else (),
            _rendezvous(platform),
            hubs.get("hub_group", 0),
        ),
        hosts=hosts,
        leader=shape.leader,
        slots=shape.slots,
        slot=shape.slot,
        arrival_timeout=float(settings.arrival_timeout),
        peer_timeout=float(settings.peer_timeout),
        hang_timeout=None if settings.hang_timeout is None else float(settings.hang_timeout),
        progress_timeout=(
            None if settings.progress_timeout is None else float(settings.progress_timeout)
        ),
        auth=auth,
        ssh_key=platform.ssh_key() if auth == "ssh-key" else None,
        **hubs,
    )


def _hubs(
    setting: int | None, port: int, shape: JobShape, hosts: tuple[str, ...]
) -> dict[str, Any]:
    """The liveness hubs' part of the section (marun.plan.hubs): the group size and each hub's
    address; none where the job is too small, node 0 does not lead, no node knows where the
    hubs are (neither the platform's host list nor the planner names every node), or the hubs'
    ports (the job's port plus the group's number) would pass the last port."""
    size = hub_group(shape.nodes, shape.leader) if setting is None else setting
    known = hosts if len(hosts) == shape.nodes else shape.addresses
    if size < 2 or shape.leader != 0 or len(known) != shape.nodes or size >= shape.nodes:
        return {}
    if port + (shape.nodes - 1) // size > PORT_MAX:
        return {}
    return {"hub_group": size, "hub_hosts": tuple(known[h] for h in range(size, shape.nodes, size))}

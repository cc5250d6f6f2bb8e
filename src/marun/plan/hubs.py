"""Liveness hubs (docs/supervision.md, "Liveness through hubs"): above HUBS_FROM nodes, a node's
heartbeats (its relay's `beats`, node 0's `hb` back) go through its group's hub, the group's
first node, and node 0 exchanges them with one connection per group instead of one per node.
Everything else (hellos, failures, rounds, the stop) stays on each node's own connection to node
0, which is never given up: a hub only saves lines, and whatever happens to it, its group's
nodes go back to beating node 0 directly (marun.job.hub_link).

Here: who is whose hub, and where a hub listens."""

from __future__ import annotations

from marun.plan.coordination import Coordination

HUBS_FROM = 1024  # nodes: in a larger job, groups of HUB_GROUP nodes beat through their hub
HUB_GROUP = 64  # nodes per group: node 0 holds 64 hubs' heartbeats at 4,096 nodes, not 4,096


def hub_group(nodes: int, leader: int) -> int:
    """The plan's group size for a job of `nodes` (0: no hubs). Node 0 must be the job's leader:
    group 0 is node 0's own and beats it directly."""
    return HUB_GROUP if nodes > HUBS_FROM and leader == 0 else 0


def hub_of(coord: Coordination, node: int) -> int | None:
    """The hub `node` beats through (None: node 0 directly: no hubs, group 0, or a hub itself)."""
    size = coord.hub_group
    if size < 2 or coord.leader != 0:
        return None
    first = node - node % size
    return None if first in (0, node) else first


def is_hub(coord: Coordination, node: int) -> bool:
    size = coord.hub_group
    return size >= 2 and coord.leader == 0 and node > 0 and node % size == 0 and node < coord.nodes


def group_of(coord: Coordination, hub: int) -> range:
    """The nodes a hub carries the heartbeats of (its own beat node 0 directly)."""
    return range(hub + 1, min(hub + coord.hub_group, coord.nodes))


def hub_port(coord: Coordination, hub: int) -> int:
    """Where hub `hub` listens: the job's port plus its group's number, so that the hubs of a
    job simulated on one host never clash (on a cluster each is on its own machine)."""
    return coord.port + hub // coord.hub_group

"""Build this node's JobLink from the plan's coordination section (marun.launch.open_link
imports this module, only when the plan has one: a single-node run loads nothing of marun.job)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from marun.inputs.injected import Platform
from marun.job.coordinator import Coordinator
from marun.job.member import Member
from marun.job.protocol import job_secret
from marun.plan.coordination import Coordination
from marun.plan.launch_plan import LaunchPlan
from marun.runtime.round_rule import RoundRule, planned_ports


def open_link(plan: LaunchPlan, log: Any, platform: Platform | None = None) -> Member:
    """Start the coordinator when this marun is the leader's first, then connect as a member.
    `platform`: what this node was given; its `preflight` setting runs the checks at the start
    barrier (node 0's decides; none without it)."""
    coord = plan.coordination
    assert coord is not None
    node = plan.nodes[0]
    secret = job_secret(os.environ, coord.ssh_key)  # the plan's path: Platform.ssh_key()

    def emit(event: str, level: str = "info", **fields: Any) -> None:
        with contextlib.suppress(OSError, ValueError):
            getattr(log, level)(event, **fields)

    if coord.hang_timeout is not None:
        from marun.runtime.stacks import MISSING, py_spy

        if py_spy() is None:
            emit("hang_watchdog_without_stacks", "warning", reason=MISSING)
    policy = platform.settings.preflight if platform is not None else "off"
    needs = None
    if policy != "off" and coord.slot == 0 and platform is not None:
        from marun.preflight.needs import needs_of_plan  # only where a preflight runs

        needs = needs_of_plan(plan, platform)
    coordinator = None
    if coord.index == coord.leader and coord.slot == 0:
        watching = plan.supervision
        # The round-0 value of each port that moves per round: node 0's plan has them (the
        # rendezvous and the scheduler live on node 0).
        ports = planned_ports(node.processes, watching.round_ports)
        coordinator = Coordinator(
            coord,
            secret,
            log=emit,
            rule=RoundRule.of(watching),
            ports=ports,
            # beside result.json, where the supervisor writes it (marun.runtime.node_state)
            report_dir=watching.record_dir or os.path.dirname(node.processes[0].log),
            preflight=policy,
        ).start()
    relay = _relay(coord, secret, node.host, coordinator, emit)
    return Member(
        coord,
        secret,
        node.host,
        daemons_only=bool(node.processes) and all(p.daemon for p in node.processes),
        coordinator=coordinator,
        log=emit,
        preflight_needs=needs,
        relay=relay,
    )


def _relay(
    coord: Coordination,
    secret: bytes,
    host: str,
    coordinator: Coordinator | None,
    emit: Any,
) -> Any:
    """One connection per node: a job of several slots reaches node 0 through its slot 0's
    marun (marun.job.relay); none elsewhere."""
    if coord.slots == 1 or coord.slot != 0:
        return None
    from marun.errors import InputError
    from marun.job.relay import Relay

    try:
        relay = Relay(coord, secret, host, leader_local=coordinator is not None, log=emit)
    except OSError as exc:
        if coordinator is not None:
            coordinator.close(linger=0.0)
        raise InputError(
            f"node {coord.index} slot 0 cannot listen for its node's other slots "
            f"({exc.strerror}: a second slot 0 marun of this node, or of a job with the same "
            "id on this host?); expected one marun per device"
        ) from None
    return relay.start()

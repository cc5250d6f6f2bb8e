"""What this node's plan wants of it (`NodeNeeds`), from the plan (`marun run`, at the
barrier) or from the platform alone (`marun doctor` without a start command)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from marun.errors import InputError
from marun.inputs.injected import Platform
from marun.plan.launch_plan import LaunchPlan
from marun.preflight.checks import NodeNeeds

_ASCEND_HINTS = ("RANK_TABLE_FILE", "ASCEND_DEVICE_ID")  # what the platform sets on Ascend


def devices_wanted(
    platform: Platform, mode: str | None, dev_root: str = "/dev"
) -> tuple[str | None, int]:
    """(kind, count) of the devices the platform gives this node: MA_NUM_GPUS of them (the
    platform's count for GPUs and NPUs alike); NPUs in Ascend mode or where the Ascend driver
    shows, else GPUs. (None, 0) where the platform names none."""
    text = platform.env.get("MA_NUM_GPUS", "").strip()
    count = int(text) if text.isdigit() else 0
    if count <= 0:
        return None, 0
    ascend = (
        mode == "ascend"
        or any(platform.env.get(name) for name in _ASCEND_HINTS)
        or os.path.exists(os.path.join(dev_root, "davinci_manager"))
    )
    return ("npu" if ascend else "gpu"), count


def _address(platform: Platform) -> str:
    from marun.inputs.nic import choose_nic

    try:
        return choose_nic(platform.settings.nic, [platform.env.get("MA_CURRENT_IP", "")]).address
    except InputError:
        return ""


def _this_host(platform: Platform) -> str:
    from marun.inputs.hosts import node_hosts

    try:
        if platform.num_hosts() > 1:
            return node_hosts(platform)[platform.node_index()]
    except (InputError, IndexError):
        pass
    return ""


def _ifnames(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted((k, v) for k, v in env.items() if k.endswith("_SOCKET_IFNAME") and v.strip())
    )


def needs_of_platform(platform: Platform, mode: str | None, dev_root: str = "/dev") -> NodeNeeds:
    """`marun doctor`: what can be told without a plan (ports are doctor's own check)."""
    from marun.plan.modes.common import log_dir

    kind, count = devices_wanted(platform, mode, dev_root)
    processes = platform.settings.nproc_per_node or max(count, 1)
    return NodeNeeds(
        host=_this_host(platform),
        address=_address(platform),
        device_kind=kind,
        devices=count,
        processes=processes,
        dirs=(("logs", log_dir(platform)), ("work dir", platform.cwd)),
        ifnames=_ifnames(platform.env),
        dev_root=dev_root,
        env_path=platform.env.get("PATH"),
    )


def needs_of_plan(plan: LaunchPlan, platform: Platform, dev_root: str = "/dev") -> NodeNeeds:
    """At the barrier: this node's plan (its processes, their ports, their `*_SOCKET_IFNAME`,
    where it logs) and the address and name the others know it by."""
    node = plan.nodes[0]
    kind, count = devices_wanted(platform, plan.mode, dev_root)
    env: dict[str, str] = dict(platform.env)
    for process in node.processes:
        env.update(process.env)
    coord = plan.coordination
    host = coord.hosts[coord.index] if coord is not None and coord.index < len(coord.hosts) else ""
    dirs = [("logs", plan.supervision.record_dir or platform.cwd)]
    workdir = node.processes[0].cwd if node.processes else platform.cwd
    dirs.append(("work dir", workdir))
    return NodeNeeds(
        node=node.index,
        host=host or _this_host(platform),
        address=_address(platform),
        device_kind=kind,
        devices=count,
        processes=max(len(node.processes), 1),
        dirs=tuple(dirs),
        ifnames=_ifnames(env),
        ports=tuple((p.name, port) for p in node.processes for port in p.listens),
        dev_root=dev_root,
        env_path=platform.env.get("PATH"),
    )

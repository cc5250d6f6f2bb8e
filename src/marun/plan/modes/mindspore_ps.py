"""MindSpore's parameter-server role: `MS_SERVER_NUM` servers (`MS_ROLE=MS_PSERVER`).

Planned only when asked for with the setting `ms_server_num` (N > 0): N servers run the same
script on the scheduler's node, and every process gets `MS_SERVER_NUM=N`, which MindSpore needs
on every process to know how many servers to wait for. An `MS_SERVER_NUM` inherited from the
environment that asks for servers marun was not told to plan is refused: MindSpore would wait
for servers that never come, until its topology timeout.
"""

from __future__ import annotations

import os

from marun.errors import bad_value
from marun.inputs.injected import Platform
from marun.inputs.records import replace
from marun.plan.launch_plan import ProcessSpec

MAX_SERVERS = 1024  # a bound on a typo, far above any real job


def server_num(platform: Platform) -> int:
    """The servers to plan (0: none), checked against an inherited MS_SERVER_NUM."""
    wanted = platform.settings.ms_server_num
    if not 0 <= wanted <= MAX_SERVERS:
        raise bad_value("ms_server_num", wanted, f"a number of servers from 0 to {MAX_SERVERS}")
    raw = platform.env.get("MS_SERVER_NUM", "").strip()
    if raw and raw != "0" and raw != str(wanted):
        raise bad_value(
            "MS_SERVER_NUM",
            platform.env["MS_SERVER_NUM"],
            f"{wanted}, the servers marun plans (set ms_server_num / MARUN_MS_SERVER_NUM to "
            "plan parameter servers, or unset MS_SERVER_NUM)",
        )
    return wanted


def with_servers(processes: tuple[ProcessSpec, ...], count: int) -> tuple[ProcessSpec, ...]:
    """Every process gets MS_SERVER_NUM; the scheduler's node also runs the servers, each with
    the scheduler's cluster variables and its own role and log (msrun's naming style)."""
    if count == 0:
        return processes
    out = [replace(p, env={**p.env, "MS_SERVER_NUM": str(count)}) for p in processes]
    sched = next((p for p in out if p.role == "scheduler"), None)
    if sched is None:
        return tuple(out)
    logs = os.path.dirname(sched.log)
    base = {k: v for k, v in sched.env.items() if k not in ("RANK_ID", "MS_NODE_ID")}
    for i in range(count):
        env = {**base, "MS_ROLE": "MS_PSERVER"}
        if "MS_ENABLE_RECOVERY" in base:
            env["MS_NODE_ID"] = f"server{i}"  # stable, as a restarted process needs
        out.insert(
            1 + i,
            ProcessSpec(
                name=f"server{i}",
                argv=sched.argv,
                env=env,
                cwd=sched.cwd,
                log=os.path.join(logs, f"server_{i}.log"),
                role="server",
                rank=None,
            ),
        )
    return tuple(out)

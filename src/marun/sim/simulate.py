"""`marun simulate`: a whole job on this machine, so a start file can be tried before a cluster
is paid for.

For every simulated container it makes exactly what the platform would inject (the MA_*/VC_*
variables, a rank table for `ascend`, the appended `--init_method` or TensorFlow arguments) and
starts one `marun run --supervise` with it on 127.0.0.1, ports picked free. Those runs are the
processes of one plan on this machine, supervised like any other: fail-fast across the simulated
nodes, signals relayed, the job's exit status returned. Each inner run prefixes its own lines
`[node:rank]`; the outer supervisor adds nothing.

`mpi` runs on simulated hosts instead: one network namespace per node (needs root), see
marun.sim.simulate_mpi.

`simulate(SimulateRequest)` is the whole command: it builds that plan and runs it through
`marun.runtime.execute`, as `marun run` runs any plan.

Layout: everything under `<log dir>/simulate/`: `node<i>/` is node i's log directory (and, for
`ascend`, its working directory, so the per-device `device<id>/` directories of different nodes
do not collide), `rank_table.json` for `ascend`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from marun.errors import InputError, bad_value
from marun.inputs.injected import Platform
from marun.inputs.records import replace
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec
from marun.sim.ports import free_port
from marun.sim.shared import JOB, outer_supervision, script_words

SIM_MODES = ("pytorch", "mindspore", "tensorflow", "ascend")


@dataclass(frozen=True)
class Container:
    """One container the platform would start: its env, appended words and where it runs."""

    name: str
    env: Mapping[str, str]
    appended: tuple[str, ...]
    cwd: str
    log_dir: str
    daemon: bool = False


def _node_env(nodes: int, devices: int, index: int, task: str = "worker") -> dict[str, str]:
    return {
        # Every node's marun writes to this one console: only node 0 prints the job's first
        # failure with its last lines.
        "MARUN_SHARED_CONSOLE": "1",
        # No preflight at the barrier: the simulated nodes' devices are stand-ins (MA_NUM_GPUS on
        # a machine without them) and every node is this one machine (docs/preflight.md).
        "MARUN_PREFLIGHT": "off",
        "MA_NUM_HOSTS": str(nodes),
        "MA_NUM_GPUS": str(devices),
        "VC_TASK_INDEX": str(index),
        "MA_VJ_NAME": JOB,
        "MA_TASK_NAME": task,
        f"VC_{task.upper()}_HOSTS": ",".join(["127.0.0.1"] * nodes),
        "MA_CURRENT_IP": "127.0.0.1",
    }


# The engines' own log levels that simulate quietens where the user has set nothing: MindSpore
# logs every connection of its dynamic cluster at WARNING (half of a small job's lines).
# GLOG_v: 0 debug, 1 info, 2 warning (MindSpore's default), 3 error.
QUIET_ENGINE_LOGS = {"mindspore": {"GLOG_v": "3"}}


def quiet_engine_logs(mode: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The quiet defaults for `mode`, less those the user's environment sets."""
    env = os.environ if env is None else env
    return {k: v for k, v in QUIET_ENGINE_LOGS.get(mode, {}).items() if k not in env}


def rank_table(nodes: int, devices: int) -> dict[str, object]:
    """A server_list (version 1.0) table as the platform mounts it, every server on 127.0.0.1.
    The device addresses are from TEST-NET-1: no NPU exists here, nothing dials them."""
    return {
        "version": "1.0",
        "server_count": str(nodes),
        "server_list": [
            {
                "server_id": f"{JOB}-worker-{i}",
                "host_nic_ip": "127.0.0.1",
                "device": [
                    {
                        "device_id": str(d),
                        "device_ip": f"192.0.2.{(i * devices + d) % 250 + 1}",
                        "rank_id": str(i * devices + d),
                    }
                    for d in range(devices)
                ],
            }
            for i in range(nodes)
        ],
        "status": "completed",
    }


def containers(
    mode: str, nodes: int, devices: int, cwd: str, sim_dir: str, tf_chief: bool = False
) -> list[Container]:
    def node_dir(i: int) -> str:
        return os.path.join(sim_dir, f"node{i}")

    if mode == "pytorch":
        port = free_port()
        out = []
        for i in range(nodes):
            appended: tuple[str, ...] = ("--init_method", f"tcp://127.0.0.1:{port}")
            if nodes > 1:
                appended += ("--rank", str(i), "--world_size", str(nodes))
            out.append(
                Container(f"node{i}", _node_env(nodes, devices, i), appended, cwd, node_dir(i))
            )
        return out
    if mode == "mindspore":
        sched_port = str(free_port())
        return [
            Container(
                f"node{i}",
                {
                    **_node_env(nodes, devices, i),
                    "MARUN_MS_SCHED_PORT": sched_port,
                    **quiet_engine_logs(mode),
                },
                (),
                cwd,
                node_dir(i),
            )
            for i in range(nodes)
        ]
    if mode == "tensorflow":
        return _tensorflow_containers(nodes, devices, cwd, sim_dir, tf_chief)
    if mode == "ascend":
        return _ascend_containers(nodes, devices, sim_dir)
    raise bad_value("--mode", mode, "one of " + ", ".join(SIM_MODES) + " (mpi: see docs/mpi.md)")


def _tensorflow_containers(
    nodes: int, devices: int, cwd: str, sim_dir: str, tf_chief: bool
) -> list[Container]:
    """One ps and one worker container per node, the cluster's ports picked free."""
    if nodes == 1:
        # One node: one container, nothing appended (the platform's single-node TF job).
        log = os.path.join(sim_dir, "node0")
        return [Container("node0", _node_env(1, devices, 0), (), cwd, log)]
    ps = [f"127.0.0.1:{free_port()}" for _ in range(nodes)]
    workers = [f"127.0.0.1:{free_port()}" for _ in range(nodes)]
    out = []
    for job in ("ps", "worker"):
        for i in range(nodes):
            appended = (
                "--task_index", str(i),
                "--ps_hosts", "[" + ",".join(ps) + "]",
                "--worker_hosts", "[" + ",".join(workers) + "]",
                "--job_name", job,
            )  # fmt: skip
            env = _node_env(nodes, devices, i, job)
            # Servers never end by themselves: ps, and under a chief every other worker.
            serves = job == "ps" or (tf_chief and i > 0)
            log = os.path.join(sim_dir, f"node{i}-{job}")
            out.append(Container(f"{job}{i}", env, appended, cwd, log, serves))
    return out


def _ascend_containers(nodes: int, devices: int, sim_dir: str) -> list[Container]:
    """One container per device (the platform runs the start file once per device, each in
    the node's cwd), every one with the simulated rank table."""
    table = os.path.join(sim_dir, "rank_table.json")
    out = []
    for i in range(nodes):
        node_dir = os.path.join(sim_dir, f"node{i}")
        for d in range(devices):
            env = {
                **_node_env(nodes, devices, i),
                "RANK_TABLE_FILE": table,
                "RANK_ID": str(i * devices + d),
                "RANK_SIZE": str(nodes * devices),
                "ASCEND_DEVICE_ID": str(d),
            }
            out.append(Container(f"node{i}-dev{d}", env, (), node_dir, node_dir))
    return out


def simulation_plan(
    platform: Platform,
    mode: str,
    nodes: int,
    devices: int,
    marun_options: Sequence[str] = (),
) -> tuple[LaunchPlan, list[Container], str]:
    """The outer plan (one `marun run` per container on this machine), the containers, and the
    simulation directory. Nothing is written."""
    if nodes < 1:
        raise bad_value("--nodes", nodes, "an integer >= 1")
    if devices < 1:
        raise bad_value("--devices", devices, "an integer >= 1")
    if not platform.command:
        raise InputError("no script given: expected `marun simulate [OPTIONS] -- SCRIPT [ARGS...]`")
    from marun.inputs.injected import resolve_command
    from marun.plan.modes.common import log_dir

    # The script must exist before anything starts; inner runs resolve it again, identically.
    resolve_command(platform.command, platform.cwd, platform.python)
    sim_dir = os.path.join(log_dir(platform), "simulate")
    planned = containers(mode, nodes, devices, platform.cwd, sim_dir, platform.settings.tf_chief)
    # The job's coordination port, free here: the containers share this machine's ports.
    job_port = str(free_port())
    planned = [replace(c, env={**c.env, "MARUN_JOB_PORT": job_port}) for c in planned]
    processes = []
    for container in planned:
        argv = (
            platform.python, "-m", "marun", "run", "--mode", mode, "--supervise",
            "--log-dir", container.log_dir, *marun_options,
            "--", *script_words(platform), *container.appended,
        )  # fmt: skip
        processes.append(
            ProcessSpec(
                name=container.name,
                argv=argv,
                env=dict(container.env),
                cwd=container.cwd,
                log=os.path.join(container.log_dir, "marun.log"),
                role="node",
                daemon=container.daemon,
            )
        )
    plan = LaunchPlan(
        f"simulate-{mode}",
        (NodePlan(0, "localhost", processes=tuple(processes)),),
        (f"{len(planned)} container(s) of a {nodes}-node x {devices}-device {mode} job",),
        outer_supervision(platform, sim_dir, fail_fast=nodes == 1),
    )
    return plan, planned, sim_dir


def write_inputs(mode: str, nodes: int, devices: int, sim_dir: str) -> None:
    os.makedirs(sim_dir, exist_ok=True)
    if mode == "ascend":
        path = os.path.join(sim_dir, "rank_table.json")
        with open(path, "w") as fh:
            json.dump(rank_table(nodes, devices), fh, indent=2)


def container_plan(node: ProcessSpec) -> LaunchPlan:
    """The plan a simulated container's `marun run` makes: its own command line (`node.argv`,
    parsed by the start path's own parser), its environment (this one's and the container's
    variables) and working directory, through the one route every `marun run` takes
    (marun.launch). Nothing is copied from the settings by hand, so what simulate shows is what
    its containers run."""
    from marun.launch import build_plan, read_inputs
    from marun.run_argv import parse_run

    parsed = parse_run(node.argv[node.argv.index("run") + 1 :])
    if parsed is None:  # simulate writes only options the start path parses
        raise AssertionError(f"simulate: {node.name}'s command line: {node.argv!r}")
    env = {**os.environ, **node.env}
    platform = read_inputs(parsed.command, parsed.config, parsed.settings, env, node.cwd)
    return build_plan(parsed.mode, platform, always_supervise=parsed.supervise)


def job_plan(mode: str, platform: Platform, outer: LaunchPlan) -> LaunchPlan:
    """The simulated job's plan, exactly as its containers run it: each container's own plan
    (`outer`'s processes are the containers' `marun run`s), the containers of one node (Ascend's
    once-per-device starts) joined into that node."""
    nodes: dict[int, NodePlan] = {}
    notes: dict[str, None] = {}
    plans = [container_plan(p) for p in outer.nodes[0].processes]
    for plan in plans:
        notes.update(dict.fromkeys(plan.notes))
        for node in plan.nodes:
            seen = nodes.get(node.index)
            nodes[node.index] = (
                node
                if seen is None
                else replace(
                    seen, files=seen.files + node.files, processes=seen.processes + node.processes
                )
            )
    quiet = quiet_engine_logs(mode, platform.env)
    if quiet:
        words = " ".join(f"{k}={v}" for k, v in quiet.items())
        notes[
            f"simulate sets {words} in every container (the engine's errors only; its own "
            "default shows every connection as a warning): set it yourself to see more"
        ] = None
    return LaunchPlan(
        mode,
        tuple(nodes[i] for i in sorted(nodes)),
        tuple(notes),
        plans[0].supervision,
        plans[0].coordination,  # node 0's: where every container's marun reports
    )


@dataclass(frozen=True)
class SimulateRequest:
    """`marun simulate`'s options as parsed: `settings` holds the settings options given on the
    command line (None: not given), by Settings field name."""

    command: tuple[str, ...]
    mode: str
    nodes: int = 2
    devices: int = 2
    config: str | None = None
    settings: Mapping[str, object] = field(default_factory=dict)
    show_plan: bool = True
    verbose: bool = False
    full_plan: bool = False


def inner_options(request: SimulateRequest, platform: Platform) -> tuple[str, ...]:
    """The options every inner `marun run` gets from the simulate command line."""
    settings = platform.settings
    words: list[str] = ["--tf-chief"] if settings.tf_chief else []
    if settings.tf_workers_only:
        words.append("--tf-workers-only")
    if request.verbose:
        words.append("--verbose")
    if settings.console_ranks:
        words += ["--console-ranks", ",".join(settings.console_ranks)]
    for name in ("grace_period", "max_restarts", "spares"):
        value = request.settings.get(name)
        if value is not None:
            words += ["--" + name.replace("_", "-"), str(value)]
    return tuple(words)


def simulate(request: SimulateRequest) -> int:
    """The whole `marun simulate`: read the settings, plan the simulated containers, show the
    job's plan, and run them through `marun.runtime.execute`; returns the job's exit code."""
    import sys

    from marun.inputs.injected import read_platform
    from marun.inputs.settings import load_settings
    from marun.runtime.execute import execute

    env = dict(os.environ)
    cwd = os.getcwd()
    settings = load_settings(request.settings, env, cwd, request.config).settings
    platform = read_platform(list(request.command), env, cwd, settings)
    options = inner_options(request, platform)
    if platform.settings.spares:
        # Refused here, once, as every simulated node would refuse it (marun.plan.spares).
        from marun.errors import bad_value
        from marun.inputs.records import replace
        from marun.plan.spares import layout

        if request.mode == "tensorflow":
            raise bad_value(
                "spares",
                platform.settings.spares,
                "0 in tensorflow mode with parameter servers (a simulated TensorFlow job has a "
                "ps and a worker container per node; hot spares in tensorflow mode are planned "
                "for a cluster of workers alone: docs/engines/tensorflow.md)",
            )
        env = {**platform.env, "MA_NUM_HOSTS": str(request.nodes), "VC_TASK_INDEX": "0"}
        layout(request.mode, replace(platform, env=env))
    if request.mode == "mpi":
        from marun.sim.simulate_mpi import run_mpi_simulation

        return run_mpi_simulation(
            platform, request.nodes, request.devices, options, request.show_plan
        )
    outer, planned, sim_dir = simulation_plan(
        platform, request.mode, request.nodes, request.devices, options
    )
    write_inputs(request.mode, request.nodes, request.devices, sim_dir)
    if request.show_plan or request.full_plan:
        job = job_plan(request.mode, platform, outer)
        if request.full_plan:
            from marun.plan.render_table import render_table

            sys.stdout.write(render_table(job, brief_after=4) + "\n")
        else:
            from marun.sim.brief import brief_plan

            sys.stdout.write(brief_plan(job, planned, request.mode, request.nodes) + "\n")
        sys.stdout.flush()
    from marun.launch import open_link

    return execute(outer, open_link)

"""The `marun` command line. Each command imports what it needs when it runs (start-up time is
the user's time: `marun run` sits in front of every training process)."""

# No `from __future__ import annotations` here: typer reads these annotations at run time, and
# marun runs under Python 3.9, where `str | None` cannot be evaluated.
import os
import sys
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from marun.errors import MarunError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Launch distributed training from what a ModelArts-style platform injects.",
)

# Options stop at the first word that is not one of marun's, so everything after the script
# (including the platform's appended --init_method/--rank/...) belongs to the script.
_CTX = {"allow_interspersed_args": False, "ignore_unknown_options": True}


class Mode(str, Enum):
    auto = "auto"
    ascend = "ascend"
    mindspore = "mindspore"
    pytorch = "pytorch"
    tensorflow = "tensorflow"
    mpi = "mpi"


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


CommandArg = Annotated[
    Optional[list[str]], typer.Argument(help="SCRIPT [ARGS...]: a .py file or a command")
]
ModeOpt = Annotated[
    Mode, typer.Option("--mode", help="launch mode; auto reads the platform's hints")
]
ConfigOpt = Annotated[
    Optional[str],
    typer.Option("--config", help="YAML settings file (else $MARUN_CONFIG, ./marun.yaml)"),
]
NprocOpt = Annotated[
    Optional[int], typer.Option("--nproc-per-node", help="processes per node (default MA_NUM_GPUS)")
]
PerNodeOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--per-node/--per-device", help="ascend: start file runs once per node / per device"
    ),
]
KeepOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--keep-platform-args", help="pass the platform's appended arguments on to the script"
    ),
]
NicOpt = Annotated[
    Optional[str], typer.Option("--nic", help="network interface to use (default: detected)")
]
LogDirOpt = Annotated[Optional[str], typer.Option("--log-dir", help="per-process log directory")]
TfChiefOpt = Annotated[
    Optional[bool], typer.Option("--tf-chief", help="tensorflow: worker 0 becomes the chief")
]
# Supervision options: they change what `run` does, not the plan; `plan` accepts them too, so a
# `run` command line can be turned into its dry-run by changing one word.
ConsoleRanksOpt = Annotated[
    Optional[str],
    typer.Option(
        "--console-ranks",
        help="whose output reaches marun's stdout: all (default), none, or e.g. 0,3-5,scheduler;"
        " log files always get everything",
    ),
]
GraceOpt = Annotated[
    Optional[float],
    typer.Option("--grace-period", help="seconds between SIGTERM and SIGKILL (default 30)"),
]
MaxRestartsOpt = Annotated[
    Optional[int],
    typer.Option("--max-restarts", help="MindSpore recovery: restarts per process (default 3)"),
]
RecoveryWaitOpt = Annotated[
    Optional[float],
    typer.Option(
        "--recovery-wait",
        help="MindSpore recovery: seconds before a restart (default 30, the scheduler's window)",
    ),
]
ArrivalOpt = Annotated[
    Optional[float],
    typer.Option(
        "--arrival-timeout",
        help="multi-node: seconds node 0 waits for every node to report (default 300)",
    ),
]
PeerOpt = Annotated[
    Optional[float],
    typer.Option(
        "--peer-timeout",
        help="multi-node: seconds of silence after which a node counts as lost (default 60)",
    ),
]
HangOpt = Annotated[
    Optional[float],
    typer.Option(
        "--hang-timeout",
        help="multi-node: seconds without a line from any rank before the job is dumped and "
        "stopped (default off; stacks need marun[hang])",
    ),
]


def _platform_and_plan(
    command: Optional[list[str]],
    mode: Mode,
    config: Optional[str],
    all_nodes: bool,
    cli_settings: "dict[str, Any]",
) -> Any:
    from marun.inputs.injected import read_platform
    from marun.inputs.settings import load_settings
    from marun.plan.modes import build_plan

    env = dict(os.environ)
    cwd = os.getcwd()
    loaded = load_settings(cli_settings, env, cwd, config)
    platform = read_platform(command or [], env, cwd, loaded.settings)
    return platform, build_plan(mode.value, platform, all_nodes)


# The options of `plan` and `run` that are settings (config.Settings fields of the same name).
SETTING_OPTIONS = (
    "nproc_per_node",
    "per_node",
    "keep_platform_args",
    "nic",
    "log_dir",
    "tf_chief",
    "console_ranks",
    "grace_period",
    "max_restarts",
    "recovery_wait",
    "arrival_timeout",
    "peer_timeout",
    "hang_timeout",
)


def _setting_options(params: "dict[str, Any]") -> "dict[str, Any]":
    """A command's settings options by name, from its parameters (None: not given)."""
    return {name: params[name] for name in SETTING_OPTIONS if name in params}


@app.command(context_settings=_CTX)
def plan(
    command: CommandArg = None,
    mode: ModeOpt = Mode.auto,
    all_nodes: Annotated[
        bool, typer.Option("--all-nodes", help="plan every node of the job")
    ] = False,
    fmt: Annotated[
        Optional[Format],
        typer.Option(
            "--format", help="table (default on a terminal), json (default otherwise), yaml"
        ),
    ] = None,
    config: ConfigOpt = None,
    nproc_per_node: NprocOpt = None,
    per_node: PerNodeOpt = None,
    keep_platform_args: KeepOpt = None,
    nic: NicOpt = None,
    log_dir: LogDirOpt = None,
    tf_chief: TfChiefOpt = None,
    console_ranks: ConsoleRanksOpt = None,
    grace_period: GraceOpt = None,
    max_restarts: MaxRestartsOpt = None,
    recovery_wait: RecoveryWaitOpt = None,
    arrival_timeout: ArrivalOpt = None,
    peer_timeout: PeerOpt = None,
    hang_timeout: HangOpt = None,
) -> None:
    """Print what `marun run` would start with these inputs (nothing is started)."""
    from marun.plan.render import render

    _, launch_plan = _platform_and_plan(
        command,
        mode,
        config,
        all_nodes,
        _setting_options(locals()),
    )
    chosen = fmt.value if fmt else ("table" if sys.stdout.isatty() else "json")
    sys.stdout.write(render(launch_plan, chosen))


@app.command(context_settings=_CTX)
def run(
    command: CommandArg = None,
    mode: ModeOpt = Mode.auto,
    config: ConfigOpt = None,
    nproc_per_node: NprocOpt = None,
    per_node: PerNodeOpt = None,
    keep_platform_args: KeepOpt = None,
    nic: NicOpt = None,
    log_dir: LogDirOpt = None,
    tf_chief: TfChiefOpt = None,
    console_ranks: ConsoleRanksOpt = None,
    grace_period: GraceOpt = None,
    max_restarts: MaxRestartsOpt = None,
    recovery_wait: RecoveryWaitOpt = None,
    arrival_timeout: ArrivalOpt = None,
    peer_timeout: PeerOpt = None,
    hang_timeout: HangOpt = None,
    supervise: Annotated[
        bool, typer.Option("--supervise", help="supervise even a single process, not exec it")
    ] = False,
) -> None:
    """Start this node's part of the job, supervise it, and exit with its status."""
    from marun.plan.modes.common import log_dir as plan_log_dir
    from marun.runtime.execute import execute

    platform, launch_plan = _platform_and_plan(
        command,
        mode,
        config,
        False,
        _setting_options(locals()),
    )
    code = execute(
        launch_plan,
        supervise=supervise,
        settings=platform.settings,
        record_dir=plan_log_dir(platform),
    )
    raise typer.Exit(code)


class SimMode(str, Enum):
    ascend = "ascend"
    mindspore = "mindspore"
    pytorch = "pytorch"
    tensorflow = "tensorflow"
    mpi = "mpi"


@app.command(context_settings=_CTX)
def simulate(
    command: CommandArg = None,
    mode: Annotated[SimMode, typer.Option("--mode", help="the platform engine to simulate")] = (
        SimMode.pytorch
    ),
    nodes: Annotated[int, typer.Option("--nodes", help="nodes (containers) in the job")] = 2,
    devices: Annotated[int, typer.Option("--devices", help="devices per node")] = 2,
    config: ConfigOpt = None,
    log_dir: LogDirOpt = None,
    tf_chief: TfChiefOpt = None,
    console_ranks: ConsoleRanksOpt = None,
    grace_period: GraceOpt = None,
    show_plan: Annotated[
        bool, typer.Option("--show-plan/--no-show-plan", help="print the job's plan first")
    ] = True,
) -> None:
    """Run a whole job on this machine: per node exactly what the platform injects, one
    `marun run` each on 127.0.0.1; exit with the job's status."""
    from dataclasses import replace

    from marun.inputs.injected import read_platform
    from marun.inputs.settings import load_settings
    from marun.plan.modes import build_plan
    from marun.plan.render import render_table
    from marun.runtime.output import Console
    from marun.runtime.supervisor import Supervisor, options_from_settings
    from marun.sim.simulate import inner_platform, simulation_plan, write_inputs

    env = dict(os.environ)
    cwd = os.getcwd()
    cli_settings = {
        "log_dir": log_dir,
        "tf_chief": tf_chief,
        "console_ranks": console_ranks,
        "grace_period": grace_period,
    }
    settings = load_settings(cli_settings, env, cwd, config).settings
    platform = read_platform(command or [], env, cwd, settings)
    inner_options = ["--tf-chief"] if settings.tf_chief else []
    if settings.console_ranks:
        inner_options += ["--console-ranks", ",".join(settings.console_ranks)]
    if grace_period is not None:
        inner_options += ["--grace-period", str(grace_period)]
    if mode is SimMode.mpi:
        from marun.sim.simulate import run_mpi_simulation

        options = replace(options_from_settings(settings, None), prefix_output=False)
        raise typer.Exit(run_mpi_simulation(platform, nodes, devices, inner_options, options))
    outer, boxes, sim_dir = simulation_plan(platform, mode.value, nodes, devices, inner_options)
    write_inputs(mode.value, nodes, devices, sim_dir)
    if show_plan:
        first = inner_platform(platform, boxes[0])
        job = build_plan(mode.value, first, all_nodes=True)
        sys.stdout.write(render_table(job))
        node0 = build_plan(mode.value, first).coordination
        if node0 is not None:
            # Arrival and job-wide fail-fast: what each container's marun does beside its ranks.
            sys.stdout.write(node0.describe().replace(", this node 0 slot 0", "") + "\n")
        sys.stdout.write("\n")
        sys.stdout.flush()
    options = replace(options_from_settings(settings, sim_dir), prefix_output=False)
    raise typer.Exit(Supervisor(outer, outer.nodes[0], options, Console()).run())


@app.command()
def doctor(
    mode: Annotated[
        Optional[Mode],
        typer.Option("--mode", help="also check what this mode needs (framework, mpirun, ports)"),
    ] = None,
    fmt: Annotated[
        Optional[Format],
        typer.Option("--format", help="table (default on a terminal), json (default otherwise)"),
    ] = None,
    config: ConfigOpt = None,
    nic: NicOpt = None,
) -> None:
    """Preflight: Python, dependencies, framework, mpirun/sshd, ssh keys, NICs, host name,
    rank table, ports. Exit 1 when a check fails."""
    from marun.doctor import exit_code, render_checks, run_checks
    from marun.inputs.injected import read_platform
    from marun.inputs.settings import load_settings
    from marun.plan.modes import detect_mode

    env = dict(os.environ)
    cwd = os.getcwd()
    platform = read_platform([], env, cwd, load_settings({"nic": nic}, env, cwd, config).settings)
    chosen = mode.value if mode else None
    if chosen == "auto":
        try:
            chosen = detect_mode(platform)
        except MarunError:
            chosen = None
    checks = run_checks(platform, chosen)
    out_fmt = fmt.value if fmt else ("table" if sys.stdout.isatty() else "json")
    sys.stdout.write(render_checks(checks, "json" if out_fmt == "json" else "table"))
    raise typer.Exit(exit_code(checks))


@app.command()
def version() -> None:
    """Print marun's version."""
    from marun import __version__

    print(__version__)


def main(argv: Optional[list[str]] = None) -> None:
    try:
        app(args=argv, prog_name="marun", standalone_mode=True)
    except MarunError as exc:
        sys.stderr.write(f"marun: error: {exc}\n")
        sys.exit(exc.exit_code)

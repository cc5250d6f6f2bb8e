"""The `marun` command line. Each command imports what it needs when it runs (start-up time is
the user's time: `marun run` sits in front of every training process)."""

# No `from __future__ import annotations` here: typer reads these annotations at run time, and
# marun runs under Python 3.9, where `str | None` cannot be evaluated.
import functools
import sys
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from marun.command.options import (
    ArrivalOpt,
    CollapseOpt,
    CommandArg,
    ConfigOpt,
    ConsoleRanksOpt,
    FatalCodesOpt,
    Format,
    FullEnvOpt,
    GraceOpt,
    HangOpt,
    KeepOpt,
    LogDirOpt,
    MasterAddrOpt,
    MasterPortOpt,
    MaxRestartsOpt,
    Mode,
    ModeOpt,
    NicOpt,
    NnodesOpt,
    NodeRankOpt,
    NprocOpt,
    PeerOpt,
    PerNodeOpt,
    PreflightOpt,
    PreloadOpt,
    ProgressPatternOpt,
    ProgressTimeoutOpt,
    RecoveryRestartsOpt,
    RecoveryWaitOpt,
    SparesOpt,
    StandaloneOpt,
    SuperviseOpt,
    TfChiefOpt,
    TfWorkersOnlyOpt,
    VerboseOpt,
    unknown_option,
)
from marun.errors import MarunError
from marun.run_argv import SETTING_OPTIONS


def _examples(*lines: str) -> str:
    """A help page's epilog: its examples as written (`\\b`: click does not rewrap them)."""
    return "\b\nExamples:\n" + "\n".join("  " + line for line in lines)


app = typer.Typer(
    # `-h` as python, torchrun and msrun take it; inherited by every command's context
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's plain help: rich's boxes wrapped words mid-way at 80 columns, cut option names and
    # read `[hang]` in a help text as markup.
    rich_markup_mode=None,
    epilog=_examples(
        "marun plan --standalone --nproc-per-node 2 -- train.py",
        "marun simulate --mode mindspore --nodes 2 --devices 2 -- train.py",
        "marun doctor --mode mpi",
        "# each command's options and examples: marun COMMAND --help",
        "marun plan --help",
    ),
    help="Launch distributed training from what a ModelArts-style platform injects.",
)

# Options stop at the first word that is not one of marun's, so everything after the script
# (including the platform's appended --init_method/--rank/...) belongs to the script.
_CTX = {"allow_interspersed_args": False, "ignore_unknown_options": True}


def _setting_options(params: "dict[str, object]") -> "dict[str, object]":
    """A command's settings options by name, from its parameters (None: not given)."""
    return {name: params[name] for name in SETTING_OPTIONS if name in params}


@app.command(
    context_settings=_CTX,
    epilog=_examples(
        "marun plan --standalone --nproc-per-node 2 -- train.py --lr 0.1",
        "MA_NUM_HOSTS=2 VC_TASK_INDEX=0 MA_NUM_GPUS=2 VC_WORKER_HOSTS=h0,h1 \\",
        "  marun plan --mode mindspore --all-nodes --format table -- train.py",
    ),
)
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
    full_env: FullEnvOpt = False,
    config: ConfigOpt = None,
    nproc_per_node: NprocOpt = None,
    per_node: PerNodeOpt = None,
    keep_platform_args: KeepOpt = None,
    nic: NicOpt = None,
    log_dir: LogDirOpt = None,
    tf_chief: TfChiefOpt = None,
    tf_workers_only: TfWorkersOnlyOpt = None,
    standalone: StandaloneOpt = None,
    nnodes: NnodesOpt = None,
    node_rank: NodeRankOpt = None,
    master_addr: MasterAddrOpt = None,
    master_port: MasterPortOpt = None,
    console_ranks: ConsoleRanksOpt = None,
    grace_period: GraceOpt = None,
    max_restarts: MaxRestartsOpt = None,
    spares: SparesOpt = None,
    fatal_exit_codes: FatalCodesOpt = None,
    preload: PreloadOpt = None,
    recovery_restarts: RecoveryRestartsOpt = None,
    recovery_wait: RecoveryWaitOpt = None,
    arrival_timeout: ArrivalOpt = None,
    peer_timeout: PeerOpt = None,
    hang_timeout: HangOpt = None,
    preflight: PreflightOpt = None,
    progress_timeout: ProgressTimeoutOpt = None,
    progress_pattern: ProgressPatternOpt = None,
    collapse_window: CollapseOpt = None,
    supervise: SuperviseOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Print what `marun run` would start with these inputs (nothing is started; a name that
    does not resolve yet is not waited for)."""
    from marun.launch import plan_from_environment
    from marun.log import set_verbose
    from marun.plan.render_table import render

    set_verbose(verbose)
    chosen = fmt.value if fmt else ("table" if sys.stdout.isatty() else "json")
    settings = _setting_options(locals())
    launch_plan = plan_from_environment(
        command or [], mode.value, config, settings, all_nodes, supervise, dry_run=True
    )
    sys.stdout.write(render(launch_plan, chosen, full_env))


@app.command(
    context_settings=_CTX,
    epilog=_examples(
        "marun run --standalone --nproc-per-node 2 -- train.py --lr 0.1",
        "# with what the platform appends on one node:",
        "marun run -- train.py --init_method tcp://127.0.0.1:29500",
    ),
)
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
    tf_workers_only: TfWorkersOnlyOpt = None,
    standalone: StandaloneOpt = None,
    nnodes: NnodesOpt = None,
    node_rank: NodeRankOpt = None,
    master_addr: MasterAddrOpt = None,
    master_port: MasterPortOpt = None,
    console_ranks: ConsoleRanksOpt = None,
    grace_period: GraceOpt = None,
    max_restarts: MaxRestartsOpt = None,
    spares: SparesOpt = None,
    fatal_exit_codes: FatalCodesOpt = None,
    preload: PreloadOpt = None,
    recovery_restarts: RecoveryRestartsOpt = None,
    recovery_wait: RecoveryWaitOpt = None,
    arrival_timeout: ArrivalOpt = None,
    peer_timeout: PeerOpt = None,
    hang_timeout: HangOpt = None,
    preflight: PreflightOpt = None,
    progress_timeout: ProgressTimeoutOpt = None,
    progress_pattern: ProgressPatternOpt = None,
    collapse_window: CollapseOpt = None,
    supervise: SuperviseOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Start this node's part of the job, supervise it, and exit with its status."""
    from marun.launch import run_node
    from marun.log import set_verbose

    set_verbose(verbose)
    settings = _setting_options(locals())
    raise typer.Exit(run_node(command or [], mode.value, config, supervise, settings))


class SimMode(str, Enum):
    ascend = "ascend"
    mindspore = "mindspore"
    pytorch = "pytorch"
    tensorflow = "tensorflow"
    mpi = "mpi"


@app.command(
    context_settings=_CTX,
    epilog=_examples(
        "marun simulate --mode pytorch --nodes 2 --devices 2 -- train.py",
        "marun simulate --mode tensorflow --tf-chief --nodes 2 -- examples/tf_ps.py",
    ),
)
def simulate(
    command: CommandArg = None,
    mode: Annotated[SimMode, typer.Option("--mode", help="the platform engine to simulate")] = (
        SimMode.pytorch
    ),
    nodes: Annotated[int, typer.Option("--nodes", help="nodes (containers) in the job")] = 2,
    devices: Annotated[
        int,
        typer.Option(
            "--devices", "--nproc-per-node", metavar="N", help="devices (processes) per node"
        ),
    ] = 2,
    config: ConfigOpt = None,
    log_dir: LogDirOpt = None,
    tf_chief: TfChiefOpt = None,
    tf_workers_only: TfWorkersOnlyOpt = None,
    console_ranks: ConsoleRanksOpt = None,
    grace_period: GraceOpt = None,
    max_restarts: MaxRestartsOpt = None,
    spares: SparesOpt = None,
    show_plan: Annotated[
        bool,
        typer.Option(
            "--show-plan/--no-show-plan",
            help="print first what the platform injects and what marun makes of it",
        ),
    ] = True,
    full_plan: Annotated[
        bool, typer.Option("--full-plan", help="print the job's whole plan first instead")
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run a whole job on this machine: per node exactly what the platform injects, one
    `marun run` each on 127.0.0.1; exit with the job's status."""
    from marun.log import set_verbose
    from marun.sim.simulate import SimulateRequest, simulate

    set_verbose(verbose)
    request = SimulateRequest(
        command=tuple(command or ()),
        mode=mode.value,
        nodes=nodes,
        devices=devices,
        config=config,
        settings=_setting_options(locals()),
        show_plan=show_plan,
        verbose=verbose,
        full_plan=full_plan,
    )
    raise typer.Exit(simulate(request))


@app.command(
    context_settings=_CTX,
    epilog=_examples(
        "marun doctor",
        "marun doctor --mode mpi --format json",
        "marun doctor --mode pytorch -- train.py --init_method tcp://10.0.0.1:29500",
    ),
)
def doctor(
    command: CommandArg = None,
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
    rank table, ports; with the start command after `--`, this node's plan as `marun run` would
    make it (and its ports). Exit 1 when a check fails."""
    from marun.doctor import doctor_here

    out_fmt = fmt.value if fmt else ("table" if sys.stdout.isatty() else "json")
    text, code = doctor_here(mode.value if mode else None, config, nic, out_fmt, command or [])
    sys.stdout.write(text)
    raise typer.Exit(code)


class ReportFormat(str, Enum):
    text = "text"
    json = "json"


@app.command(
    epilog=_examples(
        "marun report                          (the default log directory: MARUN_LOG_DIR, ...)",
        "marun report /tmp/marun-demo --format json",
        "marun report $MA_LOG_DIR/marun --html report.html",
    ),
)
def report(
    log_dir: Annotated[
        Optional[str],
        typer.Argument(
            metavar="[LOG_DIR]",
            help="where the job's marun wrote its logs (default: MARUN_LOG_DIR, else "
            "$MA_LOG_DIR/marun, else ./marun_logs); searched a few directories down",
        ),
    ] = None,
    fmt: Annotated[
        ReportFormat, typer.Option("--format", help="text (default) or json, for tools")
    ] = ReportFormat.text,
    html_file: Annotated[
        Optional[str],
        typer.Option(
            "--html",
            metavar="FILE",
            help="also write one self-contained page with the job's timeline (nothing fetched)",
        ),
    ] = None,
) -> None:
    """What a finished (or running) job came to, from its job.json, result.json and events:
    outcome and exit code, the first failure, each restart round, per-phase timings and where
    the logs are. Exit 0 when there was something to report, 2 when LOG_DIR holds none of it."""
    import json
    from pathlib import Path

    from marun.report.files import default_log_dir
    from marun.report.render import render_html, render_text
    from marun.report.summary import summarize

    summary = summarize(Path(log_dir) if log_dir else default_log_dir())
    if html_file:
        try:
            Path(html_file).write_text(render_html(summary), encoding="utf-8")
        except OSError as exc:
            from marun.errors import bad_value

            raise bad_value(
                "--html", html_file, f"a file marun can write ({exc.strerror})"
            ) from exc
    if fmt is ReportFormat.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(summary))
        if html_file:
            sys.stdout.write(f"html: {html_file}\n")


def _print_version(value: bool) -> None:
    if value:
        from marun import __version__

        print(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            is_eager=True,
            callback=_print_version,
            help="print marun's version",
        ),
    ] = False,
) -> None:
    """Launch distributed training from what a ModelArts-style platform injects."""


@app.command()
def version() -> None:
    """Print marun's version."""
    from marun import __version__

    print(__version__)


def _one_line(text: str) -> str:
    """A message on one line: line breaks joined; then as every error line (marun.errors:
    control characters escaped, URL passwords masked, the length capped)."""
    from marun.errors import one_line

    return one_line("; ".join(part.strip() for part in text.splitlines() if part.strip()))


@functools.cache
def click_command() -> Any:
    """typer's click command for `app`. typer builds it from every function's signature
    (inspect, type hints): about 29 ms of the 36 ms of a `marun plan` here, so once a process,
    for the option check and the call alike (a caller that forks many `main`s, as the bad-input
    corpus does, builds it once before)."""
    return typer.main.get_command(app)


def main(argv: Optional[list[str]] = None) -> None:
    """The `marun` command. Every refusal is one line on stderr, `marun: error: ...`, with exit
    code 2 for bad input: marun's own checks and the command-line parser's alike (typer would
    draw a five-line box)."""
    words = sys.argv[1:] if argv is None else argv
    command = click_command()
    unknown = unknown_option(command, words)
    if unknown:
        sys.stderr.write(f"marun: error: {unknown}\n")
        sys.exit(2)
    try:
        code = command.main(args=argv, prog_name="marun", standalone_mode=False)
    except MarunError as exc:
        sys.stderr.write(f"marun: error: {exc}\n")
        sys.exit(exc.exit_code)
    except Exception as exc:
        # click's ClickException (typer vendors click from 0.26 on, so match by shape): a usage
        # error such as an unknown command or an option value of the wrong type.
        fmt, exit_code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if not callable(fmt) or not isinstance(exit_code, int):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `marun`: the help, as before
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exit_code)
        sys.stderr.write(f"marun: error: {_one_line(str(fmt()))}\n")
        sys.exit(exit_code)
    sys.exit(code if isinstance(code, int) else 0)

"""The options `marun plan` and `marun run` share (and the choices of `--mode` and `--format`):
one declaration each, so that the two commands cannot drift (tests/unit/test_run_argv.py checks
them against marun.run_argv's typer-free parser); and `unknown_option`, an option a command
does not have, named with the nearest one it has."""

# No `from __future__ import annotations` here: typer reads these annotations at run time, and
# marun runs under Python 3.9, where `str | None` cannot be evaluated.
from enum import Enum
from typing import Annotated, Optional

import typer


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
    Optional[list[str]],
    typer.Argument(
        metavar="[-m MODULE | SCRIPT] [ARGS]...",
        help="a .py file, a command, or -m MODULE (run as python -m)",
    ),
]
ModeOpt = Annotated[
    Mode, typer.Option("--mode", help="launch mode; auto reads the platform's hints")
]
ConfigOpt = Annotated[
    Optional[str],
    typer.Option(
        "--config", metavar="FILE", help="YAML settings file (else $MARUN_CONFIG, ./marun.yaml)"
    ),
]
NprocOpt = Annotated[
    Optional[str],
    typer.Option("--nproc-per-node", metavar="N", help="processes per node (default MA_NUM_GPUS)"),
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
    Optional[str],
    typer.Option("--nic", metavar="NIC", help="network interface to use (default: detected)"),
]
LogDirOpt = Annotated[
    Optional[str], typer.Option("--log-dir", metavar="DIR", help="per-process log directory")
]
TfChiefOpt = Annotated[
    Optional[bool], typer.Option("--tf-chief", help="tensorflow: worker 0 becomes the chief")
]
TfWorkersOnlyOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--tf-workers-only",
        help="tensorflow: TF_CONFIG lists the workers only (MultiWorkerMirroredStrategy); a ps"
        " container runs no task and ends with the job",
    ),
]
FullEnvOpt = Annotated[
    bool,
    typer.Option(
        "--full-env",
        help="table: each process's whole env, node by node (by default what every process"
        " shares is shown once, then a table of what differs); json and yaml always hold it",
    ),
]
# pytorch without the platform, named as torchrun names them (docs/engines/pytorch.md).
StandaloneOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--standalone",
        help="pytorch: a job on this machine alone, no platform (127.0.0.1, a free port), as"
        " torchrun --standalone",
    ),
]
NnodesOpt = Annotated[
    Optional[str],
    typer.Option(
        "--nnodes", metavar="N", help="pytorch without the platform: nodes in the job (torchrun's)"
    ),
]
NodeRankOpt = Annotated[
    Optional[str],
    typer.Option(
        "--node-rank", metavar="I", help="pytorch without the platform: this node's rank, 0-based"
    ),
]
MasterAddrOpt = Annotated[
    Optional[str],
    typer.Option(
        "--master-addr",
        metavar="HOST",
        help="pytorch without the platform: node 0's address (default 127.0.0.1)",
    ),
]
MasterPortOpt = Annotated[
    Optional[str],
    typer.Option(
        "--master-port",
        metavar="PORT",
        help="pytorch without the platform: the rendezvous port on node 0 (default 29500)",
    ),
]
# Supervision options: part of the plan (its `supervision`), so `plan` shows and checks them exactly
# as `run` does, and a `run` command line turns into its dry-run by changing one word.
ConsoleRanksOpt = Annotated[
    Optional[str],
    typer.Option(
        "--console-ranks",
        metavar="RANKS",
        help="whose output reaches marun's stdout: all (default), none, or e.g. 0,3-5,scheduler;"
        " log files always get everything",
    ),
]
GraceOpt = Annotated[
    Optional[str],
    typer.Option(
        "--grace-period",
        metavar="SECONDS",
        help="seconds between SIGTERM and SIGKILL (default 30)",
    ),
]
MaxRestartsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--max-restarts",
        metavar="N",
        help="restart rounds for the whole job: on a failure anywhere every node stops its"
        " ranks and starts them again, up to N times (default 0: the first failure ends the job)",
    ),
]
SparesOpt = Annotated[
    Optional[str],
    typer.Option(
        "--spares",
        metavar="K",
        help="hot spares: of the platform's nodes the last K start nothing and wait; a lost"
        " node's place goes to one in the next restart round (needs --max-restarts; pytorch mode)",
    ),
]
FatalCodesOpt = Annotated[
    Optional[str],
    typer.Option(
        "--fatal-exit-codes",
        metavar="CODES",
        help="exit codes (e.g. 3,4) that end the job without a restart round",
    ),
]
PreloadOpt = Annotated[
    Optional[str],
    typer.Option(
        "--preload",
        metavar="MOD[,MOD...]",
        help="with --max-restarts: a spare interpreter per rank imports these modules (e.g."
        " torch) and waits; a restart round's rank starts in it, without the imports (its"
        " memory stays taken while it waits; docs/warm-restarts.md)",
    ),
]
RecoveryRestartsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--recovery-restarts",
        metavar="N",
        help="MindSpore recovery (MS_ENABLE_RECOVERY=1): restarts per process (default 3)",
    ),
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        help="marun's own events (process_started, stopping, ...) on the console too; they"
        " always go to <log dir>/marun-events.log",
    ),
]
SuperviseOpt = Annotated[
    bool, typer.Option("--supervise", help="supervise even a single process, not exec it")
]
RecoveryWaitOpt = Annotated[
    Optional[str],
    typer.Option(
        "--recovery-wait",
        metavar="SECONDS",
        help="MindSpore recovery: seconds before a restart (default 30, the scheduler's window)",
    ),
]
ArrivalOpt = Annotated[
    Optional[str],
    typer.Option(
        "--arrival-timeout",
        metavar="SECONDS",
        help="multi-node: seconds node 0 waits for every node to report (default 300)",
    ),
]
PeerOpt = Annotated[
    Optional[str],
    typer.Option(
        "--peer-timeout",
        metavar="SECONDS",
        help="multi-node: seconds of silence after which a node counts as lost (default 60)",
    ),
]
HangOpt = Annotated[
    Optional[str],
    typer.Option(
        "--hang-timeout",
        metavar="SECONDS",
        help="multi-node: seconds without a line from any rank before the job is dumped and "
        "stopped (default off; stacks need marun[hang])",
    ),
]
CollapseOpt = Annotated[
    Optional[str],
    typer.Option(
        "--collapse-window",
        metavar="SECONDS",
        help="a console line several of a node's ranks print within SECONDS is shown once,"
        " naming them ([0:0-7] ...); 0 turns it off (default 0.5, where a node shows more"
        " than two ranks); log files keep every line",
    ),
]
ProgressPatternOpt = Annotated[
    Optional[str],
    typer.Option(
        "--progress-pattern",
        metavar="REGEX",
        help="the step counter in a rank's output, if not one marun knows (tqdm, Trainer,"
        " Lightning, Keras, MindSpore, step N): a group named step (and total), or a first"
        " (and second) group",
    ),
]
ProgressTimeoutOpt = Annotated[
    Optional[str],
    typer.Option(
        "--progress-timeout",
        metavar="SECONDS",
        help="multi-node: seconds without a step while the ranks keep printing before the"
        " job is judged hung, as --hang-timeout (default off)",
    ),
]

PreflightOpt = Annotated[
    Optional[str],
    typer.Option(
        "--preflight",
        metavar="on|off|warn|strict",
        help="multi-node: the checks at the arrival barrier (devices, /dev/shm, disk, address,"
        " interfaces, ports, clock, the links between the nodes): on (default) refuses the start"
        " on an unreachable link or missing devices and warns on the rest; warn only warns;"
        " strict refuses on any warning; off skips them",
    ),
]


def unknown_option(group: object, words: "list[str]") -> Optional[str]:
    """An option the command does not have, before its script (`marun plan --nproc 2 -- x.py`):
    the message, with the nearest option, instead of the option being taken for the script.
    Options end at `--` or at the first word that is not an option or an option's value.
    `group` is the click group typer built from the app (marun.command.cli.main builds it once)."""
    import difflib

    name = words[0] if words else ""
    command = getattr(group, "commands", {}).get(name)
    if command is None:
        return None
    takes_value: dict[str, bool] = {}
    for param in command.params:
        if param.param_type_name == "option":  # typer vendors click: matched by shape
            for opt in (*param.opts, *param.secondary_opts):
                takes_value[opt] = not getattr(param, "is_flag", False)
    takes_value["--help"] = takes_value["-h"] = False
    i = 1
    while i < len(words):
        word = words[i]
        if word in ("--", "-", "-m") or not word.startswith("-"):
            return None  # `-m MODULE`: the command starts there, as python's
        option, eq, _ = word.partition("=")
        if option not in takes_value:
            known = sorted(takes_value)
            near = [o for o in known if o.startswith(option)] or difflib.get_close_matches(
                option, known, n=1, cutoff=0.6
            )
            hint = f" (did you mean {near[0]}?)" if near else ""
            return f"unknown option {option} for `marun {name}`{hint}; see `marun {name} --help`"
        i += 2 if takes_value[option] and not eq else 1
    return None

"""`marun run`'s options, and a small parser for them that needs no typer.

`marun run` sits in front of every training process, and importing typer (click, rich's
detection, inspect) costs more than everything else marun does before the exec. So a
well-formed `marun run` command line is parsed here; anything this parser is not sure of
(`--help`, an unknown option, a value that does not convert, a missing value) returns None and
the typer CLI parses it, so its messages stay exactly as they are. `RUN_OPTIONS` is the table
both follow: tests/unit/test_run_argv.py checks it against the typer command's parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from typing import Any

# option -> (parameter name, kind). Kinds: "str" (numbers too: the settings parser checks them,
# on both paths), "mode" (a value), "flag"
# (True when given), "bool" (the on/off pair: the second table says which word means False).
RUN_OPTIONS: dict[str, tuple[str, str]] = {
    "--mode": ("mode", "mode"),
    "--config": ("config", "str"),
    "--nproc-per-node": ("nproc_per_node", "str"),
    "--per-node": ("per_node", "bool"),
    "--per-device": ("per_node", "bool"),
    "--keep-platform-args": ("keep_platform_args", "flag"),
    "--nic": ("nic", "str"),
    "--log-dir": ("log_dir", "str"),
    "--tf-chief": ("tf_chief", "flag"),
    "--tf-workers-only": ("tf_workers_only", "flag"),
    "--standalone": ("standalone", "flag"),
    "--nnodes": ("nnodes", "str"),
    "--node-rank": ("node_rank", "str"),
    "--master-addr": ("master_addr", "str"),
    "--master-port": ("master_port", "str"),
    "--console-ranks": ("console_ranks", "str"),
    "--grace-period": ("grace_period", "str"),
    "--max-restarts": ("max_restarts", "str"),
    "--spares": ("spares", "str"),
    "--fatal-exit-codes": ("fatal_exit_codes", "str"),
    "--preload": ("preload", "str"),
    "--recovery-restarts": ("recovery_restarts", "str"),
    "--recovery-wait": ("recovery_wait", "str"),
    "--arrival-timeout": ("arrival_timeout", "str"),
    "--peer-timeout": ("peer_timeout", "str"),
    "--hang-timeout": ("hang_timeout", "str"),
    "--preflight": ("preflight", "str"),
    "--progress-timeout": ("progress_timeout", "str"),
    "--progress-pattern": ("progress_pattern", "str"),
    "--collapse-window": ("collapse_window", "str"),
    "--supervise": ("supervise", "flag"),
    "--verbose": ("verbose", "flag"),
}
# The options of `plan` and `run` that are settings (inputs.settings.Settings fields of the same
# name); the others choose what to run.
SETTING_OPTIONS = (
    "nproc_per_node",
    "per_node",
    "keep_platform_args",
    "nic",
    "log_dir",
    "tf_chief",
    "tf_workers_only",
    "standalone",
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "console_ranks",
    "grace_period",
    "max_restarts",
    "spares",
    "fatal_exit_codes",
    "preload",
    "recovery_restarts",
    "recovery_wait",
    "arrival_timeout",
    "peer_timeout",
    "hang_timeout",
    "preflight",
    "progress_timeout",
    "progress_pattern",
    "collapse_window",
)
FALSE_WORDS = frozenset({"--per-device"})
MODE_VALUES = ("auto", "ascend", "mindspore", "pytorch", "tensorflow", "mpi")


class RunArgs:
    """What the hand parser read (a plain class: a dataclass costs the path to exec its import)."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.mode = "auto"
        self.config: str | None = None
        self.supervise = False
        self.verbose = False
        self.settings: dict[str, Any] = {}  # the Settings options, None: not given


def _convert(kind: str, text: str) -> Any:
    """The value as typer would have it, or ValueError where typer would refuse it."""
    if kind == "mode":
        if text not in MODE_VALUES:
            raise ValueError(text)
        return text
    return text


def parse_run(argv: Sequence[str]) -> RunArgs | None:
    """`argv` after the word `run`, parsed as click would (options until the first other word
    or `--`; the rest verbatim, a later `--` included), or None to let typer parse it."""
    values: dict[str, Any] = {}
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word in ("-", "-m"):
            break  # `-m MODULE`: the command starts there, as python's
        name, eq, inline = word.partition("=")
        entry = RUN_OPTIONS.get(name)
        if entry is None:
            return None  # --help, -h, an unknown or abbreviated option: typer's to answer
        dest, kind = entry
        if kind in ("flag", "bool"):
            if eq:
                return None
            values[dest] = name not in FALSE_WORDS
            i += 1
            continue
        if eq:
            text = inline
            i += 1
        else:
            if i + 1 >= len(words):
                return None
            text = words[i + 1]
            i += 2
        try:
            values[dest] = _convert(kind, text)
        except ValueError:
            return None
    parsed = RunArgs(command=words[i:])
    parsed.mode = values.pop("mode", "auto")
    parsed.config = values.pop("config", None)
    parsed.supervise = bool(values.pop("supervise", False))
    parsed.verbose = bool(values.pop("verbose", False))
    parsed.settings = {name: values.get(name) for name in SETTING_OPTIONS}
    return parsed

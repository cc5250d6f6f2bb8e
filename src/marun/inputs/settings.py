"""Settings: built-in defaults < YAML file < environment (MARUN_<KEY>) < command line.

The file is `--config FILE`, else `$MARUN_CONFIG`, else `marun.yaml` in the working directory.
Every key is listed in `FIELDS`; an unknown key, or a value of the wrong type, is bad input.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

from marun.errors import InputError, bad_value
from marun.inputs.numbers import (
    MAX_NODES,
    MAX_PROCS_PER_NODE,
    MAX_SECONDS,
    PORT_MAX,
    parse_int,
    parse_seconds,
)
from marun.inputs.records import dataclass, field, fields, replace
from marun.inputs.textfile import nested_too_deeply, parse_guarded, read_input_text

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from typing import Any

# The ECDHE AES-GCM suites of MindSpore's documented example: MindSpore 2.10 refuses its DHE-RSA
# ones ("The cipher is wrong" from init()), so they are left out.
MS_CIPHER_LIST = (
    "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES128-GCM-SHA256:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES256-GCM-SHA384"
)


# `preflight`'s values (marun.preflight.decide): on (the default) refuses the start on an
# unreachable link or missing devices and warns on the rest; warn only warns; strict refuses on
# any warning; off runs no preflight.
PREFLIGHT_POLICIES = ("on", "off", "warn", "strict")
# A setting that takes one of a few words: its words.
CHOICES: Mapping[str, tuple[str, ...]] = {"preflight": PREFLIGHT_POLICIES}

# MPI's sshd port when neither sshd_port nor the platform's MY_SSHD_PORT names one.
DEFAULT_SSHD_PORT = 36666


@dataclass(frozen=True)
class Settings:
    # network
    nic: str | None = None  # interface name; default: the one holding this node's address
    # process layout
    nproc_per_node: int | None = None  # default: MA_NUM_GPUS, else 1
    per_node: bool = False  # ascend: the start file runs once per node, not once per device
    keep_platform_args: bool = False  # pass the platform's appended arguments to the script
    tf_chief: bool = False  # tensorflow: worker 0 becomes TF_CONFIG's "chief"
    # tensorflow: TF_CONFIG lists the workers only (MultiWorkerMirroredStrategy); a ps container
    # runs no task, waits and ends with the job
    tf_workers_only: bool = False
    # pytorch without the platform, as torchrun's options: --standalone (this machine alone), or
    # --nnodes/--node-rank/--master-addr/--master-port in place of the appended --init_method
    standalone: bool = False
    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    # MindSpore dynamic cluster
    ms_sched_port: int = 8118  # msrun's default master_port
    ms_topo_timeout: int = 600  # seconds all processes have to join (msrun's cluster_time_out)
    ms_server_num: int = 0  # parameter servers (MS_PSERVER) on node 0; 0: none
    # MindSpore secure channel (TLS; plan/modes/mindspore_tls.py). Passwords: env or file only.
    ms_ssl: bool = False
    ms_server_cert: str | None = None  # p12: server certificate and key
    ms_client_cert: str | None = None  # p12: client certificate and key
    ms_ca_cert: str | None = None  # PEM: the root certificate
    ms_crl: str | None = None  # certificate revocation list; default: none
    ms_cipher_list: str = MS_CIPHER_LIST
    ms_cert_expire_warning_days: int = 90
    ms_client_password_file: str | None = None  # else $MARUN_MS_CLIENT_PASSWORD
    ms_server_password_file: str | None = None  # else $MARUN_MS_SERVER_PASSWORD
    # Ascend rank table
    ranktable_timeout: float = 600.0  # seconds to wait for status "completed"
    # host names
    resolve_timeout: float = 300.0  # seconds to wait for a peer's name to resolve
    volcano_dir: str = "/etc/volcano"
    # MPI
    sshd_port: int | None = None  # None: MY_SSHD_PORT (run_mpi.sh's), else DEFAULT_SSHD_PORT
    ssh_dir: str | None = None  # where the platform mounts id_rsa/authorized_keys; default ~/.ssh
    mpirun_extra_args: tuple[str, ...] = ()
    # `*`: every variable of node 0's container but per-node, session and MPI's own (mpi/planner)
    mpi_forward_env: tuple[str, ...] = ("*",)
    # each rank's output also in a file of its own (mpirun --output-filename <log_dir>/ranks), as
    # the platform's MPI documents keep it; marun's mpirun.log (tagged) is written either way
    mpi_rank_files: bool = False
    formation_timeout: float = 600.0  # seconds node 0 waits for every peer's sshd to let it in
    peer_timeout: float = 60.0  # seconds without a heartbeat before a node (node 0 too) is lost
    # the job's coordination (every multi-node mode): see docs/supervision.md
    job_port: int = 36668  # node 0's coordination port; 0: no coordination
    arrival_timeout: float = 300.0  # seconds node 0 waits for every node to report
    hang_timeout: float | None = None  # seconds without a line from any rank: a hang; off if None
    preflight: str = "on"  # the checks at the arrival barrier: on, off, warn, strict
    # seconds without a step while ranks print: a hang (the steps read from their output)
    progress_timeout: float | None = None
    # supervision and files
    log_dir: str | None = None  # default: $MA_LOG_DIR/marun if set, else ./marun_logs
    run_dir: str | None = None  # default: $TMPDIR/marun-<uid>
    grace_period: float = 30.0
    # restart rounds (docs/supervision.md, "Restart rounds"): the job's budget of rounds in which
    # every node stops its ranks and starts them again; 0: the first failure ends the job
    max_restarts: int = 0
    fatal_exit_codes: tuple[str, ...] = ()  # exit codes that end the job without a round
    quick_failure: float = 30.0  # a failure this soon after its round's start, twice: the end
    # hot spares (docs/supervision.md, "Hot spares"): of the platform's N+K nodes, the last K
    # start nothing and wait; a lost node's place goes to one in the next restart round
    spares: int = 0
    # liveness hubs (docs/supervision.md, "Liveness through hubs"): nodes per group whose
    # heartbeats go through the group's first node; None: 64 in a job of more than 1,024 nodes
    # (else none); 0: none
    hub_group: int | None = None
    # MindSpore process-level recovery (MS_ENABLE_RECOVERY=1): restarts per process
    # warm restarts (docs/warm-restarts.md): modules a spare interpreter per rank imports while
    # it waits to become the rank of the next restart round; empty: off
    preload: tuple[str, ...] = ()
    recovery_restarts: int = 3
    recovery_wait: float = 30.0
    console_ranks: tuple[str, ...] = ()  # ranks/names shown on marun's stdout; empty: all
    # seconds a console line waits for the same line of the node's other ranks (shown once,
    # naming them); 0: off. On only where a node shows more than two ranks.
    collapse_window: float = 0.5
    progress_pattern: str | None = None  # a regex with the step's group: the ranks' progress


FIELDS: Mapping[str, Any] = {f.name: f for f in fields(Settings)}
# The range of each integer setting; every float setting is a finite number of seconds >= 0.
INT_RANGES: Mapping[str, tuple[int, int]] = {
    "nproc_per_node": (1, MAX_PROCS_PER_NODE),
    "nnodes": (1, MAX_NODES),
    "node_rank": (0, MAX_NODES - 1),
    "master_port": (1, PORT_MAX),
    "ms_sched_port": (1024, PORT_MAX),  # MindSpore's range for MS_SCHED_PORT
    "ms_topo_timeout": (1, int(MAX_SECONDS)),  # seconds, as every time-out: up to a year
    "sshd_port": (1, PORT_MAX),
    "max_restarts": (0, 1_000_000),
    "spares": (0, MAX_NODES - 1),
    "hub_group": (0, MAX_NODES),
    "recovery_restarts": (0, 1_000_000),
    "ms_server_num": (0, 1024),
    "ms_cert_expire_warning_days": (0, 36_500),
    "job_port": (0, PORT_MAX),  # 0: no coordination
}
# A settings file is a few dozen lines; 64 KiB holds thousands of names in mpi_forward_env.
# Bounded before it is parsed: PyYAML's pure-Python parser takes about a second per 10,000 nodes,
# so a 6 MB list of numbers would hold `plan` and `run` for minutes before its type is refused.
MAX_CONFIG_BYTES = 64 * 1024
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _type_name(name: str) -> str:
    return str(FIELDS[name].type)


def _coerce(name: str, value: Any, where: str) -> Any:
    """Turn a value from YAML (typed) or the environment/CLI (a string) into the field's type.

    `where` names the value for the error message (`MARUN_SSHD_PORT`, `--sshd-port`, ...).
    """
    kind = _type_name(name)
    if value is None and "None" in kind:
        return None
    try:
        if kind.startswith("bool"):
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError
        if kind.startswith("int"):
            low, high = INT_RANGES[name]
            return parse_int(where, value, low, high)
        if kind.startswith("float"):
            return parse_seconds(where, value)
        if kind.startswith("tuple"):
            if isinstance(value, (list, tuple)):
                # Words only: a nested list (YAML aliases can nest one exponentially) is no word.
                if not all(isinstance(v, (str, int, float)) for v in value):
                    raise ValueError
                return tuple(str(v) for v in value)
            text = str(value)
            if name == "mpirun_extra_args":
                return tuple(shlex.split(text))
            return tuple(v.strip() for v in text.split(",") if v.strip())
        if kind.startswith("str"):
            if isinstance(value, (dict, list)):
                raise ValueError
            if name in CHOICES:
                word = str(value).strip().lower()
                if word not in CHOICES[name]:
                    raise bad_value(where, value, "one of " + ", ".join(CHOICES[name]))
                return word
            return str(value)
    except ValueError:
        pass
    raise bad_value(where, value, f"a value of type {kind}")


def find_config_file(explicit: str | None, env: Mapping[str, str], cwd: str) -> str | None:
    # Paths as strings, not pathlib's: pathlib (with urllib.parse, ipaddress) is 10 ms of
    # imports on the path to exec.
    if explicit:
        return explicit
    if env.get("MARUN_CONFIG"):
        return env["MARUN_CONFIG"]
    default = os.path.join(cwd, "marun.yaml")
    return default if os.path.isfile(default) else None


def _read_file(path: str) -> dict[str, Any]:
    import yaml  # lazy: only when a config file exists

    text = read_input_text(path, "config file", "a YAML file of settings", limit=MAX_CONFIG_BYTES)
    # libyaml's loader where the wheel ships it (PyPI's x86_64 and aarch64 wheels do): the pure
    # Python scanner is quadratic in flow nesting, 1.9 CPU-s to refuse a 10 kB `[[[[...]]]]`,
    # where libyaml stops at its nesting limit in milliseconds. Same resolver, same values.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = parse_guarded(lambda t: yaml.load(t, Loader=loader), text, f"config file {path}")
    except yaml.YAMLError as exc:
        if "nesting depth" in str(getattr(exc, "problem", "")):  # libyaml's limit (1,000 deep)
            raise nested_too_deeply(f"config file {path}") from None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"config file {path}: not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"config file {path}: expected a mapping of settings at the top level")
    unknown = sorted(str(k) for k in data if k not in FIELDS)
    if unknown:
        raise InputError(
            f"config file {path}: unknown key {unknown[0]!r}; expected one of "
            + ", ".join(sorted(FIELDS))
        )
    return {k: _coerce(k, v, f"config file {path}: {k}") for k, v in data.items()}


def _refuse_near_miss(env: Mapping[str, str]) -> None:
    """A `MARUN_*` variable a letter or two from one of marun's, that one unset, is bad input,
    as the same typo of a key in marun.yaml is (its value is not shown: it may be a password)."""
    from marun.inputs.variables import MARUN_OTHER_VARS, marun_near_miss

    known = (*("MARUN_" + name.upper() for name in FIELDS), *MARUN_OTHER_VARS)
    miss = marun_near_miss(env, known)
    if miss is not None:
        raise InputError(
            f"{miss[0]}: not a variable marun reads; expected {miss[1]} (unset, a letter or two "
            "away), as a config key is checked"
        )


@dataclass(frozen=True)
class LoadedSettings:
    settings: Settings
    file: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)  # key -> "file" | "env" | "cli"


def load_settings(
    cli: Mapping[str, Any], env: Mapping[str, str], cwd: str, config_file: str | None = None
) -> LoadedSettings:
    """Merge the four layers. `cli` holds only the options the user actually gave."""
    _refuse_near_miss(env)
    path = find_config_file(config_file, env, cwd)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if path is not None:
        for k, v in _read_file(path).items():
            values[k], sources[k] = v, "file"
    for name in FIELDS:
        var = "MARUN_" + name.upper()
        if var in env:
            values[name], sources[name] = _coerce(name, env[var], var), "env"
    for name, v in cli.items():
        if v is not None:
            values[name], sources[name] = _coerce(name, v, "--" + name.replace("_", "-")), "cli"
    return LoadedSettings(replace(Settings(), **values), path, sources)

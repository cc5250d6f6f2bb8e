"""`marun doctor`: preflight inside an image or on a node.

Each check reports ok, warn, fail or skip with one line of detail; `marun doctor` exits 1 when any
check fails. Checks read metadata and files only: no framework is imported (importing torch or
mindspore takes seconds) and nothing is started.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata, util
from pathlib import Path

from marun.errors import InputError
from marun.inputs.injected import Platform
from marun.inputs.numbers import is_digits

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"

# (distribution names, import name) per dependency; the first installed distribution counts.
DEPENDENCIES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("typer", "typer-slim"), "typer"),
    (("netifaces-plus", "netifaces"), "netifaces"),
    (("PyYAML",), "yaml"),
    (("tenacity",), "tenacity"),
    (("structlog",), "structlog"),
)
# What each mode needs to find importable; any one of the alternatives will do.
FRAMEWORKS: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "ascend": ((("mindspore",), "mindspore"), (("torch_npu", "torch-npu"), "torch_npu")),
    "mindspore": ((("mindspore",), "mindspore"),),
    "pytorch": ((("torch",), "torch"),),
    "tensorflow": ((("tensorflow", "tensorflow-cpu", "tensorflow-gpu"), "tensorflow"),),
    "mpi": ((("mpi4py",), "mpi4py"), (("horovod",), "horovod")),
}


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


def _version(dists: Iterable[str]) -> str | None:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_python() -> Check:
    ver = ".".join(str(v) for v in sys.version_info[:3])
    status = OK if sys.version_info >= (3, 9) else FAIL
    return Check("python", status, f"{ver} at {sys.executable} (marun needs >= 3.9)")


def check_dependencies() -> list[Check]:
    from marun import __version__

    checks = [Check("marun", OK, __version__)]
    for dists, module in DEPENDENCIES:
        version = _version(dists)
        if version is None or util.find_spec(module) is None:
            checks.append(Check(dists[0], FAIL, f"not importable as {module!r}: pip install marun"))
        else:
            checks.append(Check(dists[0], OK, version))
    return checks


def check_framework(mode: str | None) -> list[Check]:
    wanted = FRAMEWORKS.get(mode or "", ())
    if not wanted:
        found = []
        for alternatives in FRAMEWORKS.values():
            for dists, module in alternatives:
                version = _version(dists)
                if version is not None and util.find_spec(module) is not None:
                    found.append(f"{module} {version}")
        detail = ", ".join(sorted(set(found))) or "none found"
        return [
            Check("frameworks", OK if found else SKIP, detail + " (give --mode to require one)")
        ]
    present = []
    for dists, module in wanted:
        version = _version(dists)
        if version is not None and util.find_spec(module) is not None:
            present.append(f"{module} {version}")
    if present:
        return [Check(f"framework ({mode})", OK, ", ".join(present))]
    names = " or ".join(module for _, module in wanted)
    return [Check(f"framework ({mode})", FAIL, f"{names} not importable by {sys.executable}")]


def _first_line(argv: Sequence[str]) -> str | None:
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=10, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        if line.strip():
            return line.strip()
    return None


def check_mpi_tools(platform: Platform, required: bool) -> list[Check]:
    from marun._files import find_executable
    from marun.mpi.planner import find_sshd

    missing = FAIL if required else SKIP
    checks = []
    mpirun = find_executable("mpirun", (), platform.env.get("PATH"))
    if mpirun:
        line = _first_line([mpirun, "--version"]) or "version unknown"
        checks.append(Check("mpirun", OK, f"{line} ({mpirun})"))
    else:
        checks.append(Check("mpirun", missing, "not on PATH: apt-get install openmpi-bin"))
    sshd = find_sshd(platform.env.get("PATH"))
    if sshd:
        # sshd has no --version; -V (OpenSSH >= 9.3) or the usage text names the version.
        line = _first_line([sshd, "-V"]) or "version unknown"
        checks.append(Check("sshd", OK, f"{line} ({sshd})"))
    else:
        checks.append(Check("sshd", missing, "not found: apt-get install openssh-server"))
    return checks


def _mode_problem(path: Path, uid: int, private: bool) -> str | None:
    from marun.mpi.ssh_keys import key_mode_problem

    problem = key_mode_problem(path.stat(), uid, private)
    return f"{path}: {problem}" if problem else None


def check_ssh_keys(platform: Platform, required: bool) -> list[Check]:
    """The classic "bad ownership or modes" failures (kubeflow/mpi-operator #424, Volcano
    #1606) before sshd or ssh trip over them mid-job."""
    from marun.inputs.injected import SSH_KEY
    from marun.mpi.run_dir import AUTHORIZED_KEYS

    ssh_dir = Path(platform.ssh_dir())
    if not ssh_dir.is_dir():
        status = WARN if required else SKIP
        detail = (
            f"{ssh_dir} does not exist: a single-node job generates a key; several nodes need "
            "the platform's"
        )
        return [Check("ssh keys", status, detail)]
    checks = []
    problem = _mode_problem(ssh_dir, platform.uid, private=False)
    checks.append(
        Check(f"ssh dir {ssh_dir}", FAIL if problem else OK, problem or "owner and mode ok")
    )
    for name, private in ((SSH_KEY, True), (AUTHORIZED_KEYS, False)):
        path = ssh_dir / name
        if not path.exists():
            status = WARN if required and platform.num_hosts() > 1 else SKIP
            checks.append(Check(f"ssh {name}", status, f"{path} missing"))
            continue
        problem = _mode_problem(path, platform.uid, private)
        checks.append(Check(f"ssh {name}", FAIL if problem else OK, problem or "owner and mode ok"))
    return checks


def check_network(platform: Platform) -> list[Check]:
    from marun.inputs.nic import choose_nic, ipv4_by_interface

    table = ipv4_by_interface()
    listing = ", ".join(f"{name} {' '.join(addrs)}" for name, addrs in sorted(table.items()))
    checks = [
        Check("interfaces", OK if table else FAIL, listing or "no interface has an IPv4 address")
    ]
    try:
        nic = choose_nic(platform.settings.nic, [platform.env.get("MA_CURRENT_IP", "")])
    except InputError as exc:
        checks.append(Check("nic", FAIL, str(exc)))
    else:
        checks.append(
            Check("nic", OK, f"{nic.name} {nic.address} (set nic/MARUN_NIC to choose another)")
        )
    return checks


def check_node(platform: Platform, mode: str | None) -> list[Check]:
    """The preflight's per-node checks (devices, /dev/shm, free space, this node's address and
    name, the `*_SOCKET_IFNAME` interfaces), as a job's arrival barrier runs them."""
    from marun.preflight.checks import run_node_checks
    from marun.preflight.needs import needs_of_platform

    return [
        Check(r.name, r.status, r.message)
        for r in run_node_checks(needs_of_platform(platform, mode))
    ]


# What a host name other than the platform's breaks, per mode (none: any mode may be chosen).
_HOSTNAME_BREAKS = {
    "ascend": "MindSpore's device numbering",
    "mindspore": "MindSpore's device numbering",
    "mpi": "Open MPI's shared memory",
    None: "MindSpore's device numbering and Open MPI's shared memory",
}


def check_hostname(platform: Platform, mode: str | None = None) -> Check:
    name = platform.hostname
    if name in ("", "localhost"):
        return Check("host name", FAIL, f"{name!r}: every node needs its own host name")
    try:
        hosts = platform.num_hosts()
        if hosts > 1:
            from marun.inputs.hosts import node_hosts

            expected = node_hosts(platform)[platform.node_index()].split(".")[0]
            if expected != name.split(".")[0]:
                breaks = _HOSTNAME_BREAKS.get(mode)
                if breaks is None:  # pytorch, tensorflow: nothing of theirs reads it
                    return Check(
                        "host name",
                        OK,
                        f"{name!r} (the platform names this node {expected!r}; {mode} mode does "
                        "not depend on it)",
                    )
                return Check(
                    "host name",
                    WARN,
                    f"{name!r}, but the platform names this node {expected!r}: nodes that share a "
                    f"host name break {breaks}",
                )
    except InputError as exc:
        return Check("host name", WARN, f"{name!r}; node variables unusable: {exc}")
    return Check("host name", OK, name)


def check_variables(platform: Platform) -> list[Check]:
    """The platform variables marun reads, as set here (secrets masked), and a warning for each
    set variable that looks like a typo of one of them (`MA_NUM_GPU`, no S)."""
    from marun.inputs.variables import PLATFORM_VARS, platform_near_misses
    from marun.redact import mask_env

    given = mask_env({name: platform.env[name] for name in PLATFORM_VARS if name in platform.env})
    detail = ", ".join(f"{name}={value}" for name, value in given.items())
    checks = [Check("platform variables", OK if given else SKIP, detail or "none set")]
    for name, meant in platform_near_misses(platform.env):
        checks.append(
            Check(
                f"variable {name}",
                WARN,
                f"set, but {meant}, which marun reads, is not: a typo of {meant}?",
            )
        )
    return checks


def check_rank_table(platform: Platform) -> Check:
    path = platform.env.get("RANK_TABLE_FILE")
    if not path:
        return Check("rank table", SKIP, "RANK_TABLE_FILE not set")
    from marun.inputs.ranktable import RankTableNotReady, parse_rank_table

    try:
        text = Path(path).read_text()
    except OSError as exc:
        return Check("rank table", FAIL, f"{path}: cannot read it ({exc.strerror})")
    try:
        table = parse_rank_table(text, path)
    except RankTableNotReady as exc:
        return Check("rank table", WARN, str(exc))
    except InputError as exc:
        return Check("rank table", FAIL, str(exc))
    return Check(
        "rank table",
        OK,
        f"{path}: {table.format}, {len(table.servers)} server(s), {table.rank_size} rank(s)",
    )


def _ports(platform: Platform, mode: str | None) -> list[tuple[str, int]]:
    s = platform.settings
    ports: list[tuple[str, int]] = []
    if mode == "mpi":
        from marun.mpi.setup import sshd_port

        with contextlib.suppress(InputError):  # the plan's check (doctor -- SCRIPT) names it
            ports.append(("sshd_port", sshd_port(platform)))
    try:  # MA_NUM_HOSTS, else Volcano's VC_<TASK>_NUM; a bad one is the node check's to say
        several = platform.num_hosts() > 1
    except InputError:
        several = platform.env.get("MA_NUM_HOSTS", "1") != "1"
    if mode is not None and several and s.job_port:
        # Node 0's marun listens there for the job's other nodes (docs/supervision.md).
        ports.append(("job_port", s.job_port))
    if mode == "mindspore":
        port = platform.env.get("MS_SCHED_PORT", str(s.ms_sched_port))
        if is_digits(port) and len(port) <= 5:
            ports.append(("MS_SCHED_PORT", int(port)))
    return ports


def check_ports_free(platform: Platform, mode: str | None) -> list[Check]:
    """Whether each port this node's plan listens on is free now (a report; `marun run` refuses
    a taken one: runtime.execute.refuse_taken_ports, through the same inputs.port_probe)."""
    return _port_checks(_ports(platform, mode))


def _port_checks(ports: Sequence[tuple[str, int]]) -> list[Check]:
    from marun.inputs.port_probe import bind_error

    checks = []
    for name, port in ports:
        exc = bind_error(port)  # as `marun run` checks it before anything starts
        if exc is not None:
            checks.append(
                Check(f"port {port}", FAIL, f"{name}={port} cannot be bound: {exc.strerror}")
            )
        else:
            checks.append(Check(f"port {port}", OK, f"{name}={port} is free"))
    return checks


def check_job_secret(platform: Platform, mode: str | None) -> list[Check]:
    """A multi-node job's coordination without a secret: anyone on the job's hosts can forge
    a failure that stops the job (docs/supervision.md, "Trust")."""
    from marun.plan.coordination import NO_SECRET_NOTE, TOKEN_VAR

    try:
        nodes = platform.num_hosts()
    except InputError:
        return []
    if nodes <= 1 or mode == "mpi":
        return []
    if platform.env.get(TOKEN_VAR):
        return [Check("job secret", OK, f"{TOKEN_VAR} (its value is not shown)")]
    key = platform.ssh_key()
    if os.path.isfile(key):
        return [Check("job secret", OK, f"Volcano's ssh key {key}")]
    return [Check("job secret", WARN, NO_SECRET_NOTE.removeprefix("WARNING: "))]


def check_plan(platform: Platform, mode: str | None) -> list[Check]:
    """With the start command (`marun doctor -- SCRIPT [ARGS...]`): this node's plan, built as
    `marun plan` builds it (a dry run, through marun.launch), so doctor cannot disagree with
    `marun run`: what it refuses, and every port its processes and the job's coordination will
    listen on, checked as `marun run` checks them before anything starts."""
    from marun.inputs.records import replace
    from marun.launch import build_plan

    try:
        plan = build_plan(mode or "auto", replace(platform, dry_run=True))
    except InputError as exc:
        return [Check("plan", FAIL, str(exc))]
    count = sum(len(n.processes) for n in plan.nodes)
    checks = [Check("plan", OK, f"{plan.mode}: {count} process(es) on this node")]
    ports = [(p.name, port) for n in plan.nodes for p in n.processes for port in p.listens]
    coord = plan.coordination
    if coord is not None and coord.index == coord.leader and coord.slot == 0:
        ports.append(("job_port", coord.port))  # node 0's marun listens for the others
    return checks + _port_checks(ports)


def run_checks(platform: Platform, mode: str | None, command: Sequence[str] = ()) -> list[Check]:
    checks = [check_python(), *check_dependencies(), *check_framework(mode)]
    checks += check_mpi_tools(platform, required=mode == "mpi")
    checks += check_ssh_keys(platform, required=mode == "mpi")
    checks += check_network(platform)
    checks += check_node(platform, mode)
    checks.append(check_hostname(platform, mode))
    checks += check_variables(platform)
    checks.append(check_rank_table(platform))
    if command:
        checks += check_plan(platform, mode)
    else:
        checks += check_ports_free(platform, mode)
    checks += check_job_secret(platform, mode)
    return checks


def render_checks(checks: Sequence[Check], fmt: str) -> str:
    failed = any(c.status == FAIL for c in checks)
    if fmt == "json":
        return (
            json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=2) + "\n"
        )
    width = max(len(c.name) for c in checks)
    lines = [f"{c.status.upper():<4}  {c.name:<{width}}  {c.detail}" for c in checks]
    lines.append("")
    warned = sum(c.status == WARN for c in checks)
    end = "FAILED" if failed else "all checks passed"
    if warned and not failed:
        end += f", {warned} warning{'s' if warned > 1 else ''} above"
    lines.append("doctor: " + end)
    return "\n".join(lines) + "\n"


def exit_code(checks: Sequence[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0


def doctor_here(
    mode: str | None,
    config: str | None,
    nic: str | None,
    fmt: str,
    command: Sequence[str] = (),
) -> tuple[str, int]:
    """`marun doctor` on this machine: (the report in `fmt`, the exit code). `mode` "auto" is
    what the platform's hints say, or none when they say nothing. `command`: the start command
    (the script and the platform's appended arguments), whose plan is then checked too."""
    from marun.errors import MarunError
    from marun.launch import read_inputs
    from marun.plan.modes import detect_mode

    platform = read_inputs(command, config, {"nic": nic})
    if mode == "auto":
        try:
            mode = detect_mode(platform)
        except MarunError:
            mode = None
    checks = run_checks(platform, mode, command)
    return render_checks(checks, "json" if fmt == "json" else "table"), exit_code(checks)

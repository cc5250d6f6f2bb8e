"""A corpus of generated bad and odd inputs, through the real `marun plan` and `marun run`.

Every input channel is covered: the platform's variables, marun's own `MARUN_*` variables and
options, the arguments the platform appends, rank tables of both formats, YAML settings files,
and files that are not what they claim (binary, huge, a directory, a symlink loop, not UTF-8,
nested a thousand deep). The promise checked on each: exit 0 with a valid plan (for `run`: the
job's own status), or exit 2 with exactly one stderr line `marun: error: ...` and nothing started;
never a traceback, another exit code, or a hang.

Each input runs in a child forked from this process, which calls marun's own `main` (the code
path of the command, without paying an interpreter start per input: the corpus is large). The
child's stdin, stdout and stderr are files; its environment is only what the case sets, on top of
a clean base. The training script records that it started in a file, so "nothing started" is
checked from outside. docs/reliability.md reports the count and the classes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import free_port

# File contents a case can ask for by name; written fresh for each case.
DIR = object()  # a directory where a file is expected
LOOP = object()  # a symlink pointing at itself
HUGE = object()  # 40 MB of JSON-looking text


@dataclass
class Case:
    cls: str  # the class reported in docs/reliability.md
    name: str
    args: list[str]  # after `marun plan|run`
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, object] = field(default_factory=dict)  # name in the case dir -> content
    modes: tuple[str, ...] = ("plan", "run")


# -- values --------------------------------------------------------------------------------

ODD_VALUES = [
    "",
    " ",
    "0",
    "-1",
    "1.5",
    "1e8",
    "nan",
    "inf",
    "-inf",
    "0x10",
    "99999999999999999999",
    "²",
    "١٢",  # Arabic-Indic digits: str.isdigit() says yes
    "1\n2",
    "1\x01",
    "\x1b[31mred",
    "$(touch /tmp/pwned)",
    "a;b",
    "`id`",
    "-oProxyCommand=x",
    "../../etc/passwd",
    "é" * 50,
    "x" * 5000,
    "true",
    "[1, 2]",
    "{a: 1}",
]
HOST_VALUES = [
    "a;b",
    "-oProxyCommand=x",
    "h\nx",
    "a..b",
    "x" * 64 + ".com",
    "ünï.example",
    "h:1:2",
    "[::1",
    "999.1.1.1",
    "",
    "host name",
    "$(id)",
    "\x07bell",
    "*",
]

# The platform's variables, each with the modes that read it.
PLATFORM_VARS = {
    "MA_NUM_HOSTS": ("mindspore", "mpi", "pytorch"),
    "VC_TASK_INDEX": ("mindspore", "mpi"),
    "MA_TASK_INDEX": ("mindspore",),
    "MA_NUM_GPUS": ("pytorch", "mindspore", "mpi", "tensorflow"),
    "RANK_ID": ("ascend",),
    "RANK_SIZE": ("ascend",),
    "ASCEND_DEVICE_ID": ("ascend",),
    "MS_SCHED_PORT": ("mindspore",),
    "MS_TOPO_TIMEOUT": ("mindspore",),
    "MS_ENABLE_RECOVERY": ("mindspore",),
    "MS_RETRY_INTERVAL_LOWER": ("mindspore",),
    "MS_RETRY_INTERVAL_UPPER": ("mindspore",),
    "MA_VJ_NAME": ("mpi", "mindspore"),
    "MA_TASK_NAME": ("mindspore", "mpi"),
    "MA_CURRENT_IP": ("mindspore",),
    "MA_LOG_DIR": ("pytorch",),
}
# marun's settings by variable, with the option of the same name where there is one.
SETTING_VARS = [
    "MARUN_NPROC_PER_NODE",
    "MARUN_GRACE_PERIOD",
    "MARUN_MAX_RESTARTS",
    "MARUN_RECOVERY_WAIT",
    "MARUN_RESOLVE_TIMEOUT",
    "MARUN_RANKTABLE_TIMEOUT",
    "MARUN_SSHD_PORT",
    "MARUN_MS_SCHED_PORT",
    "MARUN_MS_TOPO_TIMEOUT",
    "MARUN_NIC",
    "MARUN_LOG_DIR",
    "MARUN_CONSOLE_RANKS",
    "MARUN_MPIRUN_EXTRA_ARGS",
    "MARUN_PER_NODE",
    "MARUN_TF_CHIEF",
    "MARUN_FORMATION_TIMEOUT",
    "MARUN_PEER_TIMEOUT",
]
OPTIONS = [
    "--nproc-per-node",
    "--grace-period",
    "--max-restarts",
    "--recovery-wait",
    "--nic",
    "--log-dir",
    "--console-ranks",
    "--mode",
    "--config",
]

# What a sane job of each mode looks like (the base each case bends one thing of).
INIT = ["--init_method", "tcp://127.0.0.1:29500"]
TF_ARGS = [
    *("--task_index", "0", "--ps_hosts", "127.0.0.1:2222"),
    *("--worker_hosts", "127.0.0.1:2223", "--job_name", "worker"),
]
MODE_BASE: dict[str, tuple[dict[str, str], list[str]]] = {
    "pytorch": ({"MA_NUM_GPUS": "2"}, INIT),
    "tensorflow": ({}, TF_ARGS),
    "mindspore": ({"MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "2", "MA_CURRENT_IP": "127.0.0.1"}, []),
    "mpi": ({"MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "2"}, []),
    "ascend": ({"RANK_TABLE_FILE": "rt.json", "RANK_ID": "0", "RANK_SIZE": "2"}, []),
}


def _server_list(servers: list[tuple[str, str, list[tuple[str, str]]]]) -> dict[str, object]:
    return {
        "version": "1.0",
        "server_count": str(len(servers)),
        "server_list": [
            {
                "server_id": sid,
                "host_nic_ip": ip,
                "device": [
                    {"device_id": d, "device_ip": f"29.0.0.{d}", "rank_id": r} for d, r in devs
                ],
            }
            for sid, ip, devs in servers
        ],
        "status": "completed",
    }


GOOD_TABLE = _server_list([("127.0.0.1", "127.0.0.1", [("0", "0"), ("1", "1")])])
GOOD_GROUP_TABLE: dict[str, object] = {
    "status": "completed",
    "group_count": "1",
    "group_list": [
        {
            "group_name": "worker",
            "device_count": "2",
            "instance_count": "1",
            "instance_list": [
                {
                    "pod_name": "p0",
                    "server_id": "127.0.0.1",
                    "devices": [
                        {"device_id": "0", "device_ip": "29.0.0.0"},
                        {"device_id": "1", "device_ip": "29.0.0.1"},
                    ],
                }
            ],
        }
    ],
}


def _mode_case(cls: str, name: str, mode: str, env: dict[str, str], extra: list[str]) -> Case:
    base_env, appended = MODE_BASE[mode]
    files: dict[str, object] = {}
    if mode == "ascend":
        files["rt.json"] = json.dumps(GOOD_TABLE)
    return Case(
        cls,
        name,
        ["--mode", mode, *extra, "--", "train.py", *appended],
        {**base_env, **env},
        files,
    )


# -- the corpus ----------------------------------------------------------------------------


def _mutations(table: object) -> Iterator[tuple[str, object]]:
    """Every leaf of a rank table replaced with odd values; every key dropped; lists emptied."""

    def walk(node: object, path: tuple[object, ...]) -> Iterator[tuple[tuple[object, ...], object]]:
        yield path, node
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, (*path, i))

    def replaced(path: tuple[object, ...], value: object, drop: bool = False) -> object:
        doc = json.loads(json.dumps(table))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if drop:
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
        return doc

    odd: list[object] = ["", "-1", "x", None, 7, 1.5, [], {}, "²", "9" * 30, "a;b"]
    for path, node in walk(table, ()):
        if not path:
            continue
        where = "/".join(str(p) for p in path)
        yield f"drop {where}", replaced(path, None, drop=True)
        if isinstance(node, (str, int)):
            for i, value in enumerate(odd):
                yield f"{where}={i}", replaced(path, value)
        elif isinstance(node, list):
            yield f"{where}=[]", replaced(path, [])
            yield f"{where}=dup", replaced(path, node + node)


def corpus() -> list[Case]:
    cases: list[Case] = []
    # 1. the platform's variables
    for var, modes in PLATFORM_VARS.items():
        for mode in modes:
            for i, value in enumerate(ODD_VALUES):
                cases.append(
                    _mode_case("platform variable", f"{var}#{i} {mode}", mode, {var: value}, [])
                )
    for i, value in enumerate(HOST_VALUES):
        env = {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "MA_VJ_NAME": value}
        cases.append(_mode_case("host name", f"MA_VJ_NAME host#{i}", "mindspore", env, []))
        env = {"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1", "VC_WORKER_HOSTS": f"{value},{value}"}
        cases.append(_mode_case("host name", f"VC_WORKER_HOSTS#{i}", "mpi", env, []))
        env = {"MA_CURRENT_IP": value}
        cases.append(_mode_case("host name", f"MA_CURRENT_IP#{i}", "mindspore", env, []))
    # 2. marun's settings, by variable and by option
    for var in SETTING_VARS:
        for i, value in enumerate(ODD_VALUES):
            mode = "mpi" if "SSHD" in var or "MPIRUN" in var or "FORMATION" in var else "pytorch"
            if "MS_" in var:
                mode = "mindspore"
            cases.append(_mode_case("setting variable", f"{var}#{i}", mode, {var: value}, []))
    for opt in OPTIONS:
        for i, value in enumerate(ODD_VALUES):
            cases.append(_mode_case("option", f"{opt}#{i}", "pytorch", {}, [opt, value]))
    # 3. appended arguments
    inits = [
        *(f"tcp://{h}:29500" for h in HOST_VALUES),
        *(f"tcp://127.0.0.1:{p}" for p in ODD_VALUES),
        "tcp://user:hunter2@127.0.0.1:29500",
        "env://",
        "file:///tmp/x",
        "tcp://",
        "tcp://:29500",
        "127.0.0.1:29500",
        "tcp://[::1]:29500",
        "tcp://h:1:2",
    ]
    for i, init in enumerate(inits):
        cases.append(
            Case(
                "appended --init_method",
                f"init#{i}",
                ["--mode", "auto", "--", "train.py", "--init_method", init],
            )
        )
    for flag in ("--rank", "--world_size"):
        for i, value in enumerate(ODD_VALUES):
            args = ["--", "train.py", *INIT, flag, value]
            cases.append(
                Case("appended --rank/--world_size", f"{flag}#{i}", ["--mode", "pytorch", *args])
            )
    host_lists = [
        *(f"[{h}:2222]" for h in HOST_VALUES),
        *(f"127.0.0.1:{p}" for p in ODD_VALUES),
        "[]",
        "[,]",
        "127.0.0.1:2222,127.0.0.1:2222",
        '["127.0.0.1:2222"',
        "[[127.0.0.1:2222]]",
    ]
    for flag in ("--ps_hosts", "--worker_hosts"):
        for i, value in enumerate(host_lists):
            args = [a if a != flag else flag for a in TF_ARGS]
            j = args.index(flag)
            args[j + 1] = value
            cases.append(
                Case(
                    "appended TF hosts",
                    f"{flag}#{i}",
                    ["--mode", "tensorflow", "--", "train.py", *args],
                )
            )
    for flag in ("--task_index", "--job_name"):
        for i, value in enumerate(ODD_VALUES):
            args = list(TF_ARGS)
            args[args.index(flag) + 1] = value
            cases.append(
                Case(
                    "appended TF task",
                    f"{flag}#{i}",
                    ["--mode", "tensorflow", "--", "train.py", *args],
                )
            )
    # 4. rank tables, both formats, every leaf bent; mindspore reads them too
    for fmt, table in (("server_list", GOOD_TABLE), ("group_list", GOOD_GROUP_TABLE)):
        for j, (what, doc) in enumerate(_mutations(table)):
            for mode in ("ascend", "mindspore") if j % 3 == 0 else ("ascend",):
                env = (
                    dict(MODE_BASE["ascend"][0])
                    if mode == "ascend"
                    else {"RANK_TABLE_FILE": "rt.json"}
                )
                cases.append(
                    Case(
                        f"rank table ({fmt})",
                        f"{fmt} {what} {mode}",
                        ["--mode", mode, "--", "train.py"],
                        env,
                        {"rt.json": json.dumps(doc)},
                    )
                )
    # 5. files that are not what they claim, as a rank table and as a settings file
    odd_files: dict[str, object] = {
        "empty": "",
        "binary": bytes(range(256)) * 4,
        "not utf-8": b'{"status": "completed", "x": "\xff\xfe"}',
        "nested": "[" * 5000 + "]" * 5000,
        "nested yaml": "a:\n" + "".join("  " * i + "- \n" for i in range(2000)),
        "huge": HUGE,
        "directory": DIR,
        "symlink loop": LOOP,
        "trailing comma": '{"status": "completed",}',
        "a list": "[1, 2, 3]",
        "a scalar": "42",
        "yaml tags": "!!python/object/apply:os.system ['touch /tmp/pwned']",
        "nul": "\x00\x00",
    }
    for what, content in odd_files.items():
        env = dict(MODE_BASE["ascend"][0])
        cases.append(
            Case(
                "odd file: rank table",
                f"rank table {what}",
                ["--mode", "ascend", "--", "train.py"],
                env,
                {"rt.json": content},
            )
        )
        cases.append(
            Case(
                "odd file: settings",
                f"--config {what}",
                ["--mode", "pytorch", "--config", "rt.json", "--", "train.py", *INIT],
                {},
                {"rt.json": content},
            )
        )
        cases.append(
            Case(
                "odd file: settings",
                f"./marun.yaml {what}",
                ["--mode", "pytorch", "--", "train.py", *INIT],
                {},
                {"marun.yaml": content},
            )
        )
        cases.append(
            Case(
                "odd file: script",
                f"script {what}",
                ["--mode", "pytorch", "--", "odd.py", *INIT],
                {},
                {"odd.py": content},
                modes=("plan",),
            )
        )
    # 6. settings files: every key with odd values, unknown keys, non-mappings
    keys = [
        "nproc_per_node",
        "grace_period",
        "sshd_port",
        "nic",
        "log_dir",
        "console_ranks",
        "mpirun_extra_args",
        "per_node",
        "resolve_timeout",
        "mpi_forward_env",
        "no_such_key",
    ]
    yaml_values = [
        "-1",
        "nan",
        ".inf",
        "-.inf",
        "[]",
        "{}",
        "null",
        "'²'",
        "1e999",
        "0x1F",
        "true",
        '"a;b"',
        "!!binary aGVsbG8=",
    ]
    for key in keys:
        for i, value in enumerate(yaml_values):
            cases.append(
                Case(
                    "settings file key",
                    f"yaml {key}#{i}",
                    ["--mode", "pytorch", "--", "train.py", *INIT],
                    {},
                    {"marun.yaml": f"{key}: {value}\n"},
                )
            )
    # 7. odd command lines
    for i, args in enumerate(
        [
            [],
            ["--"],
            ["--mode"],
            ["--mode", "nope", "--", "train.py"],
            ["--", "no-such-command-xyz"],
            ["--", "./train.py"],
            ["--", "/"],
            ["--", "train.py", *INIT, *INIT],
            ["--nproc-per-node"],
            ["--no-such-option", "--", "train.py"],
            ["--", "train.py", "--init_method"],
            ["--mode", "auto", "--", "train.py"],
            ["--format", "xml", "--", "train.py", *INIT],
            ["--log-dir", "/proc/1/nope", "--", "train.py", *INIT],
        ]
    ):
        cases.append(Case("command line", f"argv#{i}", args))
    return cases


# -- running one case ------------------------------------------------------------------------

TRAIN = "import os\nopen(os.environ['CORPUS_STARTED'] + '/started.%d' % os.getpid(), 'w').close()\n"


def _write(case_dir: Path, name: str, content: object) -> None:
    path = case_dir / name
    if content is DIR:
        path.mkdir()
    elif content is LOOP:
        path.symlink_to(path.name)
    elif content is HUGE:
        with open(path, "w") as fh:
            fh.write('{"status": "completed", "pad": "')
            chunk = "x" * (1 << 20)
            for _ in range(40):
                fh.write(chunk)
            fh.write('"}')
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(str(content))


BASE_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": os.environ.get("HOME", "/root"),
    "LANG": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    # `run` waits only as long as bounded waits allow; here they are short, so a case that
    # reaches one ends in seconds (a dry run never waits at all).
    "MARUN_RESOLVE_TIMEOUT": "1",
    "MARUN_RANKTABLE_TIMEOUT": "1",
    "MARUN_ARRIVAL_TIMEOUT": "1",
    # Each case is one container of its job, alone: a multi-node job's other nodes never come,
    # and waiting for them is not what this corpus tests (tests/e2e/test_job.py does).
    "MARUN_JOB_PORT": "0",
    "MARUN_FORMATION_TIMEOUT": "1",
    "MARUN_GRACE_PERIOD": "1",
}


def _port_env() -> dict[str, str]:
    """Ports that `run` binds on this host (MPI's sshd, MindSpore's scheduler; the job's
    coordination is off here: MARUN_JOB_PORT=0 above), free when the corpus starts: the defaults
    (36666, 8118) may be held by anything else on the machine, and a case would then fail on
    "Address already in use" instead of on its input. A case that sets one of these itself keeps
    its own value."""
    return {
        "MARUN_SSHD_PORT": str(free_port()),
        "MARUN_MS_SCHED_PORT": str(free_port()),
    }


# A case that has not ended after CASE_TIMEOUT is hung unless it is still working: it, or what
# it started, gained CPU time since the last look. The slow lane runs beside
# other groups (one of them starts 512 maruns at once), and on two cores a case that needs 2
# CPU-s may get them over more than a minute; starved is not hung. A case that works on past
# CASE_CPU_LIMIT, or is not done by CASE_WALL_LIMIT, is hung all the same (a busy loop).
CASE_TIMEOUT = 60.0
CASE_RECHECK = 15.0
CASE_CPU_LIMIT = 30.0
CASE_WALL_LIMIT = 600.0


@dataclass
class Outcome:
    code: int | None  # None: killed after CASE_TIMEOUT
    stdout: str
    stderr: str
    started: int  # training processes that started


def _preload() -> None:
    """Import what the command imports lazily, once here: every forked child inherits it."""
    import importlib
    import pkgutil

    import marun

    for info in pkgutil.walk_packages(marun.__path__, "marun."):
        if info.name not in ("marun.__main__",):
            importlib.import_module(info.name)
    import yaml  # noqa: F401 - loaded lazily by the settings reader

    from marun.command.cli import click_command

    click_command()  # typer's command, built once here: 29 ms of a case's 36 ms otherwise


# Cases run this many at a time (each in its own session, work directory, TMPDIR and ports):
# each is a fork that spends its time in marun's own Python, so two keep both cores busy.
SLOTS = int(os.environ.get("MARUN_CORPUS_SLOTS", "2"))


@dataclass
class Running:
    """A case started and not yet judged."""

    pid: int
    work: Path
    deadline: float
    started: float = 0.0
    cpu: float = 0.0  # the case's CPU seconds at the last look past the deadline


def case_cpu(pid: int) -> float:
    """CPU seconds of the case (its reaped children included) and of everything living below
    it, read as the hang watchdog reads its ranks' (marun.job.cputime)."""
    from marun.job.cputime import descendants_cpu
    from marun.runtime.reaper import stat_fields

    fields = stat_fields(pid) or []
    own = sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime ... cstime
    return own + (descendants_cpu(pid) or 0.0)


def still_working(run: Running, now: float) -> bool:
    """Past its deadline: whether the case gained CPU time since the last look (then it is
    looked at again CASE_RECHECK later), within CASE_CPU_LIMIT and CASE_WALL_LIMIT."""
    cpu = case_cpu(run.pid)
    working = run.cpu < cpu < CASE_CPU_LIMIT and now - run.started < CASE_WALL_LIMIT
    run.cpu = cpu
    if working:
        run.deadline = now + CASE_RECHECK
    return working


def start_case(case: Case, command: str, work: Path, ports: Mapping[str, str]) -> Running:
    """Fork `marun COMMAND ARGS` for `case` in `work` (its own run directory: TMPDIR). The
    child calls the `marun` command's own entry point: a well-formed `marun run` takes its
    typer-free path there (marun.run_argv), as in a container; the rest is the typer CLI's."""
    from marun.command.entry import main

    case_dir = work / "case"
    case_dir.mkdir()
    (case_dir / "train.py").write_text(TRAIN)
    for name, content in case.files.items():
        _write(case_dir, name, content)
    started_dir = work / "started"
    started_dir.mkdir()
    env = {**BASE_ENV, "TMPDIR": str(work), **ports, **case.env}
    env["CORPUS_STARTED"] = str(started_dir)
    out_path, err_path = work / "stdout", work / "stderr"
    pid = os.fork()
    if pid == 0:  # the child: becomes `marun COMMAND ARGS` and never returns
        code = 70
        try:
            os.setsid()
            os.chdir(case_dir)
            os.environ.clear()
            os.environ.update(env)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(os.open(out_path, os.O_WRONLY | os.O_CREAT, 0o600), 1)
            os.dup2(os.open(err_path, os.O_WRONLY | os.O_CREAT, 0o600), 2)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the child's own stdio
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            sys.argv = ["marun", command, *case.args]
            try:
                main([command, *case.args])
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    now = time.monotonic()
    return Running(pid, work, now + CASE_TIMEOUT, started=now)


def poll_case(run: Running) -> Outcome | None:
    """The case's outcome once it has ended (or was killed at its deadline); None meanwhile."""
    code: int | None = None
    done, status = os.waitpid(run.pid, os.WNOHANG)
    if done:
        code = os.waitstatus_to_exitcode(status)
    elif time.monotonic() > run.deadline and not still_working(run, time.monotonic()):
        os.killpg(run.pid, signal.SIGKILL)
        os.waitpid(run.pid, 0)
    else:
        return None
    # Whatever the case started in its session ends with it.
    with contextlib.suppress(OSError):
        os.killpg(run.pid, signal.SIGKILL)
    out_path, err_path = run.work / "stdout", run.work / "stderr"
    return Outcome(
        code,
        out_path.read_text(errors="replace") if out_path.exists() else "",
        err_path.read_text(errors="replace") if err_path.exists() else "",
        len(list((run.work / "started").iterdir())),
    )


def run_cases(
    cases: list[tuple[int, Case]], command: str, root: Path
) -> Iterator[tuple[int, Case, Outcome]]:
    """Every case's outcome, SLOTS at a time, each slot with ports of its own."""
    slots = [_port_env() for _ in range(SLOTS)]
    free = list(range(SLOTS))
    # Every object so far out of the collector's sight while the cases fork: a collection in a
    # child otherwise walks (and so copies, page by page) the whole heap it shares with this one.
    gc.freeze()
    try:
        yield from _run_slots(cases, command, root, slots, free)
    finally:
        gc.unfreeze()


def _run_slots(
    cases: list[tuple[int, Case]],
    command: str,
    root: Path,
    slots: list[dict[str, str]],
    free: list[int],
) -> Iterator[tuple[int, Case, Outcome]]:
    running: dict[int, tuple[int, Case, Running]] = {}  # slot -> case
    queue = list(cases)
    while queue or running:
        while queue and free:
            slot = free.pop()
            i, case = queue.pop(0)
            work = root / f"c{i}"
            work.mkdir()
            running[slot] = (i, case, start_case(case, command, work, slots[slot]))
        for slot, (i, case, run) in list(running.items()):
            outcome = poll_case(run)
            if outcome is not None:
                del running[slot]
                free.append(slot)
                yield i, case, outcome
        select.select([], [], [], 0.005)


def judge(case: Case, command: str, o: Outcome) -> str | None:
    """What is wrong with an outcome, or None."""
    if o.code is None:
        return f"hung (killed: no CPU progress after {CASE_TIMEOUT:g}s, or a busy loop)"
    if "Traceback" in o.stderr:
        return "traceback:\n" + o.stderr[-1500:]
    if o.code == 2:
        lines = o.stderr.splitlines()
        if len(lines) != 1 or not lines[0].startswith("marun: error: "):
            return f"exit 2 with {len(lines)} stderr lines: {o.stderr[:600]!r}"
        if len(lines[0]) > 1000:
            return f"an error line of {len(lines[0])} characters"
        if any(ord(c) < 32 and c != "\t" for c in lines[0]):
            return f"control characters in the error line: {lines[0][:300]!r}"
        if o.started:
            return f"exit 2 but {o.started} process(es) started"
        return None
    if o.code == 0:
        if command == "plan":
            try:
                plan = json.loads(o.stdout)
            except ValueError:
                return f"exit 0 but the plan is not JSON: {o.stdout[:300]!r}"
            if not plan.get("nodes"):
                return "exit 0 with a plan of no nodes"
            if o.started:
                return "a dry run started a process"
        return None
    return f"exit {o.code}: {o.stderr[-800:]!r}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:300] + "..."


CASES = corpus()


def test_the_corpus_is_large_and_covers_every_channel() -> None:
    classes = {c.cls for c in CASES}
    runs = sum(len(c.modes) for c in CASES)
    assert runs >= 1000, runs
    for channel in (
        "platform variable",
        "setting variable",
        "option",
        "appended --init_method",
        "appended TF hosts",
        "rank table (server_list)",
        "rank table (group_list)",
        "odd file: rank table",
        "odd file: settings",
        "settings file key",
        "host name",
    ):
        assert channel in classes


@pytest.mark.parametrize("command", ["plan", "run"])
def test_every_input_gives_a_plan_or_one_line_and_exit_2(command: str, tmp_path: Path) -> None:
    _preload()
    failures: list[str] = []
    counts: dict[str, dict[str, int]] = {}
    tried = 0
    chosen = [(i, case) for i, case in enumerate(CASES) if command in case.modes]
    for i, case, outcome in run_cases(chosen, command, tmp_path):
        tried += 1
        wrong = judge(case, command, outcome)
        per = counts.setdefault(case.cls, {"tried": 0, "exit 0": 0, "exit 2": 0})
        per["tried"] += 1
        if outcome.code in (0, 2):
            per[f"exit {outcome.code}"] += 1
        if wrong:
            failures.append(
                f"[{case.cls}] {case.name}: marun {command} {_short(case.args)} "
                f"env={_short(case.env)}: {wrong}"
            )
        else:
            import shutil

            shutil.rmtree(tmp_path / f"c{i}", ignore_errors=True)
    report = os.environ.get("MARUN_CORPUS_REPORT")
    if report:
        with open(report, "a") as fh:
            fh.write(json.dumps({"command": command, "tried": tried, "classes": counts}) + "\n")
    dump = os.environ.get("MARUN_CORPUS_FAILURES")
    if dump:
        Path(dump).write_text("\n".join(failures) + "\n")
    assert not failures, f"{len(failures)} of {tried} inputs broke a promise:\n" + "\n".join(
        failures[:40]
    )

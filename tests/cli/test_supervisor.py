"""`marun run` supervising several processes, for real: real CLI, real processes, real signals.

The processes are tests/scripts/worker.py, a plain-Python stand-in for a training script whose
behaviour per rank is given on its command line (see its docstring). Plans come from the real
modes (`--mode pytorch` gives one process per local rank with RANK set; `--mode mindspore` a
scheduler and workers with MS_NODE_ID) or, for shapes no mode makes (daemons, a command that
cannot start), from tests/scripts/run_plan.py, which hands a hand-built plan to the same
executor. Timing: every wait is bounded generously to catch a hang; nothing asserts on
wall-clock time.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from conftest import clean_env, free_port, run_marun

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
WORKER = SCRIPTS / "worker.py"
RUN_PLAN = SCRIPTS / "run_plan.py"
INIT = ("--init_method", "tcp://127.0.0.1:29500")  # what the platform appends; nothing listens


# -- helpers (shared with test_pid1.py) ----------------------------------------------------


def wait_until(predicate: Callable[[], Any], what: str, limit: float = 30.0) -> Any:
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def worker_env(tmp_path: Path, peers: int = 0, **extra: str) -> dict[str, str]:
    env = {"W_DIR": str(tmp_path), "W_PEERS": str(peers), "MARUN_GRACE_PERIOD": "20"}
    env.update(extra)
    return env


def pytorch_args(nproc: int, actions: Sequence[str], *options: str) -> list[str]:
    return [
        "run",
        "--mode",
        "pytorch",
        "--nproc-per-node",
        str(nproc),
        *options,
        "--",
        str(WORKER),
        *actions,
        *INIT,
    ]


def start_marun(
    args: Sequence[str], env: Mapping[str, str], cwd: Path, stdout: Any = None
) -> subprocess.Popen[str]:
    """Start `python -m marun ARGS`; its stdout goes to `cwd/stdout` unless given, its stderr
    to `cwd/stderr`."""
    with open(cwd / "stdout", "w") as out, open(cwd / "stderr", "w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "marun", *args],
            env=clean_env(env),
            cwd=str(cwd),
            stdout=stdout if stdout is not None else out,
            stderr=err,
            text=True,
        )


def ready(tmp_path: Path, labels: Sequence[str]) -> bool:
    return all((tmp_path / f"ready.{label}").exists() for label in labels)


def result(tmp_path: Path, log_dir: str = "marun_logs") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / log_dir / "result.json").read_text())
    return data


def by_name(res: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in res["processes"]}


def signals_seen(tmp_path: Path, label: str) -> list[str]:
    path = tmp_path / f"signals.{label}"
    return path.read_text().split() if path.exists() else []


def alive(pid: int) -> bool:
    """True while the pid exists and is not a zombie."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in text


def run_plan(
    tmp_path: Path,
    processes: Sequence[Mapping[str, Any]],
    env: Mapping[str, str],
    exec_lone: bool = False,
) -> subprocess.CompletedProcess[str]:
    plan = {"mode": "test", "node": {"index": 0, "host": "here"}, "processes": list(processes)}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    args = [sys.executable, str(RUN_PLAN), str(tmp_path / "plan.json")]
    return subprocess.run(
        [*args, "--exec"] if exec_lone else args,
        env=clean_env(env),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def proc(tmp_path: Path, name: str, *actions: str, **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "argv": [sys.executable, str(WORKER), *actions],
        "env": {"W_LABEL": name},
        "cwd": str(tmp_path),
        "log": str(tmp_path / "logs" / f"{name}.log"),
    }
    spec.update(fields)
    return spec


# -- fail-fast -------------------------------------------------------------------------------


def test_a_failing_rank_stops_the_others_and_names_itself(tmp_path: Path) -> None:
    res = run_marun(
        pytorch_args(3, ["1=exit:7", "*=sleep"]), env=worker_env(tmp_path, 3), cwd=tmp_path
    )
    assert res.returncode == 7, res.stderr
    # The others got SIGTERM and ended by it: gone within the grace period, no SIGKILL needed.
    assert signals_seen(tmp_path, "0") == ["TERM"]
    assert signals_seen(tmp_path, "2") == ["TERM"]
    summary = res.stderr[res.stderr.index("First failure:") :]
    assert "First failure: rank1 (rank 1), exit code 7 (pid " in summary
    assert "| last words of 1" in summary
    # One line per other process, saying what marun did and what the process then did.
    assert "  rank0 (rank 0): stopped by marun (SIGTERM)\n" in summary
    # The first failure's last lines once; marun's own events stay off the console.
    assert res.stderr.count("| last words of 1") == 1
    assert "job_failed" not in res.stderr and "process_started" not in res.stderr

    rec = result(tmp_path)
    assert rec["outcome"] == "failed"
    assert rec["exit_code"] == 7
    assert rec["first_failure"]["name"] == "rank1"
    assert rec["first_failure"]["rank"] == 1
    assert rec["first_failure"]["exit_code"] == 7
    procs = by_name(rec)
    assert procs["rank1"]["exit_code"] == 7
    assert procs["rank1"]["signal"] is None
    assert procs["rank1"]["stopped_by"] is None
    for name in ("rank0", "rank2"):
        assert procs[name]["signal"] == "SIGTERM"
        assert procs[name]["exit_code"] == 143
        assert procs[name]["stopped_by"] == "SIGTERM"
    for p in rec["processes"]:
        assert len(p["pids"]) == 1
        assert p["restarts"] == 0
        assert p["duration"] >= 0
        assert p["started"] <= p["ended"]
        assert not alive(p["pids"][0])
    # Logs: everything each process printed, private to the user.
    log_dir = tmp_path / "marun_logs"
    assert stat.S_IMODE(log_dir.stat().st_mode) == 0o700
    for r in range(3):
        assert stat.S_IMODE((log_dir / f"rank_{r}.log").stat().st_mode) == 0o600
    assert (log_dir / "rank_1.log").read_text().endswith("last words of 1\n")
    assert stat.S_IMODE((log_dir / "result.json").stat().st_mode) == 0o600


def test_without_fail_fast_the_others_are_stopped_once_their_window_has_passed(
    tmp_path: Path,
) -> None:
    """marun simulate's outer supervision (fail_fast off: its nodes stop one another as one job).
    A node that fails before its job exists (exit 2 at plan time) leaves the others nothing to
    stop them: after grace_period and a margin they are stopped here, instead of waiting out
    arrival_timeout + peer_timeout (360 s by default; this one would sleep 600 s)."""
    plan = {
        "mode": "test",
        "node": {"index": 0, "host": "here"},
        "fail_fast": False,
        "processes": [
            proc(tmp_path, "node0", "*=exit:2", env={"W_LABEL": "node0"}),
            proc(tmp_path, "node1", "*=sleep", env={"W_LABEL": "node1"}),
        ],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    res = subprocess.run(
        [sys.executable, str(RUN_PLAN), str(tmp_path / "plan.json")],
        env=clean_env(worker_env(tmp_path, 2, MARUN_GRACE_PERIOD="1")),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2, res.stderr
    assert signals_seen(tmp_path, "node1") == ["TERM"]
    rec = result(tmp_path, "logs")
    assert rec["first_failure"]["name"] == "node0"
    assert by_name(rec)["node1"]["stopped_by"] == "SIGTERM"


def test_a_rank_ignoring_sigterm_gets_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    env = worker_env(tmp_path, 3, MARUN_GRACE_PERIOD="1")
    res = run_marun(pytorch_args(3, ["1=exit:3", "0=stubborn", "*=sleep"]), env=env, cwd=tmp_path)
    assert res.returncode == 3, res.stderr
    assert signals_seen(tmp_path, "0") == ["TERM"]  # received, ignored
    procs = by_name(result(tmp_path))
    assert procs["rank0"]["signal"] == "SIGKILL"
    assert procs["rank0"]["stopped_by"] == "SIGKILL"
    assert procs["rank2"]["signal"] == "SIGTERM"
    assert "killing" in res.stderr


def test_a_rank_killed_by_sigkill_makes_marun_exit_137(tmp_path: Path) -> None:
    res = run_marun(
        pytorch_args(2, ["1=sigkill", "*=sleep"]), env=worker_env(tmp_path, 2), cwd=tmp_path
    )
    assert res.returncode == 137, res.stderr
    assert "First failure: rank1 (rank 1), signal 9 (SIGKILL)" in res.stderr
    assert "| about to be killed" in res.stderr
    rec = result(tmp_path)
    assert rec["first_failure"]["signal"] == "SIGKILL"
    assert rec["first_failure"]["exit_code"] == 137


def test_a_command_that_cannot_start_fails_the_job_with_127(tmp_path: Path) -> None:
    bad = proc(tmp_path, "ghost", argv=[str(tmp_path / "no-such-binary")])
    res = run_plan(tmp_path, [proc(tmp_path, "a", "*=sleep"), bad], worker_env(tmp_path))
    assert res.returncode == 127, res.stderr
    assert "cannot start" in res.stderr
    procs = by_name(result(tmp_path, "logs"))
    assert procs["ghost"]["pids"] == []
    assert procs["ghost"]["error"].startswith("cannot start")
    assert procs["a"]["stopped_by"] == "SIGTERM"


# -- success, daemons ------------------------------------------------------------------------


def test_success_stops_the_daemons_and_counts_as_success(tmp_path: Path) -> None:
    processes = [
        proc(tmp_path, "chief", "*=ok", role="chief", rank=0),
        proc(tmp_path, "ps0", "*=sleep", role="ps", daemon=True),
    ]
    res = run_plan(tmp_path, processes, worker_env(tmp_path, 2))
    assert res.returncode == 0, res.stderr
    assert "[0:0] ok from chief" in res.stdout
    assert signals_seen(tmp_path, "ps0") == ["TERM"]
    rec = result(tmp_path, "logs")
    assert rec["outcome"] == "succeeded"
    assert rec["first_failure"] is None
    assert by_name(rec)["ps0"]["stopped_by"] == "SIGTERM"


def test_a_plan_of_daemons_only_runs_until_a_signal_and_then_exits_0(tmp_path: Path) -> None:
    plan = {
        "node": {"index": 2, "host": "here"},
        "processes": [proc(tmp_path, "sshd", "*=sleep", role="sshd", daemon=True)],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    marun = subprocess.Popen(
        [sys.executable, str(RUN_PLAN), str(tmp_path / "plan.json")],
        env=clean_env(worker_env(tmp_path)),
        cwd=str(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: ready(tmp_path, ["sshd"]), "the daemon")
        marun.send_signal(signal.SIGTERM)
        assert marun.wait(timeout=30) == 0
    finally:
        marun.kill()
    assert signals_seen(tmp_path, "sshd") == ["TERM"]


# -- signals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stopping_signal_is_relayed_and_marun_exits_128_plus_n(
    tmp_path: Path, signum: signal.Signals
) -> None:
    marun = start_marun(pytorch_args(2, ["*=sleep"]), worker_env(tmp_path), tmp_path)
    try:
        wait_until(lambda: ready(tmp_path, ["0", "1"]), "both ranks")
        marun.send_signal(signum)
        assert marun.wait(timeout=60) == 128 + signum
    finally:
        marun.kill()
    rec = result(tmp_path)
    assert rec["outcome"] == "interrupted"
    assert rec["signal"] == signum.name
    assert rec["exit_code"] == 128 + signum
    for p in rec["processes"]:
        assert p["stopped_by"] == signum.name
        assert not alive(p["pids"][0])
    if signum == signal.SIGTERM:
        assert signals_seen(tmp_path, "0") == signals_seen(tmp_path, "1") == ["TERM"]
    else:  # the workers do not handle SIGINT/SIGHUP: they die of the relayed signal itself
        assert {p["signal"] for p in rec["processes"]} == {signum.name}


def test_under_nohup_a_hangup_changes_nothing_and_sigterm_still_stops_the_job(
    tmp_path: Path,
) -> None:
    """`nohup marun run ...`: SIGHUP stays ignored in every phase (not only before the ranks
    start), so the hangup to marun while its ranks run ends nothing; SIGTERM still stops the
    job, 143."""
    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        marun = subprocess.Popen(
            ["nohup", sys.executable, "-m", "marun", *pytorch_args(2, ["*=sleep"])],
            env=clean_env(worker_env(tmp_path)), cwd=str(tmp_path), stdout=out, stderr=err,
        )  # fmt: skip
    try:
        wait_until(lambda: ready(tmp_path, ["0", "1"]), "both ranks")
        marun.send_signal(signal.SIGHUP)
        with pytest.raises(subprocess.TimeoutExpired):
            marun.wait(timeout=2)  # (it would end at once if it took the hangup)
        marun.send_signal(signal.SIGTERM)
        assert marun.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        marun.kill()
    rec = result(tmp_path)
    assert rec["signal"] == "SIGTERM"
    assert all(p["stopped_by"] == "SIGTERM" for p in rec["processes"])


def test_sigusr1_is_only_relayed(tmp_path: Path) -> None:
    marun = start_marun(pytorch_args(3, ["*=usr1"]), worker_env(tmp_path), tmp_path)
    try:
        wait_until(lambda: ready(tmp_path, ["0", "1", "2"]), "every rank")
        marun.send_signal(signal.SIGUSR1)
        # Each rank records SIGUSR1 and exits 0 by itself: marun did not stop anything.
        assert marun.wait(timeout=30) == 0
    finally:
        marun.kill()
    for label in ("0", "1", "2"):
        assert signals_seen(tmp_path, label) == ["USR1"]
    assert all(p["stopped_by"] is None for p in result(tmp_path)["processes"])


# -- reaping -----------------------------------------------------------------------------


def _zombie_children(pid: int) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status and "\nState:\tZ" in status:
                found.append(status)
    return found


def test_an_orphaned_grandchild_is_adopted_and_reaped(tmp_path: Path) -> None:
    marun = start_marun(pytorch_args(2, ["0=orphan", "1=until"]), worker_env(tmp_path), tmp_path)
    try:
        orphan = wait_until(
            lambda: (
                (tmp_path / "orphan.0").exists() and json.loads((tmp_path / "orphan.0").read_text())
            ),
            "the grandchild to be orphaned",
        )
        # marun (a child subreaper) adopted it, not the machine's init.
        assert orphan["ppid"] == marun.pid
        (tmp_path / "orphan-go").touch()
        wait_until(lambda: not Path(f"/proc/{orphan['pid']}").exists(), "the orphan's reaping")
        # No zombie stays among marun's children while it keeps running. One that has just
        # exited is a zombie until marun's reaper gets to it: wait for that, bounded.
        wait_until(lambda: not _zombie_children(marun.pid), "every zombie child reaped")
        assert marun.poll() is None
        (tmp_path / "stop").touch()
        assert marun.wait(timeout=30) == 0
    finally:
        marun.kill()
    assert result(tmp_path)["orphans_reaped"] == 1


# -- output ----------------------------------------------------------------------------------


def test_lines_of_fast_ranks_interleave_only_at_line_boundaries(tmp_path: Path) -> None:
    count, width = 1500, 6000  # lines longer than PIPE_BUF: one write() each could tear
    res = run_marun(
        pytorch_args(2, [f"*=spam:{count},{width}"]), env=worker_env(tmp_path, 2), cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr[-2000:]
    line = re.compile(r"\[0:(\d)\] (\d):(\d+):(\d+)\Z")
    seen: dict[str, list[int]] = {"0": [], "1": []}
    for text in res.stdout.splitlines():
        m = line.match(text)
        assert m is not None, text[:200]
        assert m.group(1) == m.group(2), text[:200]
        assert len(text) == len(f"[0:{m.group(1)}] ") + width
        assert set(m.group(4)) == {m.group(1)}
        seen[m.group(1)].append(int(m.group(3)))
    assert seen == {"0": list(range(count)), "1": list(range(count))}
    log = (tmp_path / "marun_logs" / "rank_1.log").read_text().splitlines()
    assert len(log) == count
    assert all(len(text) == width and text.startswith(f"1:{i}:") for i, text in enumerate(log))


def test_a_silent_rank_does_not_hold_the_others_back(tmp_path: Path) -> None:
    marun = start_marun(
        pytorch_args(2, ["1=until:hello-from-1", "0=until"]),
        worker_env(tmp_path),
        tmp_path,
        stdout=subprocess.PIPE,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert marun.stdout is not None
        for text in marun.stdout:
            lines.put(text)

    threading.Thread(target=pump, daemon=True).start()
    try:
        # Rank 0 prints nothing and does not exit; rank 1's line still shows while both run.
        assert lines.get(timeout=30) == "[0:1] hello-from-1\n"
        assert marun.poll() is None
        (tmp_path / "stop").touch()
        assert marun.wait(timeout=30) == 0
    finally:
        marun.kill()


def test_a_pipe_held_open_elsewhere_loses_nothing_and_holds_nothing(tmp_path: Path) -> None:
    """Rank 0 hands its stdout to a process marun does not know (this test, which keeps it open
    to the end), writes three times what its pipe holds and exits at once: marun ends all the
    same (it takes what is in the pipe, never waits for its end), with every line of the rank
    in the log and on the console."""
    lines = 30000
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "lend.sock"))
    server.listen(1)
    held: list[int] = []

    def accept() -> None:
        conn, _ = server.accept()
        with conn:
            held.extend(socket.recv_fds(conn, 1, 1)[1])

    taker = threading.Thread(target=accept, daemon=True)
    taker.start()
    try:
        res = run_marun(
            pytorch_args(1, [f"0=lend:{lines}"], "--supervise"),
            env=worker_env(tmp_path),
            cwd=tmp_path,
        )
        taker.join(timeout=30)
        assert held, "the rank did not hand its stdout over"
    finally:
        for fd in held:
            os.close(fd)
        server.close()
    assert res.returncode == 0, res.stderr[-2000:]
    expected = [f"0:{i}:" + "y" * 90 for i in range(lines)] + ["0 done"]
    assert res.stdout.splitlines() == [f"[0:0] {line}" for line in expected]
    log = (tmp_path / "marun_logs" / "rank_0.log").read_text()
    assert log == "\n".join(expected)


def test_a_last_line_without_newline_is_shown_and_logged(tmp_path: Path) -> None:
    res = run_marun(
        pytorch_args(1, ["*=partial"], "--supervise"), env=worker_env(tmp_path), cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == "[0:0] first line\n[0:0] no newline at the end\n"
    log = (tmp_path / "marun_logs" / "rank_0.log").read_bytes()
    assert log == b"first line\nno newline at the end"


@pytest.mark.parametrize(
    ("selection", "shown"),
    [
        ("1", {"1"}),
        ("0,2", {"0", "2"}),
        ("1-2", {"1", "2"}),
        ("all", {"0", "1", "2"}),
        ("none", set()),
        ("rank2", {"2"}),  # a process name
    ],
)
def test_console_selection_keeps_the_console_readable(
    tmp_path: Path, selection: str, shown: set[str]
) -> None:
    res = run_marun(
        pytorch_args(3, ["*=ok"], "--console-ranks", selection),
        env=worker_env(tmp_path),
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == sorted(f"[0:{r}] ok from {r}" for r in shown)
    for r in range(3):  # log files always get everything
        assert (tmp_path / "marun_logs" / f"rank_{r}.log").read_text() == f"ok from {r}\n"


def test_console_selection_from_the_environment(tmp_path: Path) -> None:
    env = worker_env(tmp_path, MARUN_CONSOLE_RANKS="0")
    res = run_marun(pytorch_args(2, ["*=ok"]), env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "[0:0] ok from 0\n"


# -- MindSpore recovery ----------------------------------------------------------------------

MS_ENV = {"MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "2", "MARUN_RECOVERY_WAIT": "1"}


def _ms_env() -> dict[str, str]:
    """MS_ENV with a scheduler port of this lane's range: the default, 8118, is every lane's, and
    a MindSpore job of the slow lane beside this one held it once (scripts/test.sh, the lanes)."""
    return {**MS_ENV, "MARUN_MS_SCHED_PORT": str(free_port())}


def _starts(tmp_path: Path, label: str) -> list[dict[str, Any]]:
    files = sorted(tmp_path.glob(f"env.{label}.*"), key=lambda p: int(p.suffix[1:]))
    return [json.loads(p.read_text()) for p in files]


def test_recovery_restarts_a_dead_worker_with_the_same_node_id(tmp_path: Path) -> None:
    env = worker_env(
        tmp_path, MS_ENABLE_RECOVERY="1", MS_RECOVERY_PATH=str(tmp_path / "ckpt"), **_ms_env()
    )
    args = ["run", "--mode", "mindspore", "--", str(WORKER), "0=flaky:1", "*=ok"]
    res = run_marun(args, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    starts = _starts(tmp_path, "0")
    assert len(starts) == 2
    assert starts[0]["MS_NODE_ID"] == starts[1]["MS_NODE_ID"] == "0"
    assert starts[0]["pid"] != starts[1]["pid"]
    # A restart is said on the console (a warning: the process died); the rest in the events file.
    assert "process_restart_scheduled" in res.stderr
    procs = by_name(result(tmp_path))
    assert procs["worker0"]["restarts"] == 1
    assert procs["worker0"]["pids"] == [s["pid"] for s in starts]
    assert procs["worker0"]["exit_code"] == 0
    assert procs["worker1"]["restarts"] == 0
    assert (tmp_path / "marun_logs" / "worker_0.log").read_text() == (
        "start 1 of 0\nstart 2 of 0\n"
    )


@pytest.mark.parametrize(
    ("recovery", "max_restarts", "starts"),
    [("1", "2", 3), ("0", "2", 1), ("1", "0", 1)],
)
def test_without_recovery_or_after_the_last_restart_the_job_fails_fast(
    tmp_path: Path, recovery: str, max_restarts: str, starts: int
) -> None:
    env = worker_env(
        tmp_path, MS_ENABLE_RECOVERY=recovery, MS_RECOVERY_PATH=str(tmp_path / "ckpt"), **_ms_env()
    )
    args = ["run", "--mode", "mindspore", "--recovery-restarts", max_restarts, "--"]
    res = run_marun(
        [*args, str(WORKER), "1=flaky:99", "sched=until", "*=ok"], env=env, cwd=tmp_path
    )
    assert res.returncode == 3, res.stderr
    assert len(_starts(tmp_path, "1")) == starts
    assert (f"after {starts - 1} restart(s)" in res.stderr) == (starts > 1), res.stderr
    rec = result(tmp_path)
    assert rec["first_failure"]["name"] == "worker1"
    assert by_name(rec)["scheduler"]["stopped_by"] == "SIGTERM"


# -- exec or supervise -----------------------------------------------------------------------


def test_a_lone_process_is_execd_marun_becomes_it(tmp_path: Path) -> None:
    marun = start_marun(pytorch_args(1, ["*=pid"]), worker_env(tmp_path), tmp_path)
    assert marun.wait(timeout=30) == 0
    assert (tmp_path / "stdout").read_text() == f"pid {marun.pid}\n"
    assert not (tmp_path / "marun_logs" / "result.json").exists()


def test_supervise_keeps_marun_in_front_of_a_lone_process(tmp_path: Path) -> None:
    marun = start_marun(pytorch_args(1, ["*=pid"], "--supervise"), worker_env(tmp_path), tmp_path)
    assert marun.wait(timeout=30) == 0
    out = (tmp_path / "stdout").read_text()
    m = re.fullmatch(r"\[0:0\] pid (\d+)\n", out)
    assert m is not None, out
    assert int(m.group(1)) != marun.pid
    assert result(tmp_path)["processes"][0]["pids"] == [int(m.group(1))]


def test_the_executor_execs_a_hand_built_lone_plan(tmp_path: Path) -> None:
    res = run_plan(tmp_path, [proc(tmp_path, "only", "*=pid")], worker_env(tmp_path), True)
    assert res.returncode == 0
    assert res.stdout.startswith("pid ")


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--console-ranks", "0,x y"], {}, "console_ranks='0,x y'"),
        (["--console-ranks", "3-1"], {}, "console_ranks='3-1'"),
        (["--max-restarts", "-1"], {}, "--max-restarts='-1'"),
        (["--recovery-restarts", "-1"], {}, "--recovery-restarts='-1'"),
        (["--fatal-exit-codes", "0"], {}, "--fatal-exit-codes"),
        ([], {"MARUN_GRACE_PERIOD": "-5"}, "MARUN_GRACE_PERIOD='-5'"),
        ([], {"MARUN_GRACE_PERIOD": "soon"}, "MARUN_GRACE_PERIOD='soon'"),
    ],
)
def test_bad_supervision_settings_are_one_line_and_start_nothing(
    tmp_path: Path, args: list[str], env: dict[str, str], needle: str
) -> None:
    res = run_marun(pytorch_args(2, ["*=ok"], *args), env=worker_env(tmp_path, **env), cwd=tmp_path)
    assert res.returncode == 2
    assert needle in res.stderr
    assert res.stderr.count("\n") == 1
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "marun_logs").exists()


def test_plan_accepts_the_supervision_options_too(tmp_path: Path) -> None:
    args = pytorch_args(2, ["*=ok"], "--console-ranks", "0", "--grace-period", "5")
    res = run_marun(["plan", "--format", "json", *args[1:]], env=worker_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["nodes"][0]["processes"]) == 2


def test_a_log_directory_that_cannot_be_made_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file, not a directory")
    args = pytorch_args(2, ["*=ok"], "--log-dir", "blocker/logs")
    res = run_marun(args, env=worker_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 2
    assert "log file=" in res.stderr
    assert res.stderr.count("\n") == 1
    assert not list(tmp_path.glob("ready.*"))

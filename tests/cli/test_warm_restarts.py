"""Warm restarts (`--preload`, docs/warm-restarts.md) with the real command and real processes:
what a script started in a spare sees against a cold start of the same round, a spare that
died, failed its import or is not ready (a cold start, one line), and a stop signal while the
spares wait (nothing left).

The jobs are `marun run --standalone --nproc-per-node 2 --max-restarts 1`: round 0 waits for
the test's `go` file, then rank 1 exits 1; round 1 runs and ends 0. A spare's readiness is
read from marun's events (`warm_spare_ready`), so every step waits for a fact, never for a time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import clean_env, free_port

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_supervisor import alive, wait_until

# What a script sees, dumped as JSON per rank and round (the pid left out: it differs).
PROBE = r"""
import json, os, signal, stat, sys
import probe_mod
rank, rnd = os.environ["RANK"], os.environ["MARUN_RESTART_COUNT"]
def kind(fd):
    return stat.S_IFMT(os.fstat(fd).st_mode)
seen = {
    "argv": sys.argv,
    "name": __name__,
    "file": __file__,
    "main_is_this": sys.modules["__main__"].__dict__ is globals(),
    "main_keys": sorted(globals()),
    "loader": type(__loader__).__name__,
    "spec": None if __spec__ is None else [__spec__.name, __spec__.origin,
                                           type(__spec__.loader).__name__],
    "path0": sys.path[0],
    "cwd": os.getcwd(),
    "env": dict(os.environ),
    "env_at_import": probe_mod.ENV,
    "signals": {s.name: str(signal.getsignal(s)) for s in signal.valid_signals()
                if isinstance(s, signal.Signals) and s not in (signal.SIGKILL, signal.SIGSTOP)},
    "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "pgid_is_pid": os.getpgid(0) == os.getpid(),
    "sid_is_pid": os.getsid(0) == os.getpid(),
    "stdin": kind(0), "stdout": kind(1), "stderr": kind(2),
    "same_out_err": os.path.samestat(os.fstat(1), os.fstat(2)),
    "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "policy": os.sched_getscheduler(0),
}
with open(os.path.join(os.environ["W_DIR"], f"seen.{rank}.{rnd}.json"), "w") as f:
    json.dump(seen, f)
print(f"rank {rank} round {rnd} ok", flush=True)
if rnd == "0":
    while not os.path.exists(os.path.join(os.environ["W_DIR"], "go")):
        import time; time.sleep(0.05)
    if rank == "1":
        sys.exit(1)
    import time; time.sleep(600)
"""
# The preloaded module (it stands for torch): it keeps the environment it was imported with.
PROBE_MOD = "import os\nENV = dict(os.environ)\n"
ROUND_VARS = ("MARUN_RESTART_COUNT", "MARUN_MAX_RESTARTS", "TORCHELASTIC_RESTART_COUNT",
              "TORCHELASTIC_MAX_RESTARTS", "MASTER_PORT")  # fmt: skip


def _setup(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "probe.py").write_text(PROBE)
    (work / "probe_mod.py").write_text(PROBE_MOD)


def _start(work: Path, port: int, *options: str, entry: str = "path") -> subprocess.Popen[str]:
    script = ["probe.py"] if entry == "path" else ["-m", "probe"]
    argv = [sys.executable, "-m", "marun", "run", "--standalone", "--nproc-per-node", "2",
            "--master-port", str(port), "--max-restarts", "1", "--grace-period", "5", *options,
            "--", *script, "x", "--flag"]  # fmt: skip
    env = clean_env({"W_DIR": str(work), "MARUN_QUICK_FAILURE": "0"})
    with open(work / "stdout", "w") as out, open(work / "stderr", "w") as err:
        return subprocess.Popen(argv, cwd=work, env=env, stdout=out, stderr=err, text=True)


def _events(work: Path, name: str) -> list[dict[str, str]]:
    path = work / "marun_logs" / "marun-events.log"
    text = path.read_text() if path.exists() else ""
    return [
        dict(re.findall(r"(\w+)=(\S+)", line)) for line in text.splitlines() if f" {name} " in line
    ]


def _finish(marun: subprocess.Popen[str], work: Path) -> int:
    try:
        return marun.wait(timeout=120)
    finally:
        marun.kill()
        marun.wait()


def _seen(work: Path, rank: int, rnd: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((work / f"seen.{rank}.{rnd}.json").read_text())
    return data


def _job(work: Path, port: int, *options: str, entry: str = "path", spares: int = 0) -> int:
    """One job: round 0 up, `spares` warm_spare_ready events, then `go` (rank 1 fails)."""
    marun = _start(work, port, *options, entry=entry)
    try:
        wait_until(lambda: (work / "seen.1.0.json").exists() and (work / "seen.0.0.json").exists(),
                   "round 0", 60)  # fmt: skip
        wait_until(lambda: len(_events(work, "warm_spare_ready")) >= spares, "the spares", 60)
        (work / "go").write_text("")
    except BaseException:
        marun.kill()
        raise
    return _finish(marun, work)


@pytest.mark.parametrize("entry", ["path", "module"])
def test_a_warm_start_sees_what_a_cold_start_of_the_round_sees(tmp_path: Path, entry: str) -> None:
    """The same job twice in the same directory, cold then with --preload probe_mod: round 1's
    ranks see the same argv, __main__, __file__, sys.path[0], cwd, env, signal dispositions,
    blocked signals, session and group, kinds of stdio and open descriptors; the module was
    imported with the env minus the round's variables."""
    work = tmp_path / "w"
    _setup(work)
    port = free_port()
    assert _job(work, port, entry=entry) == 0, (work / "stderr").read_text()
    cold = {rank: _seen(work, rank, 1) for rank in (0, 1)}
    for path in work.glob("seen.*.json"):
        path.unlink()
    (work / "go").unlink()
    code = _job(work, port, "--preload", "probe_mod", entry=entry, spares=2)
    stderr = (work / "stderr").read_text()
    assert code == 0, stderr
    assert "starts cold" not in stderr, stderr
    started = [e for e in _events(work, "process_started") if e.get("warm") == "spare"]
    assert len(started) == 2, _events(work, "process_started")
    for rank in (0, 1):
        warm = _seen(work, rank, 1)
        at_import = warm.pop("env_at_import")
        cold_import = cold[rank].pop("env_at_import")
        assert warm == cold[rank], rank
        # The cold start imported the module with the round's variables, the spare without.
        for name in ROUND_VARS:
            cold_import.pop(name, None)
            assert name not in at_import, name
        assert at_import == cold_import
    assert warm["argv"][1:] == ["x", "--flag"]
    assert warm["pgid_is_pid"] and warm["sid_is_pid"] and warm["same_out_err"]
    assert warm["env"]["MARUN_RESTART_COUNT"] == "1"
    # Both rounds' output in the rank's log, through the pump as a cold rank's.
    log = (work / "marun_logs" / "rank_0.log").read_text()
    assert "rank 0 round 0 ok" in log and "rank 0 round 1 ok" in log, log
    assert "[0:0] rank 0 round 1 ok" in (work / "stdout").read_text()


def _spare_pids(work: Path) -> list[int]:
    return [int(e["pid"]) for e in _events(work, "warm_spare_started")]


def test_a_spare_that_died_while_waiting_means_a_cold_start(tmp_path: Path) -> None:
    work = tmp_path / "w"
    _setup(work)
    marun = _start(work, free_port(), "--preload", "probe_mod")
    try:
        wait_until(lambda: len(_events(work, "warm_spare_ready")) >= 2, "the spares", 60)
        first = next(e for e in _events(work, "warm_spare_started") if e["process"] == "rank0")
        os.kill(int(first["pid"]), signal.SIGKILL)
        wait_until(lambda: _events(work, "warm_spare_exited"), "the spare's end")
        (work / "go").write_text("")
    except BaseException:
        marun.kill()
        raise
    assert _finish(marun, work) == 0
    stderr = (work / "stderr").read_text()
    assert "marun: rank 0 starts cold: its spare died while waiting (SIGKILL)\n" in stderr, stderr
    assert stderr.count("starts cold") == 1, stderr
    warm = [e["process"] for e in _events(work, "process_started") if e.get("warm") == "spare"]
    assert warm == ["rank1"]
    assert _seen(work, 0, 1)["env"]["MARUN_RESTART_COUNT"] == "1"  # it ran, cold


def test_a_spare_whose_import_failed_means_a_cold_start(tmp_path: Path) -> None:
    work = tmp_path / "w"
    _setup(work)
    marun = _start(work, free_port(), "--preload", "probe_mod,no_such_module_here")
    try:
        failed = lambda: len(_events(work, "warm_spare_unusable")) >= 2  # noqa: E731
        wait_until(failed, "the spares' failure", 60)
        (work / "go").write_text("")
    except BaseException:
        marun.kill()
        raise
    assert _finish(marun, work) == 0
    stderr = (work / "stderr").read_text()
    for rank in (0, 1):
        line = (f"marun: rank {rank} starts cold: its spare could not import probe_mod,"
                "no_such_module_here (ModuleNotFoundError: No module named "
                "'no_such_module_here')\n")  # fmt: skip
        assert line in stderr, stderr
    assert _seen(work, 1, 1)["env"]["MARUN_RESTART_COUNT"] == "1"


def test_a_spare_not_ready_when_its_round_starts_means_a_cold_start(tmp_path: Path) -> None:
    work = tmp_path / "w"
    _setup(work)
    # This module's import never ends before the test lets it (the file `release`).
    (work / "slow_mod.py").write_text(
        "import os, time\n"
        "while not os.path.exists(os.path.join(os.environ['W_DIR'], 'release')):\n"
        "    time.sleep(0.05)\n"
    )
    marun = _start(work, free_port(), "--preload", "slow_mod")
    try:
        wait_until(lambda: len(_events(work, "warm_spare_started")) >= 2, "the spares", 60)
        (work / "go").write_text("")
    except BaseException:
        marun.kill()
        raise
    assert _finish(marun, work) == 0
    stderr = (work / "stderr").read_text()
    for rank in (0, 1):
        assert f"marun: rank {rank} starts cold: its spare is still importing slow_mod\n" in stderr
    # Kept for a next round that never came, then killed with the job's end: nothing left.
    for pid in _spare_pids(work):
        assert not alive(pid), pid


def test_a_stop_signal_while_spares_wait_kills_them_and_marun_exits_143(tmp_path: Path) -> None:
    work = tmp_path / "w"
    _setup(work)
    marun = _start(work, free_port(), "--preload", "probe_mod")
    try:
        wait_until(lambda: len(_events(work, "warm_spare_ready")) >= 2, "the spares", 60)
        spares = _spare_pids(work)
        ranks = [int(e["pid"]) for e in _events(work, "process_started")]
        assert len(spares) == 2 and all(alive(pid) for pid in spares)
        marun.send_signal(signal.SIGTERM)
    except BaseException:
        marun.kill()
        raise
    assert _finish(marun, work) == 128 + signal.SIGTERM
    for pid in (*spares, *ranks):
        assert not alive(pid), pid
    result = json.loads((work / "marun_logs" / "result.json").read_text())
    # The spares are no processes of the job: two ranks, interrupted, no orphans counted.
    assert [p["name"] for p in result["processes"]] == ["rank0", "rank1"]
    assert result["outcome"] == "interrupted"


def test_preload_without_restart_rounds_is_refused_before_anything_starts(tmp_path: Path) -> None:
    work = tmp_path / "w"
    _setup(work)
    argv = [sys.executable, "-m", "marun", "run", "--standalone", "--nproc-per-node", "2",
            "--preload", "probe_mod", "--", "probe.py"]  # fmt: skip
    done = subprocess.run(argv, check=False, cwd=work, env=clean_env({"W_DIR": str(work)}),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and "preload='probe_mod': expected restart rounds" in (
        done.stderr
    ), done.stderr
    assert not list(work.glob("seen.*"))

"""marun.runtime.reaper's two questions about the processes under a marun, answered without a
walk of /proc where the kernel can say it directly: which of marun's process groups still have a
member (signal 0 to each), and which processes are marun's children (each thread's list of
children). Each answer is checked against the walk of /proc it replaced, on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from marun.runtime import reaper

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc"),
    pytest.mark.starts_processes("sleep: what the kernel says of real processes is the subject"),
]


def _walked_children() -> set[tuple[int, int]]:
    me = os.getpid()
    return {(pid, pgid) for pid, ppid, pgid in reaper._proc_stats() if ppid == me}


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_a_group_is_live_while_it_has_a_member_a_zombie_included() -> None:
    child = _sleeper()
    try:
        assert reaper.live_groups([child.pid]) == {child.pid}
        os.kill(child.pid, signal.SIGKILL)
        # Killed, not yet reaped: a zombie, which /proc lists and the group still holds.
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert reaper.live_groups([child.pid]) == {child.pid}
        assert child.pid in {pgid for _, _, pgid in reaper._proc_stats()}
    finally:
        child.kill()
        child.wait()
    assert reaper.live_groups([child.pid]) == set()


def test_groups_marun_did_not_make_are_never_live() -> None:
    # 0 would be marun's own group to killpg and 1 init's; a free number has no member.
    free = max(int(p) for p in os.listdir("/proc") if p.isdigit()) + 100_000
    assert reaper.live_groups([0, 1, free]) == set()


def test_children_are_those_the_walk_of_proc_finds_a_thread_s_included() -> None:
    started: list[subprocess.Popen[bytes]] = [_sleeper(), _sleeper()]
    in_thread = threading.Thread(target=lambda: started.append(_sleeper()))
    in_thread.start()
    in_thread.join()
    try:
        found = set(reaper.direct_children())
        assert {p.pid for p in started} <= {pid for pid, _ in found}
        assert found == _walked_children()
        assert all(pgid == pid for pid, pgid in found if pid in {p.pid for p in started})
    finally:
        for p in started:
            p.kill()
            p.wait()


def test_without_the_kernel_s_lists_the_walk_of_proc_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    child = _sleeper()
    try:
        monkeypatch.setattr(reaper, "_listed_children", lambda: None)
        found = set(reaper.direct_children())
        assert (child.pid, child.pid) in found
        assert found == _walked_children()
    finally:
        child.kill()
        child.wait()


ADOPTS = """
import os, subprocess, sys, time
from marun.runtime import reaper
assert reaper.become_subreaper()
# sh starts a daemon in its own session and exits: the daemon is orphaned, and adopted here.
out = subprocess.run(["sh", "-c", "setsid sleep 60 > /dev/null 2>&1 & echo $!"],
                     capture_output=True, text=True, check=True).stdout
orphan = int(out)
while reaper._stat_of(orphan) != (os.getpid(), orphan):  # adopted, and in its own session
    time.sleep(0.01)
found = reaper.direct_children()
me = os.getpid()
walked = [(pid, pgid) for pid, ppid, pgid in reaper._proc_stats() if ppid == me]
os.kill(orphan, 9)
os.waitpid(orphan, 0)
print(orphan in [pid for pid, _ in found], sorted(found) == sorted(walked))
"""


def test_an_adopted_orphan_is_a_child(tmp_path: Path) -> None:
    src = Path(reaper.__file__).parents[2]
    done = subprocess.run(
        [sys.executable, "-c", ADOPTS],
        env={**os.environ, "PYTHONPATH": str(src)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"], done.stdout + done.stderr

"""scripts/apt-get.sh (bootstrap.sh's and images.sh's apt-get) waits for a lock that another
apt or dpkg run holds, where plain apt-get exits 100 at once: a fresh machine's first minutes
often have an unattended upgrade or a second install script running."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.e2e
LOCKS = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock")


def _hold(paths: tuple[str, ...], release: threading.Event) -> threading.Thread:
    """Hold apt's fcntl locks (as apt and dpkg take them) until `release` is set."""
    fds = []
    for path in paths:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fds.append(fd)

    def wait_then_release() -> None:
        release.wait()
        for fd in fds:
            os.close(fd)

    thread = threading.Thread(target=wait_then_release, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def apt_as_root() -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None or not Path(LOCKS[0]).exists():
        pytest.skip("needs root and Debian's apt")


def _apt_check(argv0: list[str]) -> subprocess.CompletedProcess[str]:
    # `apt-get check` takes dpkg's locks and changes nothing.
    return subprocess.run(
        [*argv0, "check", "-qq"], capture_output=True, text=True, timeout=120, check=False
    )


def test_plain_apt_get_fails_at_once_on_a_held_lock(apt_as_root: None) -> None:
    release = threading.Event()
    holder = _hold(LOCKS, release)
    try:
        res = _apt_check(["apt-get"])
    finally:
        release.set()
        holder.join()
    assert res.returncode == 100 and "lock" in res.stderr


def test_the_wrapper_waits_for_the_lock_and_succeeds(apt_as_root: None) -> None:
    release = threading.Event()
    holder = _hold(LOCKS, release)
    # Release the lock only once the wrapper has been refused at least once.
    proc = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "apt-get.sh"), "check", "-qq"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert "holds a lock; waiting" in first
    finally:
        release.set()
        holder.join()
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 0, first + rest

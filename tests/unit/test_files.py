"""marun._files: the one atomic write, the one private directory, the one executable lookup."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from marun._files import atomic_write, find_executable, private_dir, write_all
from marun.errors import InputError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_atomic_write_creates_with_its_final_mode(tmp_path: Path) -> None:
    old = os.umask(0o077)  # a umask that would take bits off a 0644 file
    try:
        atomic_write(str(tmp_path / "hostfile"), "a slots=1\n", 0o644)
    finally:
        os.umask(old)
    assert (tmp_path / "hostfile").read_text() == "a slots=1\n"
    assert _mode(tmp_path / "hostfile") == 0o644
    atomic_write(str(tmp_path / "status"), b"{}", fsync=True)
    assert _mode(tmp_path / "status") == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostfile", "status"]


def test_atomic_write_replaces_and_never_follows_a_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "f").symlink_to(target)
    atomic_write(str(tmp_path / "f"), "new")
    assert target.read_text() == "keep"  # the link was replaced, not written through
    assert (tmp_path / "f").read_text() == "new" and not (tmp_path / "f").is_symlink()


def test_atomic_write_leaves_no_temporary_file_on_failure(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError):
        atomic_write(str(tmp_path / "dir"), "x")  # a directory cannot be replaced by a file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


def test_write_all_through_a_pipe() -> None:
    import threading

    read_end, write_end = os.pipe()
    data = os.urandom(1 << 20)  # far more than a pipe holds: the writer writes in parts
    got = bytearray()

    def read() -> None:  # the reader, in a thread: a unit test starts no process
        while chunk := os.read(read_end, 1 << 16):
            got.extend(chunk)
        os.close(read_end)

    reader = threading.Thread(target=read)
    reader.start()
    write_all(write_end, data)
    os.close(write_end)
    reader.join(timeout=60)
    assert not reader.is_alive() and bytes(got) == data


def test_private_dir(tmp_path: Path) -> None:
    fresh = tmp_path / "a" / "b"
    assert private_dir(str(fresh)) == str(fresh)
    assert _mode(fresh) == _mode(tmp_path / "a") == 0o700
    opened = tmp_path / "opened"
    opened.mkdir(mode=0o755)
    private_dir(str(opened))
    assert _mode(opened) == 0o700
    shared = tmp_path / "logs"
    shared.mkdir(mode=0o755)
    private_dir(str(shared / "x"), strict=False)
    assert (_mode(shared), _mode(shared / "x")) == (0o755, 0o700)


def test_private_dir_refuses_a_link_and_another_owner(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(InputError, match="not a symbolic link"):
        private_dir(str(tmp_path / "link"))
    if os.getuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        os.chown(foreign, 1000, 1000)
        with pytest.raises(InputError, match="owned by uid 0"):
            private_dir(str(foreign))


def test_find_executable(tmp_path: Path) -> None:
    assert find_executable("sh") is not None
    assert find_executable("no-such-tool-xyz") is None
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    assert find_executable("tool", [str(tmp_path)], "/nonexistent") is None  # not executable
    tool.chmod(0o755)
    assert find_executable("tool", [str(tmp_path)], "/nonexistent") == str(tool)
    assert find_executable("tool", (), str(tmp_path)) == str(tool)
    assert find_executable(Path(sys.executable).name, (), str(Path(sys.executable).parent))

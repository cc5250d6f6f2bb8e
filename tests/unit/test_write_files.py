"""The plan's files as `marun run` writes them: whole or not at all, with their final mode from the
first byte, never through a planted symlink; a file that cannot be written is one line naming
the path and why (exit 2: nothing has started yet)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from marun._files import atomic_write
from marun.errors import InputError
from marun.exit_codes import BAD_INPUT_EXIT
from marun.plan.launch_plan import FileSpec
from marun.runtime.execute import write_files


def test_files_get_their_content_and_exact_mode(tmp_path: Path) -> None:
    old = os.umask(0o077)  # the mode is the plan's, whatever the umask
    try:
        write_files(
            (
                FileSpec(str(tmp_path / "new" / "hostfile"), "h0 slots=2\n", 0o644),
                FileSpec(str(tmp_path / "key"), "secret\n", 0o600),
            )
        )
    finally:
        os.umask(old)
    assert (tmp_path / "new" / "hostfile").read_text() == "h0 slots=2\n"
    assert stat.S_IMODE((tmp_path / "new" / "hostfile").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key", "new"]  # no temporary left


def test_an_existing_file_is_replaced_with_the_new_mode(tmp_path: Path) -> None:
    path = tmp_path / "sshd_config"
    path.write_text("old, longer than the new content\n")
    path.chmod(0o666)
    atomic_write(str(path), b"new\n", 0o600)
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_planted_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("keep me\n")
    link = tmp_path / "hostfile"
    link.symlink_to(target)
    write_files((FileSpec(str(link), "h0 slots=1\n", 0o644),))
    assert target.read_text() == "keep me\n"
    assert not link.is_symlink()
    assert link.read_text() == "h0 slots=1\n"


def test_a_symlink_at_the_temporary_name_is_never_written_through(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("keep me\n")
    (tmp_path / f".hostfile.{os.getpid()}.tmp").symlink_to(target)
    atomic_write(str(tmp_path / "hostfile"), "x", 0o644)
    assert target.read_text() == "keep me\n"
    assert (tmp_path / "hostfile").read_text() == "x"


def test_an_unwritable_path_is_one_line_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    path = blocker / "run" / "hostfile"
    with pytest.raises(InputError) as caught:
        write_files((FileSpec(str(path), "x", 0o644),))
    message = str(caught.value)
    assert caught.value.exit_code == BAD_INPUT_EXIT
    assert message.startswith(f"cannot write {path}: Not a directory")
    assert "\n" not in message


@pytest.mark.skipif(os.getuid() != 0, reason="making a directory another user owns needs root")
def test_a_directory_another_user_made_first_is_refused(tmp_path: Path) -> None:
    """The run directory's path is predictable: one that someone else created first (and could
    swap files in) is bad input, not a place to write the sshd config."""
    planted = tmp_path / "marun-0" / "job"
    planted.mkdir(parents=True)
    os.chown(planted, 65534, 65534)
    with pytest.raises(InputError, match="owned by uid 0"):
        write_files((FileSpec(str(planted / "sshd_config"), "x", 0o600),))
    assert not (planted / "sshd_config").exists()


def test_the_files_directory_is_made_private(tmp_path: Path) -> None:
    write_files((FileSpec(str(tmp_path / "run" / "job" / "hostfile"), "h\n", 0o644),))
    assert stat.S_IMODE((tmp_path / "run" / "job").stat().st_mode) == 0o700

"""Writing files and finding programs, the one way marun does each.

- `atomic_write`: a reader (mpirun reading a hostfile, a user reading result.json or job.json)
  sees the old file or the new one, never half of one; the file is created with its final mode,
  so it is never readable by others even for an instant.
- `write_all`: `os.write` may write less than asked on a pipe; this writes everything.
- `private_dir`: a directory only we can enter (run directory, keys, logs).
- `find_executable`: PATH, then directories where a tool lives but PATH often leaves out
  (`/usr/sbin` for a non-root user on Debian).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable

from marun.errors import bad_value


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: str, data: bytes | str, mode: int = 0o600, fsync: bool = False) -> None:
    """Replace `path` with `data`, created with `mode` (the umask is not applied).

    The temporary file sits in the same directory (a rename across file systems is not atomic),
    is opened with O_EXCL|O_NOFOLLOW (a planted file or link at its name is never written
    through), and is removed when anything fails.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # left by an earlier process of ours with the same pid (a restart)
    fd = os.open(tmp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have taken bits off, or the caller wants more
            write_all(fd, payload)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def private_dir(path: str, strict: bool = True) -> str:
    """Create `path` and its missing parents, each mode 0700, and return it.

    `strict` (marun's own directories: run directory, keys): the directory must be a real
    directory, not a symbolic link, owned by this user; an existing one is made 0700. Otherwise
    (a log directory the user chose, which may be shared or a link) an existing directory is
    used as it is; only the parts marun creates are private.
    """
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)  # the umask may have taken bits off
    if strict:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise bad_value("private directory", path, "a directory, not a symbolic link")
        if st.st_uid != os.getuid():
            raise bad_value(
                "private directory",
                path,
                f"a directory owned by uid {os.getuid()} (owner: {st.st_uid})",
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(path, 0o700)
    return path


def find_executable(
    name: str, extra_dirs: Iterable[str] = (), search_path: str | None = None
) -> str | None:
    """`name` on `search_path` (default $PATH, else the system default), else the first
    executable `<dir>/<name>` of `extra_dirs`; None when there is none."""
    import shutil

    found = shutil.which(name, path=search_path or os.environ.get("PATH") or os.defpath)
    if found:
        return found
    for directory in extra_dirs:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None

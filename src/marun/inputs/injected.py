"""What the platform handed this container, read once into a frozen value.

`read_platform` takes the environment, the command line after `--` and the working directory and
returns a `Platform`. The node variables are read through methods that validate on use, so a mode
fails only on the variables it needs, with one line naming the variable, its value and what was
expected.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping, Sequence

from marun.errors import InputError, bad_value
from marun.inputs.appended_args import AppendedArgs, split_appended
from marun.inputs.numbers import MAX_NODES, MAX_PROCS_PER_NODE, parse_int
from marun.inputs.records import dataclass, field
from marun.inputs.settings import Settings

# The platform's node index, most specific first (the platform's own MPI start script reads them
# in this order; docs/platform-contract.md).
TASK_INDEX_VARS = ("MA_TASK_INDEX", "VC_TASK_INDEX", "VK_TASK_INDEX")
# Volcano's ssh plugin mounts the job's key pair as id_rsa and id_rsa.pub (with authorized_keys
# and config) into the ssh directory: the key's file name, in one place.
SSH_KEY = "id_rsa"
# Volcano's svc plugin lists one host, and counts one, for a task whose pod template sets its own
# `hostname` (every pod would have that name: pkg/controllers/job/plugins/svc/svc.go,
# GenerateHosts). Said wherever a one-host list meets a larger node count.
TEMPLATE_HOSTNAME_HINT = (
    "Volcano's svc plugin lists one host when the task's pod template sets its own hostname: "
    "leave spec.hostname out of the template"
)


def volcano_task_key(task: str) -> str:
    """A task name as Volcano writes it in variables and host files: `-` as `_`."""
    return task.replace("-", "_")


@dataclass(frozen=True)
class Platform:
    env: Mapping[str, str]
    command: tuple[str, ...]  # the user's script and arguments, the platform's appended ones off
    appended: AppendedArgs
    cwd: str
    hostname: str
    python: str
    settings: Settings = field(default_factory=Settings)
    uid: int = 0
    # `marun plan`: nothing is waited for (a name that does not resolve yet becomes a note).
    dry_run: bool = False

    # -- node variables -------------------------------------------------------------------
    def _int_var(self, name: str, default: int | None, minimum: int, maximum: int) -> int:
        raw = self.env.get(name)
        if raw is None or raw == "":
            if default is None:
                raise bad_value(
                    name, raw, f"an integer from {minimum} to {maximum} (it is not set)"
                )
            return default
        return parse_int(name, raw, minimum, maximum)

    def num_hosts(self) -> int:
        """The job's node count (`given_num_hosts`); 1 where the platform states none."""
        given = self.given_num_hosts()
        return given[1] if given is not None else 1

    def given_num_hosts(self) -> tuple[str, int] | None:
        """The node count as the platform states it, and the variable that states it:
        MA_NUM_HOSTS, else VC_<TASK>_NUM (Volcano's svc plugin: the pods of this task); None
        where neither is set. Where both are, they must agree."""
        count_var = f"VC_{volcano_task_key(self.task_name()).upper()}_NUM"
        ma = self.env.get("MA_NUM_HOSTS", "")
        vc = self.env.get(count_var, "")
        ma_count = self._int_var("MA_NUM_HOSTS", None, 1, MAX_NODES) if ma != "" else None
        vc_count = self._int_var(count_var, None, 1, MAX_NODES) if vc != "" else None
        if ma_count is not None and vc_count is not None and ma_count != vc_count:
            why = f"; {TEMPLATE_HOSTNAME_HINT}" if vc_count == 1 else ""
            raise InputError(
                f"{count_var}={vc!r} but MA_NUM_HOSTS={ma!r}: expected the same node count "
                f"(Volcano's svc plugin counts the task's pods){why}"
            )
        if ma_count is not None:
            return "MA_NUM_HOSTS", ma_count
        if vc_count is not None:
            return count_var, vc_count
        return None

    def given_task_index(self) -> tuple[str, int] | None:
        """The platform's own index of this container (the first of TASK_INDEX_VARS that is
        set) and the variable's name; None where none is set. Checked like every number."""
        for name in TASK_INDEX_VARS:
            if self.env.get(name, "") != "":
                return name, self._int_var(name, None, 0, MAX_NODES - 1)
        return None

    def node_index(self) -> int:
        """This node's 0-based index; 0 on a single-node job that sets none."""
        count_var, hosts = self.given_num_hosts() or ("MA_NUM_HOSTS", 1)
        for name in TASK_INDEX_VARS:
            if self.env.get(name, "") != "":
                index = self._int_var(name, None, 0, MAX_NODES - 1)
                if index >= hosts:
                    # VC_<TASK>_NUM=1 on a task of several pods: a template's own hostname.
                    why = f" ({TEMPLATE_HOSTNAME_HINT})" if count_var != "MA_NUM_HOSTS" else ""
                    raise bad_value(
                        name, self.env[name], f"an index below {count_var}={hosts}{why}"
                    )
                return index
        if hosts > 1:
            raise InputError(
                f"{count_var}={hosts} but none of {', '.join(TASK_INDEX_VARS)} is set: "
                "expected this node's index"
            )
        return 0

    def devices_per_node(self) -> int:
        """Processes per node: --nproc-per-node, else MA_NUM_GPUS (0 on a CPU job means 1)."""
        if self.settings.nproc_per_node is not None:
            nproc = self.settings.nproc_per_node
            return parse_int("--nproc-per-node", nproc, 1, MAX_PROCS_PER_NODE)
        return max(1, self._int_var("MA_NUM_GPUS", 1, 0, MAX_PROCS_PER_NODE))

    def job_name(self) -> str | None:
        return self.env.get("MA_VJ_NAME") or None

    def task_name(self) -> str:
        return self.env.get("MA_TASK_NAME") or "worker"

    def is_root(self) -> bool:
        return self.uid == 0

    def run_dir(self) -> str:
        """Where marun writes a run's generated files: the run_dir setting (relative to the
        working directory), else $TMPDIR/marun-<uid>. The one place this is decided."""
        default = os.path.join(self.env.get("TMPDIR") or "/tmp", f"marun-{self.uid}")
        return os.path.normpath(os.path.join(self.cwd, self.settings.run_dir or default))

    def home(self) -> str:
        """This user's home: $HOME, else the passwd entry's (ssh's own `~`), else `/`."""
        if self.env.get("HOME"):
            return self.env["HOME"]
        entry = self.passwd()
        return entry[1] if entry is not None else "/"

    def passwd(self) -> tuple[str, str] | None:
        """(login name, home) of `uid` by the passwd database; None where it has no entry."""
        import pwd

        try:
            entry = pwd.getpwuid(self.uid)
        except KeyError:
            return None
        return entry.pw_name, entry.pw_dir

    def ssh_dir(self) -> str:
        """Where the platform mounts the job's ssh key (Volcano's ssh secret): the ssh_dir
        setting (relative to the working directory), else ~/.ssh. The one place this is decided
        (the job secret's key, MPI's sshd and mpirun, doctor's key checks read it from here)."""
        if self.settings.ssh_dir:
            return os.path.normpath(os.path.join(self.cwd, self.settings.ssh_dir))
        return os.path.join(self.home(), ".ssh")

    def ssh_key(self) -> str:
        """The platform's private key (SSH_KEY in `ssh_dir`), whether it is there or not."""
        return os.path.join(self.ssh_dir(), SSH_KEY)


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def resolve_command(command: Sequence[str], cwd: str, python: str) -> tuple[str, ...]:
    """The argv that starts the user's script: a `.py` file runs under marun's own interpreter,
    by absolute path (so it survives a per-device working directory); anything else is a command
    found on PATH or by path."""
    if not command:
        raise InputError("no script given: expected `marun run [OPTIONS] -- SCRIPT [ARGS...]`")
    script = command[0]
    if script == "-m":
        # `-m MODULE`, as python and torchrun take it: marun's interpreter runs the module, from
        # the working directory (python -m puts it first on sys.path).
        module = command[1] if len(command) > 1 else ""
        if not _MODULE.fullmatch(module):
            raise bad_value("-m", module, "a module name after -m (pkg.module, as python -m)")
        return (python, "-m", *command[1:])
    if script.endswith(".py"):
        # os.path, not pathlib (10 ms of imports on the path to exec); os.path.isfile: a name
        # too long for the system is "no such file", where Path.is_file raises.
        path = os.path.join(cwd, script)
        if not os.path.isfile(path):
            raise bad_value("SCRIPT", script, f"an existing Python file (looked in {cwd})")
        return (python, os.path.realpath(path), *command[1:])
    if os.sep in script:
        path = os.path.join(cwd, script)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise bad_value("SCRIPT", script, "an existing executable file")
        return (os.path.realpath(path), *command[1:])
    from marun._files import find_executable

    if find_executable(script) is None:
        raise bad_value("SCRIPT", script, "a command on PATH or a .py file")
    return tuple(command)


def read_platform(
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    settings: Settings | None = None,
) -> Platform:
    env = dict(os.environ if env is None else env)
    cwd = cwd or os.getcwd()
    user_words, appended = split_appended(command)
    return Platform(
        env=env,
        command=user_words,
        appended=appended,
        cwd=cwd,
        hostname=socket.gethostname(),
        python=sys.executable,
        settings=settings or Settings(),
        uid=os.getuid(),
    )

"""marun's images and start files, for real: `scripts/images.sh` builds docker/<engine>/Dockerfile
with podman (no Docker engine or registry here: the base is a debootstrap rootfs tagged with each
Dockerfile's default BASE_IMAGE, nothing is downloaded inside a build), and the tests run the
images as the platform would: its variables, its appended arguments, its uid 1000, `podman stop`
for SIGTERM, and two containers in network namespaces of their own for an MPI job.

Needs root (debootstrap, rootful podman; scripts/images.sh installs podman from Debian). The
first build takes a few minutes (the rootfs, cached in .cache/images/), later ones seconds.
Every container a test starts is removed at its end.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO, clean_env

pytestmark = pytest.mark.e2e

IMAGES_SH = REPO / "scripts" / "images.sh"
EXAMPLES = REPO / "examples"
RANKTABLES = REPO / "tests" / "data" / "ranktables"
START_FILES = REPO / "entrypoints"
BUILD_TIMEOUT = 900  # seconds; a hang guard only (a first build takes a few minutes)
DEADLINE = 120  # seconds for a container's job; a hang guard only
_NAMES = itertools.count()

# What every probe prints: how the process sits in its container.
PROBE = """\
import json, os, sys
with open("/proc/1/cmdline", "rb") as fh:
    pid1 = [w.decode() for w in fh.read().split(b"\\0") if w]
print("PROBE " + json.dumps({
    "pid": os.getpid(), "ppid": os.getppid(), "uid": os.getuid(), "gid": os.getgid(),
    "home": os.environ.get("HOME"), "rank": os.environ.get("RANK"), "pid1": pid1,
    "argv": sys.argv[1:], "python": sys.executable,
}), flush=True)
"""

# A rank that sleeps until it is stopped, with no signal handler of its own: as PID 1 of a
# container it would ignore SIGTERM (PID 1 gets no default actions).
SLEEPER = """\
import os, time
print("rank", os.environ.get("RANK"), "ready", flush=True)
time.sleep(600)
"""


def why_not() -> str | None:
    """Why the images cannot be built and run here, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (debootstrap and rootful podman; run scripts/images.sh as root)"
    if shutil.which("podman") is None and shutil.which("apt-get") is None:
        return "podman is not installed and there is no apt-get to install it"
    return None


@dataclass
class Podman:
    """podman on scripts/images.sh's storage and settings; removes the containers it started."""

    started: list[str] = field(default_factory=list)

    def __call__(
        self, *args: str, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["bash", str(IMAGES_SH), "podman", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: exit {proc.returncode}\n{proc.stderr}")
        return proc

    def start(
        self,
        image: str,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        volumes: Mapping[Path, str] | None = None,
        options: Sequence[str] = ("--network=none",),
    ) -> str:
        """`podman run -d`: the container's name."""
        name = f"marun-test-{os.getpid()}-{next(_NAMES)}"
        words = ["run", "-d", "--name", name, *options]
        for key, value in (env or {}).items():
            words += ["-e", f"{key}={value}"]
        for host, target in (volumes or {}).items():
            words += ["-v", f"{host}:{target}"]
        self.started.append(name)
        self(*words, image, *args)
        return name

    def wait(self, name: str, timeout: float = DEADLINE) -> int:
        return int(self("wait", name, timeout=timeout).stdout.split()[0])

    def logs(self, name: str) -> str:
        proc = self("logs", name)
        return proc.stdout + proc.stderr

    def run(
        self,
        image: str,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        volumes: Mapping[Path, str] | None = None,
        options: Sequence[str] = ("--network=none",),
    ) -> tuple[int, str]:
        """Start a container and wait for it: its exit code and its output."""
        name = self.start(image, args, env, volumes, options)
        return self.wait(name), self.logs(name)

    def remove_all(self) -> None:
        if self.started:
            self("rm", "-f", "-t", "0", *self.started, check=False)
            self.started.clear()


@pytest.fixture(scope="module")
def built() -> None:
    """Every engine's image, built (or found up to date) by scripts/images.sh."""
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    proc = subprocess.run(
        ["bash", str(IMAGES_SH)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, f"scripts/images.sh failed:\n{proc.stdout[-4000:]}{proc.stderr}"


@pytest.fixture
def podman(built: None) -> Iterator[Podman]:
    pm = Podman()
    try:
        yield pm
    finally:
        pm.remove_all()


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    """A directory the container's ma-user can read (mounted at /job): the probe scripts."""
    tmp_path.chmod(0o755)
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    return tmp_path


def probes(output: str) -> list[dict[str, object]]:
    return [
        json.loads(line.split("PROBE ", 1)[1]) for line in output.splitlines() if "PROBE " in line
    ]


# -- what each engine's image and start file are ----------------------------------------------


@dataclass(frozen=True)
class Engine:
    image: str  # docker/<image>/Dockerfile
    start_file: str  # entrypoints/<start_file>
    mode: str
    entrypoint_extra: tuple[str, ...]  # after `marun run --mode MODE` in the ENTRYPOINT
    env: Mapping[str, str]  # what the platform sets on the node
    appended: tuple[str, ...]  # what the platform appends after the user's arguments
    expect: str  # in examples/hello.py's line: the mode's own variables
    start_file_env: Mapping[str, str] = field(default_factory=dict)  # per-device start only


ENGINES = (
    Engine(
        "pytorch",
        "pytorch-gpu",
        "pytorch",
        (),
        {"MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "2"},
        ("--init_method", "tcp://127.0.0.1:29500"),
        "MASTER_ADDR=127.0.0.1 MASTER_PORT=29500",
    ),
    Engine(
        "tensorflow",
        "tensorflow-ps",
        "tensorflow",
        (),
        {"MA_NUM_HOSTS": "1", "MA_TASK_NAME": "worker", "VC_TASK_INDEX": "0"},
        (
            *("--task_index", "0", "--ps_hosts", "[job-ps-0.job:5000]"),
            *("--worker_hosts", "[job-worker-0.job:5001]", "--job_name", "worker"),
        ),
        'TF_CONFIG={"cluster":{"ps":["job-ps-0.job:5000"],"worker":["job-worker-0.job:5001"]}',
    ),
    Engine(
        "mindspore",
        "mindspore-cluster",
        "mindspore",
        (),
        {"MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "1"},
        (),
        "MS_ROLE=MS_WORKER MS_NODE_ID=0 MS_WORKER_NUM=1",
    ),
    Engine(
        "ascend",
        "ascend",
        "ascend",
        ("--per-node",),
        {
            "MA_NUM_HOSTS": "2",
            "VC_TASK_INDEX": "1",
            "RANK_TABLE_FILE": "/ranktables/server_list_2x2.json",
        },
        (),
        "RANK_ID=2 RANK_SIZE=4 DEVICE_ID=0",
        # The Ascend-Powered-Engine starts the start file once per device, with these.
        {"RANK_ID": "2", "RANK_SIZE": "4", "ASCEND_DEVICE_ID": "0"},
    ),
    Engine(
        "mpi",
        "mpi",
        "mpi",
        (),
        {"MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "1"},
        (),
        "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1",
    ),
)


def test_mpi_image_has_openmpi_sshd_and_mpi4py(podman: Podman) -> None:
    code, out = podman.run(
        "localhost/marun-mpi",
        [
            "-c",
            "command -v mpirun && command -v ssh && test -x /usr/sbin/sshd && ls /etc/ssh && "
            'python3 -c "from mpi4py import MPI; print(MPI.Get_library_version()[:14])"',
        ],
        options=("--network=none", "--entrypoint", "sh"),
    )
    assert code == 0, out
    assert "/usr/bin/mpirun" in out and "/usr/bin/ssh" in out
    assert "Open MPI" in out
    # No host key baked into the image: every container of it would share it.
    assert "ssh_host_" not in out


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.image)
def test_image_runs_as_ma_user_with_marun_as_entrypoint(podman: Podman, engine: Engine) -> None:
    config = json.loads(
        podman(
            "image", "inspect", "--format", "{{json .Config}}", f"localhost/marun-{engine.image}"
        ).stdout
    )
    assert config["User"] == "1000:100"
    assert config["WorkingDir"] == "/home/ma-user"
    assert config["Entrypoint"] == ["marun", "run", "--mode", engine.mode, *engine.entrypoint_extra]
    code, out = podman.run(
        f"localhost/marun-{engine.image}",
        ["-c", "id; ls /opt/marun/entrypoints"],
        options=("--network=none", "--entrypoint", "sh"),
    )
    assert code == 0, out
    assert "uid=1000(ma-user) gid=100(ma-group)" in out
    start_files = sorted(p.name for p in START_FILES.iterdir() if p.suffix != ".md")
    assert sorted(out.split()[-len(start_files) :]) == start_files


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.image)
def test_image_runs_a_job_as_the_platform_starts_it(podman: Podman, engine: Engine) -> None:
    """The image's ENTRYPOINT with only the platform's variables and appended arguments: the
    start file runs in the mode's shape and the container exits with the job's status."""
    if engine.mode == "mpi":
        pytest.importorskip("marun.mpi.leader", reason="MPI mode's runtime has not landed")
    code, out = podman.run(
        f"localhost/marun-{engine.image}",
        ["/examples/hello.py", *engine.appended],
        # One node of the job, alone: no other node will arrive (coordination: test_job.py).
        env={**engine.env, "MARUN_JOB_PORT": "0"},
        volumes={EXAMPLES: "/examples:ro", RANKTABLES: "/ranktables:ro"},
    )
    assert code == 0, out
    assert engine.expect in out, out


# A one-node MPI job starts sshd: its start file runs in the image (the test above).
@pytest.mark.parametrize(
    "engine", [e for e in ENGINES if e.mode != "mpi"], ids=lambda e: e.start_file
)
def test_start_file_runs_marun_in_its_mode(tmp_path: Path, engine: Engine) -> None:
    """Each start file on this machine, as the platform starts it: `python <start file> <the
    user's script and arguments> <what the platform appends>`."""
    env = {k: v.replace("/ranktables", str(RANKTABLES)) for k, v in engine.env.items()}
    proc = subprocess.run(
        [
            sys.executable,
            str(START_FILES / engine.start_file),
            str(EXAMPLES / "hello.py"),
            *engine.appended,
        ],
        # One node of the job, alone: no other node will arrive (coordination: test_job.py).
        env=clean_env({**env, **engine.start_file_env, "MARUN_JOB_PORT": "0"}),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert engine.expect.replace("/ranktables", str(RANKTABLES)) in proc.stdout, proc.stdout


def test_start_file_with_script_set_takes_only_the_platform_arguments(tmp_path: Path) -> None:
    """As the start file picked in the platform's UI: a copy beside the script with SCRIPT set,
    started with hyperparameters and the appended arguments only."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    text = (START_FILES / "pytorch-gpu").read_text()
    assert 'SCRIPT = ""' in text
    (code / "start.py").write_text(text.replace('SCRIPT = ""', 'SCRIPT = "probe.py"', 1))
    proc = subprocess.run(
        [
            sys.executable,
            str(code / "start.py"),
            "--lr=0.1",
            "--init_method",
            "tcp://127.0.0.1:29500",
        ],
        env=clean_env({"MA_NUM_GPUS": "1"}),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (probe,) = probes(proc.stdout)
    assert probe["argv"] == ["--lr=0.1"]  # the appended arguments went to marun, not the script
    assert probe["python"] == sys.executable  # the interpreter that ran the start file


def test_marun_is_pid_1_as_ma_user(podman: Podman, job_dir: Path) -> None:
    code, out = podman.run(
        "localhost/marun-pytorch",
        ["/job/probe.py", "--lr", "0.1", "--init_method", "tcp://127.0.0.1:29500"],
        env={"MA_NUM_GPUS": "2"},
        volumes={job_dir: "/job:ro"},
    )
    assert code == 0, out
    ranks = probes(out)
    assert sorted(str(p["rank"]) for p in ranks) == ["0", "1"], out
    for probe in ranks:
        assert probe["ppid"] == 1, probe  # marun started it, as PID 1
        assert probe["pid1"][1:5] == ["/opt/python/bin/marun", "run", "--mode", "pytorch"], probe
        assert (probe["uid"], probe["gid"], probe["home"]) == (1000, 100, "/home/ma-user")
        assert probe["argv"] == ["--lr", "0.1"]


def test_start_file_in_the_image_execs_marun_as_pid_1(podman: Podman, job_dir: Path) -> None:
    """The platform starting the image's start file with its own Python: the start file becomes
    marun (same PID 1) and passes every argument on."""
    code, out = podman.run(
        "localhost/marun-pytorch",
        [
            "/opt/marun/entrypoints/pytorch-gpu",
            *("/job/probe.py", "--lr", "0.1", "--init_method", "tcp://127.0.0.1:29500"),
        ],
        env={"MA_NUM_GPUS": "2"},
        volumes={job_dir: "/job:ro"},
        options=("--network=none", "--entrypoint", "python3"),
    )
    assert code == 0, out
    ranks = probes(out)
    assert len(ranks) == 2, out
    for probe in ranks:
        assert probe["ppid"] == 1
        assert probe["pid1"][1:6] == ["-m", "marun", "run", "--mode", "pytorch"], probe
        assert probe["pid1"][6:] == [
            *("/job/probe.py", "--lr", "0.1", "--init_method", "tcp://127.0.0.1:29500")
        ]
        assert probe["argv"] == ["--lr", "0.1"]


@pytest.mark.parametrize("gpus", ["2", "1"], ids=["two-ranks", "one-rank"])
def test_podman_stop_ends_the_job_within_the_grace_period(
    podman: Podman, job_dir: Path, tmp_path: Path, gpus: str
) -> None:
    """`podman stop` sends SIGTERM to PID 1 and SIGKILLs after its timeout. marun relays the
    SIGTERM to every rank (none of which handles it) and exits 143, the code of a job
    interrupted by SIGTERM; a SIGKILL would show as 137 and as `stopped_by: SIGKILL`. With one
    rank too: that rank must not become PID 1, where SIGTERM would be ignored."""
    logs = tmp_path / "logs"
    logs.mkdir()
    os.chown(logs, 1000, 100)
    name = podman.start(
        "localhost/marun-pytorch",
        ["/job/sleeper.py", "--init_method", "tcp://127.0.0.1:29500"],
        env={"MA_NUM_GPUS": gpus, "MA_LOG_DIR": "/logs"},
        volumes={job_dir: "/job:ro", logs: "/logs"},
    )
    deadline = time.monotonic() + DEADLINE
    while podman.logs(name).count(" ready") < int(gpus):
        assert time.monotonic() < deadline, podman.logs(name)
        time.sleep(0.1)
    podman("stop", "-t", "20", name, timeout=60)
    state = json.loads(podman("inspect", "--format", "{{json .State}}", name).stdout)
    out = podman.logs(name)
    assert state["ExitCode"] == 143, out
    result = json.loads((logs / "marun" / "result.json").read_text())
    assert (result["outcome"], result["signal"]) == ("interrupted", "SIGTERM"), result
    assert len(result["processes"]) == int(gpus)
    for proc in result["processes"]:
        assert (proc["signal"], proc["stopped_by"]) == ("SIGTERM", "SIGTERM"), proc


# -- MPI across two containers ----------------------------------------------------------------


def _volcano_ssh_dir(path: Path) -> Path:
    """What Volcano's ssh plugin mounts: the job's key pair, authorized_keys and a client config,
    readable by ma-user (uid 1000)."""
    path.mkdir(mode=0o700)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(path / "id_rsa")],
        check=True,
    )
    shutil.copy(path / "id_rsa.pub", path / "authorized_keys")
    (path / "config").write_text("StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n")
    for entry in [path, *path.iterdir()]:
        os.chown(entry, 1000, 100)
        if entry != path:
            entry.chmod(0o600)
    return path


def test_two_container_mpi_job_runs_an_allreduce(podman: Podman, tmp_path: Path) -> None:
    """Two containers of the MPI image, each in a network namespace of its own (one address,
    host name and /etc/hosts per container, as two pods), started as the platform starts a
    2-node MPI job: node 0's marun forms the cluster over sshd and runs mpirun across both."""
    pytest.importorskip("marun.mpi.leader", reason="MPI mode's runtime has not landed")
    from netns_cluster import NetnsCluster, available

    reason = available()
    if reason is not None:
        pytest.skip(f"network namespaces: {reason}")
    hosts, slots = 2, 2
    tmp_path.chmod(0o755)
    ssh_dir = _volcano_ssh_dir(tmp_path / "ssh")
    with NetnsCluster(hosts, job="ma-job", task="worker", workdir=tmp_path) as cluster:
        add_hosts: list[str] = []
        for i in range(hosts):
            for host in (cluster.fqdn(i), cluster.name(i)):
                add_hosts += ["--add-host", f"{host}:{cluster.address(i)}"]
        with contextlib.ExitStack() as stack:
            stack.callback(podman.remove_all)  # before the namespaces go
            names: dict[int, str] = {}
            for i in reversed(range(hosts)):  # node 0 last: pods start in any order
                names[i] = podman.start(
                    "localhost/marun-mpi",
                    ["/examples/mpi_allreduce.py"],
                    env={
                        "MA_VJ_NAME": cluster.job,
                        "MA_TASK_NAME": cluster.task,
                        "MA_NUM_HOSTS": str(hosts),
                        "MA_NUM_GPUS": str(slots),
                        "VC_TASK_INDEX": str(i),
                        "MA_CURRENT_IP": cluster.address(i),
                    },
                    volumes={EXAMPLES: "/examples:ro", ssh_dir: "/home/ma-user/.ssh:ro"},
                    options=(
                        f"--network=ns:/var/run/netns/{cluster.netns(i)}",
                        *("--hostname", cluster.name(i)),
                        *add_hosts,
                    ),
                )
            codes = [podman.wait(names[i]) for i in range(hosts)]
            outputs = [podman.logs(names[i]) for i in range(hosts)]
            report = "\n".join(
                f"--- node {i} (exit {codes[i]})\n{outputs[i]}" for i in range(hosts)
            )
            assert codes == [0] * hosts, report  # every node exits with the job's status
            world = hosts * slots
            lines = [ln for ln in outputs[0].splitlines() if "allreduce sum" in ln]  # mpirun's
            assert len(lines) == world, report
            expected = f"allreduce sum {world * (world + 1) // 2} (expected "
            assert all(expected in ln for ln in lines), report
            ran_on = {ln.split(" on ", 1)[1].split(":", 1)[0] for ln in lines}
            assert ran_on == {cluster.name(i) for i in range(hosts)}, report

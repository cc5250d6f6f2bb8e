"""A Volcano Job (examples/volcano/*.yaml) as the Pods Volcano would create from it, run as a
real cluster of containers with `podman kube play` on one machine.

`volcano_pods(job, ...)` does what Volcano's job controller and its `env`, `svc` and `ssh`
plugins do to each replica of each task: the pod `<job>-<task>-<index>` with that host name in
the job's subdomain, the labels, `VK_TASK_INDEX`/`VC_TASK_INDEX`, `VC_<TASK>_HOSTS` and
`VC_<TASK>_NUM` for every task, `/etc/volcano/<task>.host`, and the job's ssh key pair mounted
where `--ssh-key-file-path` says. What the kubelet would then do is done here too, since podman
does not: the downward API's `metadata.name`, `status.podIP` and the pod's labels and
annotations (`metadata.labels['volcano.sh/task-spec']`) are filled in, and `$(VAR)` in `args` is
expanded from the container's variables. What cannot exist on this machine is stood in for, and
only that: a `configMap`/`secret` volume is a `hostPath` directory with the same files; cluster
DNS is `hostAliases` naming every pod's FQDN and short name (podman ignores `subdomain`);
devices (`nvidia.com/gpu`, `huawei.com/*`) are dropped from the limits and requests, with the
cpu and memory requests sized for a training node, and so are `ports` (podman would publish
them on the host); a memory-backed `/dev/shm` volume is podman's own `/dev/shm` (a tmpfs). An
NPU pod gets the annotation Huawei's device plugin writes (`huawei.com/Ascend910:
Ascend910-0,...`), which its ASCEND_VISIBLE_DEVICES reads.

`validate(pods)` checks each Pod with `kubernetes-validate --strict` (offline schemas; Volcano's
own Job CRD cannot be checked that way). `PodCluster` runs them: an `--internal` podman network
of its own (names, no route out: no traffic leaves the machine), each pod with a fixed address,
node 0's pod started last (pods start in any order), and on leaving `podman kube down` of every
pod and the network's removal, whatever happened.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
IMAGES_SH = REPO / "scripts" / "images.sh"
IMAGES_DIR = Path(os.environ.get("MARUN_IMAGES_DIR") or REPO / ".cache" / "images")
K8S_VERSION = "1.30.0"  # the schemas kubernetes-validate checks against
DEVICE_RESOURCES = ("nvidia.com/", "huawei.com/")
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def load_job(path: Path) -> dict[str, Any]:
    """The Volcano Job in a manifest file (which may hold other documents, e.g. a ConfigMap)."""
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "Job":
            return doc
    raise ValueError(f"{path}: no Volcano Job in it")


def task_key(task: str) -> str:
    """Volcano writes a task name's `-` as `_` in its variables and host files."""
    return task.replace("-", "_")


@dataclass(frozen=True)
class Pod:
    name: str  # <job>-<task>-<index>, also its host name
    task: str
    index: int
    ip: str
    manifest: dict[str, Any]

    @property
    def container(self) -> str:
        """podman's name for the pod's (first) container: <pod>-<container>."""
        return f"{self.name}-{self.manifest['spec']['containers'][0]['name']}"


def _ssh_secret(path: Path) -> Path:
    """What Volcano's ssh plugin puts in the job's secret: a key pair, authorized_keys and a
    client config. Owned by root and mode 0644, as the plugin's secret volume presents it to a
    non-root user (docs/mpi.md)."""
    path.mkdir(parents=True, exist_ok=True)
    key = path / "id_rsa"
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(key)], check=True
        )
    shutil.copy(path / "id_rsa.pub", path / "authorized_keys")
    (path / "config").write_text("StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n")
    path.chmod(0o755)
    for entry in path.iterdir():
        entry.chmod(0o644)
    return path


def _plugin_args(job: Mapping[str, Any], plugin: str) -> list[str] | None:
    plugins = job["spec"].get("plugins") or {}
    if plugin not in plugins:
        return None
    return [str(a) for a in plugins[plugin] or []]


def _expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's `$(VAR)` expansion: a known variable is replaced, an unknown one kept."""
    return _VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def _host_volume(
    volume: dict[str, Any], host_paths: Mapping[str, Path] | None, pod: str
) -> dict[str, Any]:
    """The volume, or the host directory standing in for it (`{pod}`: the pod's name)."""
    if not host_paths or volume["name"] not in host_paths:
        return volume
    path = str(host_paths[volume["name"]]).replace("{pod}", pod)
    return {"name": volume["name"], "hostPath": {"path": path}}


def _device_annotations(containers: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """What Huawei's device plugin annotates a pod with: the NPUs it got, by name."""
    out = {}
    for container in containers:
        limits = (container.get("resources") or {}).get("limits") or {}
        for resource, count in limits.items():
            if resource.startswith("huawei.com/"):
                kind = resource.split("/", 1)[1]
                out[resource] = ",".join(f"{kind}-{i}" for i in range(int(count)))
    return out


def _is_memory_shm(volume: Mapping[str, Any], mounts: Mapping[str, str]) -> bool:
    empty = volume.get("emptyDir") or {}
    return empty.get("medium") == "Memory" and mounts.get(volume["name"]) == "/dev/shm"


def _downward(var: dict[str, Any], values: Mapping[str, str]) -> dict[str, Any]:
    """A variable from the downward API's fieldRef, with the value the kubelet would give it."""
    ref = (var.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
    return {"name": var["name"], "value": values[ref]} if ref in values else var


def volcano_pods(
    job: Mapping[str, Any],
    workdir: Path,
    subnet: ipaddress.IPv4Network,
    *,
    image: str | None = None,
    host_paths: Mapping[str, Path] | None = None,
    env: Mapping[str, str] | None = None,
    mounts: Mapping[str, Path] | None = None,
    script: str | None = None,
) -> list[Pod]:
    """Every replica of every task of `job` as a Pod manifest, in the Job's task order.

    `image` replaces each container's image; `host_paths` maps a volume's name to the directory
    standing in for its configMap/secret/emptyDir (`{pod}` in it: the pod's name); `env` adds
    variables to every container and `mounts` read-only host directories (mount path -> host
    path: what the test adds, e.g. a framework standing in for the base image's); `script`
    replaces the first `.py` argument."""
    name = str(job["metadata"]["name"])
    tasks = [(str(t["name"]), int(t.get("replicas", 1)), t) for t in job["spec"]["tasks"]]
    hosts = subnet.hosts()
    next(hosts)  # .1: the network's gateway
    ips = {(task, i): str(next(hosts)) for task, count, _ in tasks for i in range(count)}
    fqdns = {key: f"{name}-{key[0]}-{key[1]}.{name}" for key in ips}

    # svc plugin: every task's host list, as variables and as files under /etc/volcano.
    svc = _plugin_args(job, "svc") is not None
    svc_env: dict[str, str] = {}
    volcano_dir = workdir / "etc-volcano"
    if svc:
        volcano_dir.mkdir(parents=True, exist_ok=True)
        for task, count, _ in tasks:
            names = [fqdns[(task, i)] for i in range(count)]
            svc_env[f"VC_{task_key(task).upper()}_HOSTS"] = ",".join(names)
            svc_env[f"VC_{task_key(task).upper()}_NUM"] = str(count)
            (volcano_dir / f"{task_key(task)}.host").write_text("".join(f"{n}\n" for n in names))
        volcano_dir.chmod(0o755)
    ssh_args = _plugin_args(job, "ssh")
    ssh_path = "/root/.ssh"
    ssh_dir = None
    if ssh_args is not None:
        for arg in ssh_args:
            if arg.startswith("--ssh-key-file-path="):
                ssh_path = arg.split("=", 1)[1]
        ssh_dir = _ssh_secret(workdir / "ssh-secret")
    with_env = _plugin_args(job, "env") is not None

    aliases = [
        {"ip": ips[key], "hostnames": [fqdns[key], f"{name}-{key[0]}-{key[1]}"]} for key in ips
    ]
    pods = []
    for task, count, spec in tasks:
        for index in range(count):
            pod_name = f"{name}-{task}-{index}"
            ip = ips[(task, index)]
            template = copy.deepcopy(spec["template"])
            meta = template.get("metadata") or {}
            # job_controller_util.go (createJobPod): the labels Volcano adds to each pod
            labels = {
                **(meta.get("labels") or {}),
                "volcano.sh/job-name": name,
                "volcano.sh/task-spec": task,
                "volcano.sh/task-index": str(index),
            }
            annotations = {
                **(meta.get("annotations") or {}),
                "volcano.sh/task-index": str(index),
                **_device_annotations(template["spec"]["containers"]),
            }
            pod_spec = template["spec"]
            if svc:
                pod_spec["hostname"] = pod_name
                pod_spec["subdomain"] = name
            pod_spec["hostAliases"] = aliases
            shm_mounts = {
                m["name"]: m["mountPath"]
                for c in pod_spec["containers"]
                for m in c.get("volumeMounts") or []
            }
            shm = {
                v["name"] for v in pod_spec.get("volumes") or [] if _is_memory_shm(v, shm_mounts)
            }
            volumes = [
                _host_volume(v, host_paths, pod_name)
                for v in pod_spec.get("volumes") or []
                if v["name"] not in shm
            ]
            extra_mounts = []
            if svc:
                volumes.append({"name": "volcano-hosts", "hostPath": {"path": str(volcano_dir)}})
                extra_mounts.append(
                    {"name": "volcano-hosts", "mountPath": "/etc/volcano", "readOnly": True}
                )
            if ssh_dir is not None:
                volumes.append({"name": "volcano-ssh", "hostPath": {"path": str(ssh_dir)}})
                extra_mounts.append(
                    {"name": "volcano-ssh", "mountPath": ssh_path, "readOnly": True}
                )
            for n, (target, host) in enumerate((mounts or {}).items()):
                volumes.append({"name": f"test-mount-{n}", "hostPath": {"path": str(host)}})
                extra_mounts.append(
                    {"name": f"test-mount-{n}", "mountPath": target, "readOnly": True}
                )
            pod_spec["volumes"] = volumes
            for container in pod_spec["containers"]:
                if image is not None:
                    container["image"] = image
                downward = {"metadata.name": pod_name, "status.podIP": ip}
                downward.update({f"metadata.labels['{k}']": v for k, v in labels.items()})
                downward.update({f"metadata.annotations['{k}']": v for k, v in annotations.items()})
                variables = [_downward(v, downward) for v in container.get("env") or []]
                if with_env:
                    variables += [
                        {"name": "VK_TASK_INDEX", "value": str(index)},
                        {"name": "VC_TASK_INDEX", "value": str(index)},
                    ]
                variables += [{"name": k, "value": v} for k, v in svc_env.items()]
                variables += [{"name": k, "value": v} for k, v in (env or {}).items()]
                container["env"] = variables
                values = {v["name"]: str(v["value"]) for v in variables if "value" in v}
                args = [str(a) for a in container.get("args") or []]
                if script is not None:
                    at = next(i for i, a in enumerate(args) if a.endswith(".py"))
                    args[at] = script
                container["args"] = [_expand(a, values) for a in args]
                container["volumeMounts"] = [
                    *(m for m in container.get("volumeMounts") or [] if m["name"] not in shm),
                    *extra_mounts,
                ]
                # In Kubernetes a containerPort only documents; podman 4.3's kube play publishes
                # each on the host, which would open the job's ports to the outside and collide
                # between pods. Pods reach each other by address on their network.
                container.pop("ports", None)
                resources = container.get("resources") or {}
                for kind in ("limits", "requests"):
                    amounts = resources.get(kind) or {}
                    for resource in [r for r in amounts if r.startswith(DEVICE_RESOURCES)]:
                        del amounts[resource]  # no such device here
                    if kind == "requests":  # a training node's cpu and memory, not this one's
                        amounts.pop("cpu", None)
                        amounts.pop("memory", None)
                    if not amounts:
                        resources.pop(kind, None)
                if not resources:
                    container.pop("resources", None)
            manifest = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod_name, "labels": labels, "annotations": annotations},
                "spec": pod_spec,
            }
            pods.append(Pod(pod_name, task, index, ip, manifest))
    return pods


def kubernetes_validate() -> str | None:
    """The `kubernetes-validate` command (marun's dev extra), or None."""
    beside = Path(sys.executable).parent / "kubernetes-validate"
    return str(beside) if beside.exists() else shutil.which("kubernetes-validate")


def validate(pods: Sequence[Pod], workdir: Path) -> None:
    """`kubernetes-validate --strict` on every Pod manifest; an AssertionError naming what fails."""
    command = kubernetes_validate()
    assert command is not None, "kubernetes-validate is not installed (pip install -e '.[dev]')"
    files = []
    for pod in pods:
        path = workdir / f"{pod.name}.yaml"
        path.write_text(yaml.safe_dump(pod.manifest, sort_keys=False))
        files.append(str(path))
    proc = subprocess.run(
        [command, "--strict", "-k", K8S_VERSION, *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kubernetes-validate --strict:\n{proc.stdout}{proc.stderr}"


def podman(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """podman on scripts/images.sh's storage and settings."""
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


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.128.0.0/9 that no route of this machine overlaps (other networks, other
    test runs' podman networks)."""
    routes = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, check=False
    ).stdout
    taken = []
    for word in routes.split():
        with contextlib.suppress(ValueError):
            if "/" in word:
                taken.append(ipaddress.IPv4Network(word, strict=False))
    for _ in range(200):
        net = ipaddress.IPv4Network(f"10.{random.randint(128, 255)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError("no free /24 in 10.128.0.0/9")


@dataclass
class PodCluster:
    """The pods of one job on an `--internal` network of their own; a context manager."""

    pods: Sequence[Pod]
    workdir: Path
    subnet: ipaddress.IPv4Network
    network: str = field(init=False)
    started: list[Pod] = field(default_factory=list, init=False)
    started_at: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        tag = f"{os.getpid()}-{random.randrange(16**6):06x}"
        self.network = f"marun-test-{tag}"
        self._bridge = f"mt{random.randrange(16**10):010x}"  # 15 characters at most

    def __enter__(self) -> PodCluster:
        # What a run killed half-way left: pods under the same names, networks of dead runs.
        names = [p.name for p in self.pods]
        podman("pod", "rm", "-f", "-t", "0", *names, check=False)
        listed = podman("network", "ls", "--format", "{{.Name}}", check=False).stdout.split()
        for network in listed:
            match = re.fullmatch(r"marun-test-(\d+)-[0-9a-f]+", network)
            if match and not Path(f"/proc/{match.group(1)}").exists():
                podman("network", "rm", "-f", network, check=False)
        podman("network", "create", "--internal", "--subnet", str(self.subnet), self.network)
        try:
            self._name_bridge()
        except BaseException:
            self.down()
            raise
        return self

    def _name_bridge(self) -> None:
        # Its bridge's name: podman 4.3 picks the first free podman<N> among the networks of
        # its own config directory, which another checkout's test run (another
        # MARUN_IMAGES_DIR) may be about to take too. No option names it; the config does.
        config = IMAGES_DIR / "networks" / f"{self.network}.json"
        data = json.loads(config.read_text())
        # No route out: nothing a test's pods send can leave the machine.
        assert data.get("internal") is True, f"{self.network} is not --internal: {data}"
        data["network_interface"] = self._bridge
        config.write_text(json.dumps(data, indent=2))

    def __exit__(self, *exc: object) -> None:
        self.down()

    def start(self, first: str | None = None) -> None:
        """`podman kube play` each pod, the job's node 0 (`first`, default the first pod) last."""
        node0 = first or self.pods[0].name
        order = [p for p in self.pods if p.name != node0] + [
            p for p in self.pods if p.name == node0
        ]
        for pod in order:
            path = self.workdir / f"{pod.name}.yaml"
            path.write_text(yaml.safe_dump(pod.manifest, sort_keys=False))
            self.started.append(pod)
            self.started_at[pod.name] = time.monotonic()
            podman("kube", "play", "--network", self.network, "--ip", pod.ip, str(path))

    def pod(self, name: str) -> Pod:
        return next(p for p in self.pods if p.name == name)

    def wait(self, name: str, timeout: float = 300) -> int:
        """The exit code of the pod's container once it has ended (a hang guard: `timeout`)."""
        out = podman("wait", self.pod(name).container, timeout=timeout).stdout
        return int(out.split()[0])

    def logs(self, name: str) -> str:
        proc = podman("logs", self.pod(name).container, check=False)
        return proc.stdout + proc.stderr

    def kill(self, name: str) -> None:
        """The pod dies at once: SIGKILL to every process of it (its node gets no SIGTERM)."""
        podman("pod", "kill", "-s", "KILL", name)

    def wait_for(self, name: str, pattern: str, timeout: float = 120) -> float:
        """Poll the pod's output until `pattern` appears: the time.monotonic() it was seen."""
        deadline = time.monotonic() + timeout
        while True:
            if re.search(pattern, self.logs(name)):
                return time.monotonic()
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}: no {pattern!r} in {timeout}s\n{self.report()}")
            time.sleep(0.2)

    def report(self) -> str:
        parts = []
        for pod in self.started:
            state = podman(
                "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", pod.container,
                check=False,
            ).stdout.strip()  # fmt: skip
            parts.append(f"--- {pod.name} ({state})\n{self.logs(pod.name)[-6000:]}")
        return "\n".join(parts)

    def down(self) -> None:
        """`podman kube down` every pod started, then the network; whatever state they are in."""
        for pod in reversed(self.started):
            path = self.workdir / f"{pod.name}.yaml"
            podman("kube", "down", str(path), check=False, timeout=120)
        if self.started:
            podman("pod", "rm", "-f", "-t", "0", *[p.name for p in self.started], check=False)
        podman("network", "rm", "-f", self.network, check=False)
        self.started.clear()


@contextlib.contextmanager
def job_cluster(pods: Sequence[Pod], workdir: Path) -> Iterator[PodCluster]:
    """Validate the pods, then run them in a PodCluster (torn down on leaving)."""
    validate(pods, workdir)
    subnet = ipaddress.IPv4Network(f"{pods[0].ip.rsplit('.', 1)[0]}.0/24")
    with PodCluster(pods, workdir, subnet) as cluster:
        yield cluster

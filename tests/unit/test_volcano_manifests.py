"""examples/volcano/*.yaml as Volcano takes them, without a cluster: each Job validated against
Volcano's own Job CRD schema (vendored in tests/data/volcano, unknown fields refused), its
policies applied as Volcano's job controller applies them (tests/volcano_policies.py) to what
marun exits with, and each pod's grace period set against marun's own. The Pods Volcano would
make of them are checked with kubernetes-validate in tests/e2e/test_volcano_pods.py."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from conftest import DATA, REPO
from marun.inputs.settings import Settings
from volcano_policies import (
    POD_EVICTED,
    POD_FAILED,
    SYNC_JOB,
    action,
    check_policies,
    failed,
)

MANIFESTS = sorted((REPO / "examples" / "volcano").glob("*.yaml"))
CRD = DATA / "volcano" / "batch.volcano.sh_jobs.yaml"
BAD_INPUT = 2  # marun's exit code for bad input: nothing started (README.md)
# Exit codes a job's failure leaves every pod with once marun's own rounds are spent or there
# are none: a node lost (1), the hang watchdog (124), a command that cannot start (126, 127),
# a signal (137 SIGKILL, 143 SIGTERM), a rank's own code (42, 255).
FAILURES = (1, 42, 124, 126, 127, 137, 143, 255)
# After its grace_period marun still writes its report and job.json and tells every node to
# stop; the kubelet's SIGKILL must not come before that.
AFTER_GRACE = 15.0


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def _job(path: Path) -> dict[str, Any]:
    (job,) = [d for d in _documents(path) if d.get("kind") == "Job"]
    return job


def _strict(schema: Any) -> Any:
    """The schema with unknown fields refused: the API server prunes them (and kubectl's
    default strict field validation refuses them); jsonschema would let them through."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def job_schema() -> Any:
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return schema


def _errors(schema: Any, job: dict[str, Any]) -> list[str]:
    found = jsonschema.Draft7Validator(schema).iter_errors(job)
    return [f"{'.'.join(map(str, e.absolute_path)) or '(job)'}: {e.message}" for e in found]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.stem)
def test_job_matches_volcanos_crd(path: Path, job_schema: Any) -> None:
    job = _job(path)
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert _errors(job_schema, job) == []


def test_the_crd_check_refuses_unknown_and_mistyped_fields(job_schema: Any) -> None:
    """Guards the check above: a misspelled field and a wrong type are both found."""
    job = _job(MANIFESTS[0])
    typo = copy.deepcopy(job)
    typo["spec"]["tasks"][0]["replica"] = 2
    container = typo["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["enviroment"] = []
    errors = _errors(job_schema, typo)
    assert any("'replica' was unexpected" in e for e in errors), errors
    assert any("'enviroment' was unexpected" in e for e in errors), errors
    wrong = copy.deepcopy(job)
    wrong["spec"]["maxRetry"] = "3"
    assert any(e.startswith("spec.maxRetry:") for e in _errors(job_schema, wrong))


def _templates(job: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for task in job["spec"]["tasks"]:
        yield str(task["name"]), task["template"]["spec"]


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = spec["containers"]
    return dict(container)


def _env(spec: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: str(v["value"]) for v in _container(spec).get("env") or [] if "value" in v}


def _fatal_codes(spec: dict[str, Any]) -> set[int]:
    """The exit codes the pod's marun is told end the job at once (MARUN_FATAL_EXIT_CODES)."""
    raw = _env(spec).get("MARUN_FATAL_EXIT_CODES", "")
    return {int(c) for c in raw.split(",") if c.strip()}


def _policy_problems(job: dict[str, Any]) -> list[str]:
    """Where Volcano would not do with marun's exit codes what they mean: exit 2 (bad input) and
    the pod's fatal_exit_codes abort the job, every other failure and an eviction restart it
    (with hot spares, MARUN_SPARES: the pod alone, whose place went to a spare)."""
    check_policies(job["spec"].get("policies") or [])
    problems = []
    for task in job["spec"]["tasks"]:
        name, spec = str(task["name"]), task["template"]["spec"]
        check_policies(task.get("policies") or [])
        fatal = _fatal_codes(spec)
        restart = "RestartPod" if int(_env(spec).get("MARUN_SPARES", "0") or 0) else "RestartJob"
        wanted = {code: "AbortJob" for code in {BAD_INPUT, *fatal}}
        wanted.update({code: restart for code in set(FAILURES) - fatal})
        for code, want in sorted(wanted.items()):
            got = failed(job, name, code)
            if got != want:
                problems.append(f"{name}: exit {code} -> {got}, expected {want}")
        # An evicted pod (a node drained, memory pressure) is no failure of the job's own.
        if action(job, name, POD_EVICTED) != restart:
            problems.append(f"{name}: PodEvicted -> {action(job, name, POD_EVICTED)}")
    return problems


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.stem)
def test_policies_abort_bad_input_and_restart_failures(path: Path) -> None:
    assert _policy_problems(_job(path)) == []


def test_a_fatal_exit_code_needs_its_abort_policy() -> None:
    """Guards the check above: a pod told MARUN_FATAL_EXIT_CODES=3 in a Job without an
    `exitCode: 3 -> AbortJob` policy is found, since Volcano would restart what marun ended."""
    job = _job(MANIFESTS[0])
    (task,) = [t for t in job["spec"]["tasks"] if t["name"] == "worker"]
    (container,) = task["template"]["spec"]["containers"]
    container["env"].append({"name": "MARUN_FATAL_EXIT_CODES", "value": "3"})
    assert _policy_problems(job) == ["worker: exit 3 -> RestartJob, expected AbortJob"]
    job["spec"]["policies"].insert(0, {"exitCode": 3, "action": "AbortJob"})
    assert _policy_problems(job) == []


def test_policy_order_decides_like_volcano() -> None:
    """The manifests before this was fixed: PodFailed -> RestartJob ahead of exitCode: 2 ->
    AbortJob, so Volcano restarted a job that had failed on bad input."""
    job: dict[str, Any] = {
        "spec": {
            "policies": [
                {"event": POD_EVICTED, "action": "RestartJob"},
                {"event": POD_FAILED, "action": "RestartJob"},
                {"exitCode": BAD_INPUT, "action": "AbortJob"},
            ],
            "tasks": [{"name": "worker"}],
        }
    }
    check_policies(job["spec"]["policies"])
    assert failed(job, "worker", BAD_INPUT) == "RestartJob"
    job["spec"]["policies"].insert(0, job["spec"]["policies"].pop())
    assert failed(job, "worker", BAD_INPUT) == "AbortJob"
    assert failed(job, "worker", 1) == "RestartJob"
    # A task's own policies come before the Job's; what matches nothing changes nothing.
    job["spec"]["tasks"][0]["policies"] = [{"exitCode": 1, "action": "CompleteJob"}]
    assert failed(job, "worker", 1) == "CompleteJob"
    assert action(job, "worker", "TaskCompleted") == SYNC_JOB


@pytest.mark.parametrize(
    ("policies", "refused"),
    [
        ([{"event": POD_FAILED, "exitCode": 2, "action": "AbortJob"}], "simultaneously"),
        ([{"action": "AbortJob"}], "either event or exitCode"),
        ([{"exitCode": 0, "action": "AbortJob"}], "0 is not a valid"),
        ([{"exitCode": 2, "action": "AbortJob"}] * 2, "duplicate exitCode"),
        ([{"event": POD_FAILED, "action": "RestartJob"}] * 2, "duplicate event"),
        (
            [{"event": "*", "action": "AbortJob"}, {"event": POD_EVICTED, "action": "RestartJob"}],
            "*",
        ),
        ([{"event": "PodRunning", "action": "AbortJob"}], "invalid policy event"),
        ([{"event": POD_FAILED, "action": "SyncJob"}], "invalid policy action"),
    ],
)
def test_policies_volcanos_webhook_refuses(policies: list[dict[str, Any]], refused: str) -> None:
    with pytest.raises(ValueError, match=refused.replace("*", r"\*")):
        check_policies(policies)


def _marun_grace(spec: dict[str, Any]) -> float:
    """marun's grace_period in this pod: --grace-period, MARUN_GRACE_PERIOD, else the default."""
    args = [str(a) for a in _container(spec).get("args") or []]
    for i, arg in enumerate(args):
        if arg.startswith("--grace-period="):
            return float(arg.split("=", 1)[1])
        if arg == "--grace-period":
            return float(args[i + 1])
    raw = _env(spec).get("MARUN_GRACE_PERIOD")
    return float(raw) if raw else Settings().grace_period


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.stem)
def test_pod_grace_outlasts_maruns(path: Path) -> None:
    """Volcano deletes a job's pods (a restart, an abort, `kubectl delete`) without a grace of
    its own (job_controller_actions.go), so the pod's terminationGracePeriodSeconds is how long
    marun has between SIGTERM and the kubelet's SIGKILL: its ranks' grace and then its end."""
    for task, spec in _templates(_job(path)):
        pod_grace = spec.get("terminationGracePeriodSeconds", 30)  # Kubernetes' default
        assert pod_grace >= _marun_grace(spec) + AFTER_GRACE, (
            f"{task}: terminationGracePeriodSeconds={pod_grace} leaves marun's grace_period="
            f"{_marun_grace(spec):g} less than {AFTER_GRACE:g}s for its end"
        )


ACCELERATORS = ("nvidia.com/", "huawei.com/")
SHM = "/dev/shm"


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.stem)
def test_accelerator_pods_request_memory_and_get_a_shm(path: Path) -> None:
    """An accelerator pod without cpu/memory requests is BestEffort: the kubelet evicts it first,
    and an eviction restarts the whole job. A container's /dev/shm is 64 MiB unless a
    memory-backed volume replaces it: DataLoader workers die with a bus error past it."""
    checked = 0
    for task, spec in _templates(_job(path)):
        container = _container(spec)
        resources = container.get("resources") or {}
        if not any(r.startswith(ACCELERATORS) for r in resources.get("limits") or {}):
            continue
        checked += 1
        assert {"cpu", "memory"} <= set(resources.get("requests") or {}), task
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}
        assert SHM in mounts, f"{task}: no volume at {SHM}"
        (volume,) = [v for v in spec["volumes"] if v["name"] == mounts[SHM]]
        assert volume.get("emptyDir", {}).get("medium") == "Memory", task
    if path.stem.startswith("tensorflow-"):
        assert checked == 0  # on CPUs: nothing to check
    else:
        assert checked, f"{path.name}: no accelerator pod"

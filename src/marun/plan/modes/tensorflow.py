"""TensorFlow-GPU: the platform's appended `--task_index I --ps_hosts [..] --worker_hosts [..]
--job_name J` turned into the `TF_CONFIG` TensorFlow's cluster resolver reads.

On several nodes the platform starts one `ps` and one `worker` container per node and appends
the four flags to each (docs/platform-contract.md); this container gets one process with
`TF_CONFIG={"cluster": {...}, "task": {"type": J, "index": I}}`. On one node it appends nothing:
one process, no TF_CONFIG (name `--mode tensorflow` then; auto mode cannot tell).

The platform makes the lists from `TF_PS_HOSTS` and `TF_WORKER_HOSTS`, which it sets too: where
no list is appended, marun reads them (the task then comes from MA_TASK_NAME and the platform's
task index); where both are there, they must agree.

Decisions:
- `--ps_hosts` may be absent: a worker-only cluster (MultiWorkerMirroredStrategy's shape), whose
  TF_CONFIG has no "ps" job; `--task_index`, `--worker_hosts` and `--job_name` must always come.
- `--tf-chief`: the first worker becomes `"chief": [worker0]` and the others are re-indexed from
  0, on every container alike. `--job_name chief` is accepted only with it (the chief's address
  is worker 0's, and every container must agree on the cluster), with task index 0.
- `--job_name evaluator`: the task says evaluator but the cluster never lists one: an evaluator
  in the cluster makes parameter-server jobs hang (tensorflow #30121).
- A parameter server never exits by itself: it is planned as a daemon, stopped once the workers
  are done. With `--tf-chief` (ParameterServerStrategy: the chief coordinates, the workers only
  serve) the workers never exit by themselves either, so they are daemons too: a container of
  daemons is supervised, not exec'd, and ends with the job (status 0 once the workers are done;
  a stop signal before that is the job's failure, 128+N: marun.runtime.node_stop).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from marun.errors import InputError, bad_value, show_value
from marun.inputs.appended_args import TENSORFLOW_FLAGS
from marun.inputs.injected import Platform
from marun.inputs.numbers import MAX_NODES, parse_int
from marun.inputs.records import dataclass
from marun.inputs.tf_hosts import HOSTS_VARS, parse_host_list, split_address
from marun.plan.coordination import JobShape
from marun.plan.launch_plan import LaunchPlan, NodePlan, ProcessSpec
from marun.plan.modes.common import log_dir, script_argv

JOB_NAMES = ("ps", "worker", "chief", "evaluator")
FLAGS = TENSORFLOW_FLAGS  # the appended flags, as marun.inputs.appended_args knows them


@dataclass(frozen=True)
class Task:
    type: str
    index: int
    address: str | None  # HOST:PORT in the cluster; None for an evaluator


def _env_hosts(platform: Platform, flag: str) -> str | None:
    value = platform.env.get(HOSTS_VARS[flag], "")
    return value if value.strip() else None


def has_cluster(platform: Platform) -> bool:
    """Whether the platform described a TensorFlow cluster: appended flags, or TF_PS_HOSTS /
    TF_WORKER_HOSTS (auto mode and the coordination ask this too)."""
    return any(flag in platform.appended for flag in FLAGS) or any(
        _env_hosts(platform, flag) is not None for flag in HOSTS_VARS
    )


def _hosts(platform: Platform, flag: str) -> tuple[str | None, str]:
    """(the raw list, where it came from) for `flag`: the appended list, cross-checked with
    the platform's variable where both are there, else the variable; (None, flag) if neither."""
    appended = platform.appended.get(flag)
    var = HOSTS_VARS[flag]
    from_env = _env_hosts(platform, flag)
    if appended is None:
        return (from_env, var) if from_env is not None else (None, f"--{flag}")
    if from_env is not None and parse_host_list(var, from_env) != parse_host_list(
        f"--{flag}", appended
    ):
        raise InputError(
            f"--{flag}={show_value(appended)} but {var}={show_value(from_env)}: expected the "
            f"same list (the platform appends --{flag} from {var})"
        )
    return appended, f"--{flag}"


def _require(platform: Platform, name: str) -> str:
    value = platform.appended.get(name)
    if value is None and not any(flag in platform.appended for flag in FLAGS):
        # Hosts from TF_PS_HOSTS / TF_WORKER_HOSTS: the task from the platform's variables.
        value = _task_from_env(platform, name)
    if value is None:
        given = " ".join(f"--{f}" for f in FLAGS if f in platform.appended)
        raise InputError(
            f"--{name}: not appended (the platform appended {given}): expected --task_index, "
            "--worker_hosts and --job_name together, and --ps_hosts for a parameter-server job"
        )
    return value


def _task_from_env(platform: Platform, name: str) -> str | None:
    if name == "job_name":
        task = platform.env.get("MA_TASK_NAME", "").strip()
        if not task:
            raise InputError(
                "TF_WORKER_HOSTS/TF_PS_HOSTS give the cluster but MA_TASK_NAME is not set and no "
                "--job_name was appended: expected this container's task (ps or worker)"
            )
        return task
    if name == "task_index":
        given = platform.given_task_index()
        if given is None:
            raise InputError(
                "TF_WORKER_HOSTS/TF_PS_HOSTS give the cluster but none of MA_TASK_INDEX, "
                "VC_TASK_INDEX, VK_TASK_INDEX is set and no --task_index was appended: expected "
                "this container's index"
            )
        return str(given[1])
    return None


def build_cluster(ps: Sequence[str], workers: Sequence[str], chief: bool) -> dict[str, list[str]]:
    """The cluster in a fixed key order (chief, ps, worker), so TF_CONFIG reads the same on
    every container and in every plan."""
    cluster: dict[str, list[str]] = {}
    if chief:
        cluster["chief"] = [workers[0]]
        workers = workers[1:]
    if ps:
        cluster["ps"] = list(ps)
    if workers:
        cluster["worker"] = list(workers)
    return cluster


def cluster_task(job: str, index: int, chief: bool) -> tuple[str, int]:
    """The platform's (job, index) as a task of the cluster `build_cluster` made."""
    if chief and job == "worker":
        return ("chief", 0) if index == 0 else ("worker", index - 1)
    return job, index


def tf_config(cluster: Mapping[str, Sequence[str]], task_type: str, index: int) -> str:
    config = {"cluster": cluster, "task": {"type": task_type, "index": index}}
    return json.dumps(config, separators=(",", ":"))


def _check_once(lists: Sequence[tuple[str, str | None, Sequence[str]]]) -> None:
    """Each HOST:PORT once across the lists: (where from, as given, parsed) each."""
    seen: set[str] = set()
    for flag, raw, hosts in lists:
        for address in hosts:
            if address in seen:
                raise bad_value(
                    flag, raw, f"each HOST:PORT once in --ps_hosts and --worker_hosts ({address})"
                )
            seen.add(address)


def read_job(platform: Platform) -> tuple[str, int, tuple[str, ...], tuple[str, ...]]:
    """Validated (job_name, task_index, ps hosts, worker hosts) from the appended flags."""
    raw_index = _require(platform, "task_index")
    job = _require(platform, "job_name")
    raw_workers, workers_from = _hosts(platform, "worker_hosts")
    raw_ps, ps_from = _hosts(platform, "ps_hosts")
    if raw_workers is None:
        raise InputError(
            "--worker_hosts: not appended and TF_WORKER_HOSTS not set: expected the workers' "
            "HOST:PORT list (--task_index, --worker_hosts and --job_name come together)"
        )

    if job not in JOB_NAMES:
        raise bad_value("--job_name", job, "one of " + ", ".join(JOB_NAMES))
    task_name = platform.env.get("MA_TASK_NAME")
    if task_name and task_name != job:
        raise InputError(
            f"--job_name={job!r} but MA_TASK_NAME={task_name!r}: expected the same task name "
            "(the platform appends --job_name from MA_TASK_NAME)"
        )
    index = parse_int("--task_index", raw_index, 0, MAX_NODES * 2)
    given = platform.given_task_index()
    if given is not None and given[1] != index:
        raise InputError(
            f"--task_index={raw_index!r} but {given[0]}={platform.env[given[0]]!r}: expected the "
            "same index (the platform appends --task_index from its task index)"
        )

    workers = parse_host_list(workers_from, raw_workers)
    ps = parse_host_list(ps_from, raw_ps) if raw_ps is not None else ()
    _check_once(((ps_from, raw_ps, ps), (workers_from, raw_workers, workers)))

    chief = platform.settings.tf_chief
    sizes = {"ps": len(ps), "worker": len(workers)}
    if job == "ps" and raw_ps is None:
        raise InputError(
            "--job_name='ps' but no --ps_hosts was appended and TF_PS_HOSTS is not set: "
            "expected the parameter servers' HOST:PORT list"
        )
    if job == "chief" and not chief:
        raise bad_value(
            "--job_name",
            job,
            "ps, worker or evaluator; a chief comes from --tf-chief (worker 0 "
            "becomes the chief on every container)",
        )
    if job == "chief" and index != 0:
        raise bad_value("--task_index", raw_index, "0 for the chief (worker 0 under --tf-chief)")
    if job in sizes and index >= sizes[job]:
        raise bad_value(
            "--task_index",
            raw_index,
            f"an index below {sizes[job]}, the number of entries in "
            f"{ps_from if job == 'ps' else workers_from}",
        )
    return job, index, ps, workers


def _process(
    platform: Platform, argv: tuple[str, ...], task_type: str, index: int, env: dict[str, str]
) -> ProcessSpec:
    return ProcessSpec(
        name=f"{task_type}{index}",
        argv=argv,
        env=env,
        cwd=platform.cwd,
        log=f"{log_dir(platform)}/{task_type}_{index}.log",
        role=task_type,
        rank=None,
        daemon=task_type == "ps" or (task_type == "worker" and platform.settings.tf_chief),
    )


def _single_container(platform: Platform) -> LaunchPlan:
    """One node: one container, nothing appended (the platform's single-node TF job)."""
    stated = platform.given_num_hosts()  # MA_NUM_HOSTS, else Volcano's VC_<TASK>_NUM
    if stated is not None and stated[1] > 1:
        raise InputError(
            f"{stated[0]}={platform.env[stated[0]]!r} but the platform appended none of "
            "--task_index --ps_hosts --worker_hosts --job_name: expected them on a multi-node "
            "TensorFlow job"
        )
    argv = script_argv(platform)
    node = NodePlan(0, platform.hostname, processes=(_process(platform, argv, "worker", 0, {}),))
    return LaunchPlan("tensorflow", (node,), shape=JobShape.one_node(platform.hostname))


def _strategy_notes(ps: Sequence[str], chief: bool, workers_only: bool) -> tuple[str, ...]:
    """What each strategy needs of a job with parameter servers, where the options miss it."""
    if ps and workers_only:
        return (
            "--tf-workers-only: TF_CONFIG lists the workers only (MultiWorkerMirroredStrategy); "
            "each ps container runs no task, waits and ends with the job",
        )
    if ps and not chief:
        return (
            "parameter servers and no --tf-chief: TF2's ParameterServerStrategy needs a chief "
            "(its coordinator) and without one every task waits forever; --tf-chief makes "
            "worker 0 the chief (TF1's own PS loop needs none; MultiWorkerMirroredStrategy "
            "takes workers only: --tf-workers-only, or see docs/engines/tensorflow.md)",
        )
    return ()


def _waiting_ps(platform: Platform, index: int) -> ProcessSpec:
    """`--tf-workers-only`: a ps container's one process waits (a daemon, ended with the job)
    instead of running the script, which MultiWorkerMirroredStrategy would crash there
    (`There is no id for task_type 'ps'`)."""
    return ProcessSpec(
        name=f"ps{index}",
        argv=(platform.python, "-c", "import signal; signal.pause()"),
        env={},
        cwd=platform.cwd,
        log=f"{log_dir(platform)}/ps_{index}.log",
        role="ps",
        rank=None,
        daemon=True,
    )


def placement_notes(ps: Sequence[str], workers: Sequence[str]) -> tuple[str, ...]:
    """The platform places one ps and one worker container on each node; other counts are
    possible (a cluster given by hand) but are not what it starts: say so."""
    if not ps or len(ps) == len(workers):
        return ()
    return (
        f"{len(ps)} ps and {len(workers)} worker(s): the platform starts one ps and one worker "
        "container on each node (1:1), so these lists are not the platform's placement; each "
        "container still gets its own task",
    )


def plan(platform: Platform, all_nodes: bool) -> LaunchPlan:
    if not has_cluster(platform):
        return _single_container(platform)

    job, index, ps, workers = read_job(platform)
    argv = script_argv(platform)
    chief = platform.settings.tf_chief
    workers_only = platform.settings.tf_workers_only
    if workers_only and chief:
        raise InputError(
            "--tf-workers-only with --tf-chief: expected one of them (MultiWorkerMirroredStrategy "
            "takes workers only, ParameterServerStrategy a chief and parameter servers)"
        )
    cluster = build_cluster(ps, workers, chief)
    # What TF_CONFIG holds: with --tf-workers-only the workers alone, whatever the job's shape.
    seen = {"worker": cluster["worker"]} if workers_only and "worker" in cluster else cluster

    # Every container of the job, in a fixed order: ps, then chief, then workers.
    tasks = [
        Task(task_type, i, address)
        for task_type in ("ps", "chief", "worker")
        for i, address in enumerate(cluster.get(task_type, ()))
    ]
    own_type, own_index = cluster_task(job, index, chief)
    if own_type == "evaluator":
        tasks.append(Task("evaluator", own_index, None))
    position = next(n for n, t in enumerate(tasks) if (t.type, t.index) == (own_type, own_index))

    def node_plan(n: int, task: Task) -> NodePlan:
        host = platform.hostname
        if task.address is not None:
            host = (split_address(task.address) or (task.address, 0))[0]
        if workers_only and task.type == "ps":
            return NodePlan(n, host, processes=(_waiting_ps(platform, task.index),))
        env = {"TF_CONFIG": tf_config(seen, task.type, task.index)}
        return NodePlan(n, host, processes=(_process(platform, argv, task.type, task.index, env),))

    placement = (*placement_notes(ps, workers), *_strategy_notes(ps, chief, workers_only))
    shape = _shape(platform, cluster, len(ps), len(workers), own_type, position)
    if not all_nodes:
        this = node_plan(position, tasks[position])
        return LaunchPlan("tensorflow", (this,), placement, shape=shape)
    notes = (
        "each node here is one container running one task (on several machines the "
        "platform starts one ps and one worker container on each)",
        *placement,
    )
    every = tuple(node_plan(n, t) for n, t in enumerate(tasks))
    return LaunchPlan("tensorflow", every, notes, shape=shape)


def _shape(
    platform: Platform,
    cluster: Mapping[str, Sequence[str]],
    ps: int,
    workers: int,
    own_type: str,
    position: int,
) -> JobShape:
    """The containers in the plan's order (ps, chief, workers); the leader is the first that is
    not a parameter server, which ends with the job rather than on its own. An evaluator is
    outside the cluster: not coordinated. Each task has its own host lists: no hosts in the id."""
    if own_type == "evaluator":
        return JobShape.one_node(platform.hostname, position)
    first = (cluster.get("chief") or cluster["worker"])[0]
    host = (split_address(first) or (first, 0))[0]
    return JobShape(host, ps + workers, position, leader=ps, hosts_in_id=False)

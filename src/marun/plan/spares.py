"""Hot spares (docs/supervision.md, "Hot spares"): the platform starts N+K nodes and says so (its
node count, `--world_size`); with `spares` K, the job trains on N of them and keeps K waiting. A
node's *place* is the index its processes are planned for (RANK, GROUP_RANK, ...); at the start
node i has place i for i < N, and the last K have none (spares). When a node is lost, node 0's
job gives its place to a spare in the next restart round, and the spare's marun plans itself as
that place: the platform's inputs as they would read on the lost node (`as_place`), with this
node's own host.

Only what a place changes is rewritten: the index variables, the node count, and the appended
`--rank` / `--world_size`; every other input is this node's own.
"""

from __future__ import annotations

from marun.errors import InputError, bad_value
from marun.inputs.appended_args import AppendedArgs
from marun.inputs.injected import TASK_INDEX_VARS, Platform
from marun.inputs.records import dataclass, replace

# The modes whose places are planned from the node index, the node count and the hosts (what a
# spare rewrites; node 0 is never replaced; node 0's MPI hostfile and every TF_CONFIG name the
# spare's host from the round's start on: marun.plan.place_hosts). Ascend mode (a rank table) is
# one line of bad input (docs/supervision.md, "Hot spares").
SPARE_MODES = ("pytorch", "mindspore", "mpi", "tensorflow")


@dataclass(frozen=True)
class Layout:
    """The job as spares cut it: `nodes` places (N), `spares` (K), this node's physical `index`
    (0 .. N+K-1) and its place at the start (None: a spare)."""

    nodes: int
    spares: int
    index: int

    @property
    def place(self) -> int | None:
        return self.index if self.index < self.nodes else None


def layout(mode: str, platform: Platform) -> Layout | None:
    """None without spares; else the layout, or one line of bad input (nothing started)."""
    spares = platform.settings.spares
    if not spares:
        return None
    if mode not in SPARE_MODES:
        raise bad_value(
            "spares",
            spares,
            f"0 in {mode} mode (hot spares are planned in {', '.join(SPARE_MODES)} mode only so "
            "far: their processes depend on the node's index and the hosts alone)",
        )
    if platform.env.get("RANK_TABLE_FILE", "").strip():
        raise bad_value(
            "spares",
            spares,
            "0 with a rank table (RANK_TABLE_FILE: the platform's table pins the servers and "
            "their devices' addresses; marun cannot rewrite it soundly for a spare)",
        )
    if not platform.settings.max_restarts:
        raise bad_value(
            "spares", spares, "0 without restart rounds (a spare takes a lost node's place in "
            "the next round: set max_restarts too)"
        )  # fmt: skip
    if mode == "tensorflow":
        index, total = _tf_layout(platform, spares)
    else:
        index, total = platform.node_index(), platform.num_hosts()
    if spares >= total:
        raise bad_value(
            "spares",
            spares,
            f"fewer than the platform's {total} node(s) (the job trains on the others)",
        )
    return Layout(total - spares, spares, index)


def _tf_layout(platform: Platform, spares: int) -> tuple[int, int]:
    """tensorflow mode: (this container's task index, the workers) of a cluster of workers
    alone (MultiWorkerMirroredStrategy's), whose every worker restarts in a round, so a spare's
    address reaches every TF_CONFIG of the next round (marun.plan.place_hosts). Parameter
    servers live on from round to round with the list they started with, and a chief is worker
    0 on every container: both one line of bad input."""
    from marun.plan.modes.tensorflow import has_cluster, read_job

    why = (
        "0 in tensorflow mode {} (hot spares in tensorflow mode are planned for a cluster of "
        "workers alone, MultiWorkerMirroredStrategy's: every worker restarts in a round and is "
        "told the spare's address; parameter servers live on with the addresses they started "
        "with)"
    )
    if not has_cluster(platform):
        raise bad_value("spares", spares, why.format("without the platform's cluster"))
    job, index, ps, workers = read_job(platform)
    if ps or platform.settings.tf_chief or platform.settings.tf_workers_only:
        raise bad_value("spares", spares, why.format("with parameter servers or a chief"))
    if job != "worker":
        raise bad_value("spares", spares, why.format(f"on a {job} container"))
    return index, len(workers)


def as_place(platform: Platform, place: int, nodes: int) -> Platform:
    """The platform's inputs as node `place` of a job of `nodes` would read them (this node's
    own host and everything else kept)."""
    from marun.inputs.hosts import node_hosts
    from marun.inputs.injected import volcano_task_key

    env = dict(platform.env)
    try:
        hosts: list[str] | None = list(node_hosts(platform))  # as the platform gave them
    except InputError:
        hosts = None  # not named (the planner says so in a note, as without spares)
    task_key = volcano_task_key(platform.task_name()).upper()
    for name in TASK_INDEX_VARS:
        if env.get(name, "") != "":
            env[name] = str(place)
    for name in ("MA_NUM_HOSTS", f"VC_{task_key}_NUM"):
        if env.get(name, "") != "":
            env[name] = str(nodes)
    given = env.get(f"VC_{task_key}_HOSTS", "") != ""
    if hosts is not None and (given or place != platform.node_index()):
        # (a list the platform did not give is written only where this node's host must move:
        # mpirun forwards what the plan read, and would warn of a variable it cannot find)
        # The places' hosts: this node's at its place (the others' as the platform listed them:
        # a spare knows no other substitution, and nothing pytorch mode plans reads them).
        places = hosts[:nodes]
        places[place] = hosts[platform.node_index()]
        env[f"VC_{task_key}_HOSTS"] = ",".join(places)
    appended = platform.appended
    new = {"rank": str(place), "world_size": str(nodes)}
    workers = _tf_workers(platform, place, nodes)
    if workers is not None:
        new.update(task_index=str(place), worker_hosts=workers)
        if env.get("TF_WORKER_HOSTS", "").strip():
            env["TF_WORKER_HOSTS"] = workers
    values = {k: new.get(k, v) for k, v in appended.values.items()}
    words = _rewritten(appended.words, new)
    return replace(platform, env=env, appended=AppendedArgs(values, words))


def _tf_workers(platform: Platform, place: int, nodes: int) -> str | None:
    """tensorflow mode: the N places' workers, this container's host at `place` with the port
    that place's entry has (the others' entries as the platform listed them; each round's start
    tells every worker the host of each place a spare holds: marun.plan.place_hosts). None
    without the platform's cluster of workers."""
    from marun.inputs.tf_hosts import moved, split_address
    from marun.plan.modes.tensorflow import has_cluster, read_job

    if not has_cluster(platform):
        return None
    _, index, _, workers = read_job(platform)
    if place >= len(workers) or index >= len(workers):
        return None
    places = list(workers[:nodes])
    own = split_address(workers[index])
    address = moved(workers[place], own[0]) if own is not None else None
    if address is not None:
        places[place] = address
    return ",".join(places)


def _rewritten(words: tuple[str, ...], new: dict[str, str]) -> tuple[str, ...]:
    out = list(words)
    for i, word in enumerate(out):
        name = word[2:].split("=", 1)[0] if word.startswith("--") else ""
        if name not in new:
            continue
        if "=" in word:
            out[i] = f"--{name}={new[name]}"
        elif i + 1 < len(out):
            out[i + 1] = new[name]
    return tuple(out)


def check_place(place: int, nodes: int) -> None:
    if not 0 <= place < nodes:
        raise InputError(f"node 0 gave this spare place {place}: expected 0 to {nodes - 1}")

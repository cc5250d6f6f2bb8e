"""Restarts in place: the same 3-node job under torchrun and under marun, side by side.

The job: 3 nodes on loopback (3 torchrun agents, or 3 `marun run` processes in pytorch mode with
the platform's inputs), 2 ranks each, one gloo all-reduce per step (CPU, torch venv from
`scripts/frameworks.sh torch`). N crashes are injected (`--crashes`, 20 by default): in round k a
rank drawn at random (seeded, the same schedule for every launcher) calls `os._exit(1)` at a
random step; after the last crash the job runs a few steps more and ends 0. The launchers get a
budget of restarts of the crashes of their job + 2 (`--max-restarts`: a restart that fails on
its own may be tried again, within the time-out). The launchers take turns,
`--chunk` crashes (one job) at a time, so that a change in the machine's load during the run
falls on each alike:

- torchrun, c10d rendezvous, its defaults;
- torchrun, the same with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (each round's workers get a
  store of their own, not the agent's shared one; pytorch#135712);
- marun (`marun run --max-restarts N`, job-wide restart rounds);
- marun-warm: the same with `--preload torch` (docs/warm-restarts.md): each round's ranks start
  in spare interpreters that imported torch while the round before ran. A spare that is not
  ready when its round starts means a cold start (counted: "cold starts" below); give the
  spares time with `--min-uptime` (every launcher's rounds then last that long before their
  crash, alike).

Each rank writes its start time first thing (before `import torch`) and the time its first
all-reduce returned; the crashing rank writes the crash time just before `os._exit`. Per crash:
- "all running": crash -> the last rank of the next round started;
- "first all-reduce": crash -> the first all-reduce after it returned on every rank;
- restart count agreed: every rank of the next round got the same restart count
  (TORCHELASTIC_RESTART_COUNT, MARUN_RESTART_COUNT);
- recovered: every rank of the next round passed that all-reduce within `--timeout` seconds
  (default 30). A job that hangs past it, or ends, is killed (every process it started, found by
  a tag in their environment) and counted as not recovering that crash; a fresh job then goes on
  with the crashes left.

Figures are p50 and p95 over the recovered crashes; ratios are marun / torchrun (each variant).
Nothing is asserted. Run it on a quiet machine (the load is printed): 20 crashes cost a few
minutes per launcher, more for a launcher that times out. Not in run_all.py (minutes, and the
torch venv). marun's guard against restart loops is lowered for the bench
(`MARUN_QUICK_FAILURE=1`): every injected crash comes within seconds of its round's start.

    python bench/restart.py [--crashes 20] [--chunk 5] [--min-uptime 0]
                            [--launchers torchrun,torchrun-noshare,marun,marun-warm]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, Row, bench_env, load_note, pct, print_rows

from marun.sim.ports import free_port

NODES, PER_NODE = 3, 2
WORLD = NODES * PER_NODE
TAG_VAR = "MARUN_BENCH_RESTART_TAG"  # not a marun setting: marks every process of a run
LAUNCHERS = ("torchrun", "torchrun-noshare", "marun", "marun-warm")
# Restarts a job gets beyond its crashes: a launcher whose restart fails on its own (torchrun's
# "address already in use" of a fresh store port) may try again, within --timeout.
SLACK = 2

# One rank. Round = how many crashes happened before it started (crash files in DIR/crashes),
# so the schedule does not depend on a launcher's restart counter (torchrun's can differ between
# nodes). A job crashes ranks up to crash BENCH_LIMIT (its chunk's end); its round BENCH_LIMIT
# runs a few steps and ends 0. Records: DIR/events/<job>.<rank>.<pid>, one JSON line per event.
RANK = r"""
import json, os, sys, time
t_start = time.time()
d, job = sys.argv[1], os.environ["BENCH_JOB"]
rank = int(os.environ["RANK"])
k = len(os.listdir(os.path.join(d, "crashes")))
rec = os.path.join(d, "events", f"{job}.{rank}.{os.getpid()}")

def record(event, t, **more):
    with open(rec, "a") as f:
        f.write(json.dumps({"event": event, "t": t, "round": k, "rank": rank, "job": job,
                            **more}) + "\n")

record("start", t_start, restart_env=os.environ.get("MARUN_RESTART_COUNT",
       os.environ.get("TORCHELASTIC_RESTART_COUNT")), master_port=os.environ.get("MASTER_PORT"))
schedule = json.load(open(os.path.join(d, "schedule.json")))
import datetime
import torch
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(schedule["timeout"])))
t = torch.ones(1)
crash = schedule["crashes"][k] if k < int(os.environ["BENCH_LIMIT"]) else None
step = 0
while True:
    dist.all_reduce(t)
    if step == 0:
        record("first_allreduce", time.time())
    if crash is not None and crash == [rank, step]:
        while time.time() - t_start < float(schedule.get("min_uptime", 0)):
            time.sleep(0.02)
        tmp = os.path.join(d, f"crash.{k}.tmp")
        with open(tmp, "w") as f:
            json.dump({"t": time.time(), "rank": rank, "step": step, "job": job}, f)
        os.rename(tmp, os.path.join(d, "crashes", f"{k:04d}"))
        os._exit(1)
    if crash is None and step + 1 >= schedule["final_steps"]:
        break
    time.sleep(schedule["step_seconds"])
    step += 1
dist.barrier()
dist.destroy_process_group()
"""


@dataclass(frozen=True)
class Event:
    event: str  # start, first_allreduce
    t: float
    round: int
    rank: int
    process: str  # the record file: one per process
    counter: str | None  # the launcher's restart count the rank got (starts only)


@dataclass
class Crash:
    index: int
    job: str
    t: float
    rank: int
    running: float | None = None  # crash -> every rank of the next round started
    first: float | None = None  # crash -> first all-reduce after it returned on every rank
    counters: tuple[str | None, ...] = ()  # the restart counts the next round's ranks got
    why: str = ""


@dataclass
class Outcome:
    launcher: str
    crashes: list[Crash] = field(default_factory=list)
    jobs: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def recovered(self) -> list[Crash]:
        return [c for c in self.crashes if c.first is not None]


class Run:
    """One launcher's run of the whole schedule in DIR (a job, and fresh jobs after failures)."""

    def __init__(self, launcher: str, root: Path, schedule: dict[str, object], torch_py: Path,
                 timeout: float, give_up: int) -> None:  # fmt: skip
        self.launcher = launcher
        self.give_up = give_up
        self.root = root
        self.torch_py = torch_py
        self.timeout = timeout
        self.crash_total = len(schedule["crashes"])  # type: ignore[arg-type]
        for sub in ("crashes", "events", "logs"):
            (root / sub).mkdir(parents=True)
        (root / "schedule.json").write_text(json.dumps(schedule))
        (root / "rank.py").write_text(RANK)
        self.tag = uuid.uuid4().hex
        self.procs: list[subprocess.Popen[bytes]] = []
        self.outcome = Outcome(launcher)
        self.stopped = False  # gave up (--give-up crashes in a row not recovered)
        self.limit = 0  # the crash at which the current chunk ends

    # -- records ---------------------------------------------------------------------------
    def crash_count(self) -> int:
        return len(os.listdir(self.root / "crashes"))

    def crash(self, k: int) -> dict[str, float]:
        data: dict[str, float] = json.loads((self.root / "crashes" / f"{k:04d}").read_text())
        return data

    def events(self, job: str) -> list[Event]:
        """The records of `job`'s ranks (a line cut short by a kill is skipped)."""
        found = []
        for path in (self.root / "events").glob(f"{job}.*"):
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    data = json.loads(line)
                    found.append(Event(str(data["event"]), float(data["t"]), int(data["round"]),
                                       int(data["rank"]), path.name,
                                       data.get("restart_env")))  # fmt: skip
        return found

    def round_up(self, job: str, k: int) -> bool:
        """Every rank of round k of `job` passed its first all-reduce."""
        ranks = {e.rank for e in self.events(job) if e.event == "first_allreduce" and e.round == k}
        return len(ranks) == WORLD

    # -- jobs ------------------------------------------------------------------------------
    def env(self, job: str, extra: dict[str, str]) -> dict[str, str]:
        env = bench_env({TAG_VAR: self.tag, "BENCH_JOB": job, "BENCH_LIMIT": str(self.limit),
                         "PYTHONUNBUFFERED": "1", **extra})  # fmt: skip
        for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(name, None)
        env["PATH"] = f"{self.torch_py.parent}{os.pathsep}{env.get('PATH', os.defpath)}"
        return env

    def start_job(self, job: str, budget: int) -> None:
        self.procs = []
        if self.launcher.startswith("torchrun"):
            port = free_port("")
            extra = {}
            if self.launcher == "torchrun-noshare":
                extra["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
            for node in range(NODES):
                argv = [str(self.torch_py), "-m", "torch.distributed.run",
                        "--nnodes", str(NODES), "--nproc-per-node", str(PER_NODE),
                        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                        "--rdzv-id", job, "--max-restarts", str(budget),
                        "rank.py", str(self.root)]  # fmt: skip
                self.procs.append(self.popen(argv, self.env(job, extra), f"{job}.node{node}"))
            return
        job_port, master = free_port(""), free_port("")
        for node in range(NODES):
            platform = {
                "MA_NUM_HOSTS": str(NODES),
                "MA_NUM_GPUS": str(PER_NODE),
                "VC_TASK_INDEX": str(node),
                "MA_TASK_NAME": "worker",
                "VC_WORKER_HOSTS": ",".join(["127.0.0.1"] * NODES),
                "MA_CURRENT_IP": "127.0.0.1",
                "MARUN_JOB_PORT": str(job_port),
                "MARUN_JOB_TOKEN": f"bench-{self.tag}",
                "MARUN_RUN_DIR": str(self.root / "run" / f"{job}.node{node}"),
                # Every injected crash comes seconds after its round's start: marun's guard
                # against restart loops (two such failures running end the job) would stop
                # the schedule at its second crash. torchrun has no such guard.
                "MARUN_QUICK_FAILURE": "1",
            }
            warm = ["--preload", "torch"] if self.launcher == "marun-warm" else []
            argv = [str(self.torch_py), "-m", "marun", "run", "--max-restarts", str(budget), *warm,
                    "--log-dir", str(self.root / "logs" / f"{job}.node{node}.marun"),
                    "--", "rank.py", str(self.root),
                    "--init_method", f"tcp://127.0.0.1:{master}",
                    "--rank", str(node), "--world_size", str(NODES)]  # fmt: skip
            self.procs.append(self.popen(argv, self.env(job, platform), f"{job}.node{node}"))

    def popen(self, argv: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        with (self.root / "logs" / f"{name}.txt").open("wb") as out:
            return subprocess.Popen(argv, env=env, cwd=self.root, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip

    def ended(self) -> bool:
        return all(p.poll() is not None for p in self.procs)

    def tagged(self) -> list[int]:
        """Live processes of this run (they carry its tag), whatever session they are in."""
        needle = f"{TAG_VAR}={self.tag}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        pids.append(int(entry.name))
            except (OSError, IndexError):
                continue
        return pids

    def kill_job(self) -> None:
        for _ in range(50):
            pids = self.tagged()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    # -- the whole schedule ----------------------------------------------------------------
    def go(self, until: int) -> None:
        """Inject crashes up to crash `until` (a chunk: one job, or fresh jobs after failures)."""
        outcome = self.outcome
        began = time.monotonic()
        self.limit = until
        jobs = 0
        while self.crash_count() < until and not self.stopped:
            if jobs > until - self.crash_count() + 1:
                outcome.notes.append("gave up: more jobs than crashes")
                self.stopped = True
                break
            last = outcome.crashes[-self.give_up :]
            if self.give_up and len(last) == self.give_up and all(c.why for c in last):
                outcome.notes.append(
                    f"stopped after {self.give_up} crashes in a row not recovered "
                    f"({self.crash_total - len(outcome.crashes)} not injected)"
                )
                self.stopped = True
                break
            job = f"j{outcome.jobs}"
            outcome.jobs += 1
            jobs += 1
            first_round = self.crash_count()
            self.start_job(job, until - first_round + SLACK)
            self.watch(job, first_round, outcome)
            self.kill_job()
        outcome.seconds += time.monotonic() - began

    def watch(self, job: str, first_round: int, outcome: Outcome) -> None:
        """Until the job ends (the last round's end, or a failure), or a crash is not
        recovered within the time-out. Round `first_round` must come up too (a job that fails
        before any crash would otherwise loop)."""
        seen = first_round
        up_deadline = time.monotonic() + 4 * self.timeout  # the job's first start
        pending: int | None = None  # a crash whose next round is not up yet
        while True:
            time.sleep(0.05)
            count = self.crash_count()
            if count > seen:
                pending, seen = count - 1, count
                data = self.crash(pending)
                outcome.crashes.append(Crash(pending, job, float(data["t"]), int(data["rank"])))
            if pending is not None:
                if self.round_up(job, pending + 1):
                    pending = None
                elif time.time() - outcome.crashes[-1].t > self.timeout:
                    outcome.crashes[-1].why = f"not up after {self.timeout:g}s"
                    return
            elif (
                seen == first_round
                and time.monotonic() > up_deadline
                and not self.round_up(job, first_round)
            ):
                outcome.notes.append(f"{job}: round {first_round} never came up")
                return
            if self.ended():
                if pending is not None and not self.round_up(job, pending + 1):
                    codes = [p.returncode for p in self.procs]
                    outcome.crashes[-1].why = f"the job ended, exit codes {codes}"
                elif seen < self.limit:
                    outcome.notes.append(f"{job}: ended with no crash to recover from")
                elif any(p.returncode for p in self.procs):
                    codes = [p.returncode for p in self.procs]
                    outcome.notes.append(f"{job}: the last round ended with exit codes {codes}")
                return
            if seen >= self.limit and pending is None:
                # The last round runs its final steps and ends 0; bounded too.
                deadline = time.monotonic() + self.timeout
                while not self.ended() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not self.ended():
                    outcome.notes.append(f"{job}: the last round did not end")
                elif any(p.returncode for p in self.procs):
                    codes = [p.returncode for p in self.procs]
                    outcome.notes.append(f"{job}: the last round ended with exit codes {codes}")
                return

    def measure(self) -> Outcome:
        """Figures from the records: for each recovered crash, round k+1 of the same job."""
        outcome = self.outcome
        for crash in outcome.crashes:
            if crash.why:
                continue
            nxt = [e for e in self.events(crash.job) if e.round == crash.index + 1]
            firsts: dict[int, Event] = {}
            for e in nxt:
                if e.event == "first_allreduce":
                    firsts.setdefault(e.rank, e)
            if len(firsts) < WORLD:
                crash.why = f"{len(firsts)} of {WORLD} ranks passed the first all-reduce"
                continue
            # Each rank's process that passed it (an earlier one may have been stopped): its start.
            starts = [e for e in nxt if e.event == "start" and e.process == firsts[e.rank].process]
            crash.counters = tuple(sorted({str(e.counter) for e in starts}))
            crash.running = max(e.t for e in starts) - crash.t
            crash.first = max(e.t for e in firsts.values()) - crash.t
        return outcome


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def schedule_for(crashes: int, seed: int, timeout: float, min_uptime: float = 0.0
                 ) -> dict[str, object]:  # fmt: skip
    rng = random.Random(seed)
    return {
        "min_uptime": min_uptime,  # a crash waits until its rank has run this long
        "crashes": [[rng.randrange(WORLD), rng.randint(1, 8)] for _ in range(crashes)],
        "step_seconds": 0.1,
        "final_steps": 3,
        "timeout": timeout,  # gloo's and init_process_group's, so that a stuck rank ends too
    }


def run_launchers(launchers: Sequence[str], crashes: int, chunk: int, seed: int, timeout: float,
                  give_up: int, keep: Path | None, say: Callable[[str], None],
                  min_uptime: float = 0.0) -> list[Outcome]:  # fmt: skip
    """Every launcher in turn, `chunk` crashes at a time (a fresh job each), so that the load
    of a shared machine changing during the run falls on every launcher alike."""
    venvs = Path(os.environ.get("MARUN_VENVS", REPO / ".cache" / "venvs"))
    torch_py = venvs / "torch" / "bin" / "python"
    if not torch_py.exists():
        raise SystemExit(f"no torch venv at {torch_py}: run scripts/frameworks.sh torch")
    schedule = schedule_for(crashes, seed, timeout, min_uptime)
    with tempfile.TemporaryDirectory(prefix="marun-restart-bench-") as tmp:
        base = keep or Path(tmp)
        runs = [Run(name, base / name, schedule, torch_py, timeout, give_up) for name in launchers]
        ends = [min(end, crashes) for end in range(chunk, crashes + chunk, chunk)]
        for n, until in enumerate(ends):
            order = runs[n % len(runs) :] + runs[: n % len(runs)]  # who goes first rotates
            for run in order:
                if run.stopped:
                    continue
                say(f"{run.launcher}: crashes {run.crash_count()}..{until - 1} ({load_note()})")
                try:
                    run.go(until)
                finally:
                    run.kill_job()
        outcomes = [run.measure() for run in runs]
        for run in runs:  # warm: the ranks that started cold (a spare not ready, or lost)
            if run.launcher == "marun-warm":
                logs = (p.read_text(errors="replace") for p in (run.root / "logs").glob("*.txt"))
                cold = sum(text.count(" starts cold: ") for text in logs)
                run.outcome.notes.append(f"cold starts (of {WORLD} per round): {cold}")
    for outcome in outcomes:
        say(f"{outcome.launcher}: {len(outcome.recovered)}/{len(outcome.crashes)} recovered, "
            f"{outcome.jobs} job(s), {outcome.seconds:.0f}s")  # fmt: skip
        for crash in outcome.crashes:
            if crash.why:
                say(f"  crash {crash.index} (rank {crash.rank}): {crash.why}")
        for note in outcome.notes:
            say(f"  {note}")
    return outcomes


def table(outcomes: Sequence[Outcome]) -> list[str]:
    header = ("launcher", "recovered", "all running p50", "p95", "first all-reduce p50", "p95",
              "restart count agreed")  # fmt: skip
    lines = [header]
    for o in outcomes:
        rec = o.recovered
        running = [c.running for c in rec if c.running is not None]
        first = [c.first for c in rec if c.first is not None]
        lines.append((o.launcher, f"{len(rec)}/{len(o.crashes)}",
                      seconds(pct(running, 50) if running else None),
                      seconds(pct(running, 95) if running else None),
                      seconds(pct(first, 50) if first else None),
                      seconds(pct(first, 95) if first else None),
                      f"{sum(len(c.counters) == 1 for c in rec)}/{len(rec)}"))  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]


def ratio_rows(outcomes: Sequence[Outcome]) -> list[Row]:
    """marun's figures (cold, and warm) against each torchrun variant of the run, and warm
    against cold (or alone when no baseline ran)."""
    by = {o.launcher: o for o in outcomes}
    rows: list[Row] = []
    for name in ("marun", "marun-warm"):
        mine_o = by.get(name)
        if mine_o is None or not mine_o.recovered:
            continue
        others: list[Outcome | None] = [
            o for o in outcomes if o.launcher.startswith("torchrun")
            or (name == "marun-warm" and o.launcher == "marun")
        ] or [None]  # fmt: skip
        for figure in ("running", "first"):
            label = "all running" if figure == "running" else "first all-reduce"
            for q in (50, 95):
                mine = pct([getattr(c, figure) for c in mine_o.recovered], q)
                for other in others:
                    base, ratio = "-", "-"
                    if other is not None and not other.recovered:
                        base = f"none recovered ({other.launcher})"
                    elif other is not None:
                        theirs = pct([getattr(c, figure) for c in other.recovered], q)
                        base, ratio = f"{theirs:.2f} s ({other.launcher})", f"{mine / theirs:.2f}"
                    goal, met = "-", None
                    if figure == "running" and q == 95:
                        goal, met = "<= 1.5 s", mine <= 1.5
                    elif figure == "first" and ratio != "-" and name == "marun-warm":
                        goal, met = "<= 0.5x", float(ratio) <= 0.5
                    elif figure == "first" and ratio != "-":
                        goal, met = "< torchrun", float(ratio) < 1
                    rows.append(Row("restart", f"{name} {label} p{q}", f"{mine:.2f} s", base,
                                    ratio, goal, met))  # fmt: skip
        total = len(mine_o.crashes) or 1
        rows.append(Row("restart", f"{name} recovered", f"{len(mine_o.recovered)}/{total}", "-",
                        "-", "all", len(mine_o.recovered) == total))  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)  # fmt: skip
    parser.add_argument("--crashes", type=int, default=20, help="crashes injected per launcher")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS),
                        help="comma list of " + ", ".join(LAUNCHERS))  # fmt: skip
    parser.add_argument("--chunk", type=int, default=5,
                        help="crashes per job; launchers take turns chunk by chunk")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1, help="the crash schedule's seed")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds a crash may take to recover (else: not recovered)",
    )
    parser.add_argument("--min-uptime", type=float, default=0.0,
                        help="seconds every round runs before its crash (marun-warm's spares "
                        "import meanwhile; the same for every launcher)")  # fmt: skip
    parser.add_argument("--give-up", type=int, default=3,
                        help="stop a launcher after this many crashes in a row not recovered "
                        "(each costs --timeout or a fresh job; 0: never)")  # fmt: skip
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the records and logs in this (new) directory")  # fmt: skip
    args = parser.parse_args()
    launchers = args.launchers.split(",")
    unknown = [name for name in launchers if name not in LAUNCHERS]
    if unknown or args.crashes < 1:
        parser.error(f"launchers: {', '.join(LAUNCHERS)}; crashes >= 1")
    print(f"restart bench: {NODES} nodes x {PER_NODE} ranks on loopback, gloo, "
          f"{args.crashes} crashes (seed {args.seed}), {load_note()}", flush=True)  # fmt: skip
    outcomes = run_launchers(launchers, args.crashes, max(1, args.chunk), args.seed,
                             args.timeout, args.give_up, args.keep,
                             lambda line: print(line, flush=True), args.min_uptime)  # fmt: skip
    print()
    for line in table(outcomes):
        print(line)
    rows = ratio_rows(outcomes)
    if rows:
        print()
        print_rows(rows)
    print(f"({load_note()} at the end)")


if __name__ == "__main__":
    main()

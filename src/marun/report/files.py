"""What a job's marun wrote under its log directory, found and read: node 0's job.json, every
node's result.json (`result.<name>.json` where several share a directory, as under `marun
simulate`) and marun-events.log (docs/supervision.md, "Record"). Files only: nothing of the
job's or the runtime's code, so a report of a job from another marun version still reads."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from marun.errors import InputError, bad_value

TAIL_LINES = 5  # the first failure's last lines shown in the text
_SEARCH_DEPTH = 4  # LOG_DIR/simulate/node0/job.json is 2 deep


def default_log_dir(env: dict[str, str] | None = None) -> Path:
    """Where `marun run` writes when no --log-dir is given: MARUN_LOG_DIR, else
    $MA_LOG_DIR/marun, else ./marun_logs (docs/configuration.md)."""
    e = os.environ if env is None else env
    if e.get("MARUN_LOG_DIR"):
        return Path(e["MARUN_LOG_DIR"])
    if e.get("MA_LOG_DIR"):
        return Path(e["MA_LOG_DIR"]) / "marun"
    return Path("marun_logs")


def _walk(root: Path, depth: int = _SEARCH_DEPTH) -> Iterator[Path]:
    """Files under root, shallowest first, at most `depth` directories down."""
    level = [root]
    for _ in range(depth + 1):
        subdirs: list[Path] = []
        for directory in level:
            try:
                entries = sorted(directory.iterdir())
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir() and not entry.is_symlink():
                    subdirs.append(entry)
                elif entry.is_file():
                    yield entry
        level = subdirs


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def time_of(value: object) -> float | None:
    """job.json's and result.json's times: ISO 8601 text, or wall-clock seconds (a round's)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


_EVENT = re.compile(r"^(\S+)\s+\[(\w+)\s*\]\s+(\w+)")


def read_events(path: Path) -> dict[str, Any]:
    """marun-events.log in its readable form (or JSON lines): how many warnings and errors, and
    the names of the errors."""
    counts = {"warning": 0, "error": 0}
    errors: list[str] = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return {"path": str(path), "warnings": 0, "errors": 0, "error_events": []}
    for line in lines:
        level = name = None
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                level, name = str(record.get("level", "")), str(record.get("event", ""))
        else:
            match = _EVENT.match(line)
            if match:
                level, name = match.group(2), match.group(3)
        if level in counts:
            counts[level] += 1
            if level == "error" and name and name not in errors:
                errors.append(name)
    return {
        "path": str(path),
        "warnings": counts["warning"],
        "errors": counts["error"],
        "error_events": errors,
    }


def tail_of(log: object, lines: int = TAIL_LINES) -> list[str]:
    if not isinstance(log, str):
        return []
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def index_of(value: object) -> int:
    """A node's index as the files give it (0 where they give none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def seconds_between(later: float | None, earlier: float | None) -> float | None:
    if later is None or earlier is None:
        return None
    return round(max(0.0, later - earlier), 3)


@dataclass(frozen=True)
class Found:
    """A log directory's files: job.json (node 0's, the shallowest), every node's result (not
    the simulator's own), the events files."""

    log_dir: Path
    job_path: Path | None
    job: dict[str, Any] | None
    results: list[tuple[Path, dict[str, Any]]]
    events: list[Path]

    @property
    def lead(self) -> dict[str, Any]:
        """Node 0's result.json, else the first one found ({} when none)."""
        node0 = next((d for _, d in self.results if d.get("node") in (0, None)), None)
        return node0 or (self.results[0][1] if self.results else {})

    def processes(self) -> dict[int, list[dict[str, Any]]]:
        """Each node's processes, from its result.json."""
        out: dict[int, list[dict[str, Any]]] = {}
        for _, data in self.results:
            procs = data.get("processes") or []
            out.setdefault(index_of(data.get("node")), []).extend(
                p for p in procs if isinstance(p, dict)
            )
        return out

    def events_file(self) -> Path | None:
        """The events beside job.json (else beside the first result, else the first found)."""
        near = self.job_path or (self.results[0][0] if self.results else None)
        here = [p for p in self.events if near is not None and p.parent == near.parent]
        choice = here or self.events
        return choice[0] if choice else None


def find(log_dir: Path) -> Found:
    if not log_dir.is_dir():
        raise bad_value("LOG_DIR", str(log_dir), "a directory marun wrote a job's logs to")
    job_path: Path | None = None
    results: list[tuple[Path, dict[str, Any]]] = []
    events: list[Path] = []
    for path in _walk(log_dir):
        if path.name == "job.json" and job_path is None:
            job_path = path
        elif re.fullmatch(r"result(\.[\w.-]+)?\.json", path.name):
            data = _load(path)
            # the simulator's own record (its "processes" are the simulated nodes) is no node's
            if data and not str(data.get("mode", "")).startswith("simulate"):
                results.append((path, data))
        elif path.name == "marun-events.log":
            events.append(path)
    job = _load(job_path) if job_path else None
    if job is None and not results and not events:
        raise InputError(
            f"LOG_DIR={str(log_dir)!r}: expected job.json, result.json or marun-events.log "
            "in it or below it (where `marun run` wrote its logs: --log-dir, MARUN_LOG_DIR, "
            "$MA_LOG_DIR/marun or ./marun_logs)"
        )
    results.sort(key=lambda item: (index_of(item[1].get("node")), str(item[0])))
    return Found(log_dir, job_path if job else None, job, results, events)

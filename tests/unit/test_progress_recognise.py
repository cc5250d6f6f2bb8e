"""The step counters marun reads from a rank's output (marun/progress/recognise.py, tracker.py),
on real output captured from each framework (tests/data/progress, made by
tests/scripts/progress_samples: tqdm 4.70, transformers 5.24 Trainer, Lightning 2.6 with its
TQDM and its Rich bar, Keras 3.15, MindSpore 2.10). A plain `step N` / `iter N` and a user's
pattern have no framework of their own: those lines are written here."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import REPO
from marun.plan.launch_plan import ProcessSpec
from marun.progress.recognise import Reading, Recogniser
from marun.progress.tracker import MAX_RANKS_SENT, NodeReport, Tracker
from marun.runtime.node_progress import NodeProgress
from marun.runtime.output import Console, OutputStream, new_tail

DATA = REPO / "tests" / "data" / "progress"


def _writes(data: bytes) -> list[bytes]:
    """The sample as its process wrote it, one piece per line or `\\r` redraw (each a read)."""
    return [piece for piece in re.split(rb"(?<=[\r\n])", data) if piece]


def _steps(name: str) -> list[tuple[float, int | None]]:
    """(step, total) after each write of the sample, as a rank's tracker counts them."""
    tracker = Tracker()
    seen: list[tuple[float, int | None]] = []
    for now, piece in enumerate(_writes((DATA / name).read_bytes())):
        tracker.feed(0, piece, float(now))
        report = tracker.report(float(now))
        if report is not None:
            step = (report.ranks[0].step, report.ranks[0].total)
            if not seen or seen[-1] != step:
                seen.append(step)
    return seen


def test_tqdm() -> None:
    assert _steps("tqdm_loop.txt") == [(n, 50) for n in range(51)]


def test_transformers_trainer_bar_and_log_dicts() -> None:
    steps = _steps("transformers_trainer.txt")  # the dicts beside the bar: the bar counts
    assert steps[0] == (0, 12) and steps[-1] == (12, 12)
    assert all(total == 12 for _, total in steps)
    assert [s for s, _ in steps] == sorted(s for s, _ in steps)


def test_transformers_trainer_log_dicts_alone_count_epochs() -> None:
    assert _steps("transformers_trainer_dicts.txt") == [
        (0.25, None),
        (0.5, None),
        (0.75, None),
        (1, None),
    ]
    tracker = Tracker()
    tracker.feed(0, (DATA / "transformers_trainer_dicts.txt").read_bytes(), 0.0)
    report = tracker.report(0.0)
    assert report is not None and report.unit == "epochs"


def test_lightning_tqdm_bar_counts_across_epochs() -> None:
    steps = _steps("lightning_fit.txt")  # `Epoch 0: ... 10/10`, then `Epoch 1: ... 1/10`
    assert steps[0] == (0, None)  # `Training: | 0/? [`: no total yet
    assert [s for s, _ in steps] == list(range(21))


def test_lightning_rich_bar() -> None:
    # On a pipe Rich prints the bar once, at the end: `Epoch 1/1  ━━━ 10/10 0:00:00 • ...`
    assert _steps("lightning_fit_rich.txt") == [(10, None)]  # no count of epochs: no total


def test_keras_epochs_and_bars() -> None:
    steps = _steps("keras_fit.txt")  # `Epoch 1/3`, `1/20 ━━━`, ... `20/20 ━━━`, `Epoch 2/3` ...
    # the header alone: epoch 1 begins, its steps not known yet; then 20 a epoch, 3 epochs
    assert steps == [(0, None), (1, 60), (20, 60), (21, 60), (40, 60), (41, 60), (60, 60)]


def test_mindspore_loss_monitor() -> None:
    steps = _steps("mindspore_train.txt")  # `epoch: 1 step: 1, loss is ...` to epoch 2 step 8
    assert steps == [(n, None) for n in range(1, 17)]


@pytest.mark.parametrize(
    ("line", "step", "total"),
    [
        ("step 45", 45, None),
        ("Step: 45/100 loss=0.3", 45, 100),
        ("iter 7 | lr 0.1", 7, None),
        (" iteration       10/     100 | consumed samples: 640", 10, 100),  # Megatron's form
        ("train step=12", 12, None),
    ],
)
def test_plain_step_lines(line: str, step: int, total: int | None) -> None:
    assert Recogniser().read(line) == Reading(step, total)


@pytest.mark.parametrize(
    "line", ["loading 3 shards", "stepping down", "Epoch took 5s", "10/20/2024 12:00", ""]
)
def test_lines_without_a_counter(line: str) -> None:
    assert Recogniser().read(line) is None


def test_a_users_pattern() -> None:
    named = Recogniser(r"batch (?P<step>\d+) of (?P<total>\d+)")
    assert named.read("[train] batch 30 of 400, loss 1.2") == Reading(30, 400)
    assert named.read("step 45") is None  # the user's pattern replaces the known ones
    assert Recogniser(r"it=(\d+)").read("it=9 loss=1") == Reading(9, None)
    assert Recogniser(r"(\d+)/(\d+) done").read("12/30 done") == Reading(12, 30)


def test_the_latest_counter_of_a_block_is_its_last() -> None:
    block = b"step 1\nstep 2\nsaving checkpoint\n\r 40%|####  | 4/10 [00:01<00:01]\rWARNING x\n"
    assert Recogniser().latest(block) == Reading(4, 10)
    assert Recogniser().latest(b"nothing here\n") is None


def test_a_rank_s_rate_over_the_window() -> None:
    tracker = Tracker(window=60.0)
    for second in range(0, 121, 10):
        tracker.feed(3, b"step %d\n" % (second // 2), float(second))
    report = tracker.report(120.0)
    assert report is not None
    (rank,) = report.ranks
    assert (rank.rank, rank.step, rank.total) == (3, 60, None)
    assert rank.rate == pytest.approx(0.5)
    # no step for a while: the rate falls (5 steps in the window's 60 s, 110 s to 170 s)
    late = tracker.report(170.0)
    assert late is not None and late.ranks[0].rate == pytest.approx(5 / 60, rel=1e-3)


def test_no_progress_no_report() -> None:
    tracker = Tracker()
    tracker.feed(0, b"loading\nready\n", 1.0)
    assert tracker.report(2.0) is None


def test_the_report_is_bounded_and_goes_through_json() -> None:
    tracker = Tracker()
    for rank in range(MAX_RANKS_SENT + 36):
        tracker.feed(rank, b"step 1\n", 0.0)
        tracker.feed(rank, b"step %d\n" % (10 + rank), 10.0)
    report = tracker.report(10.0)
    assert report is not None
    assert len(report.ranks) == MAX_RANKS_SENT and report.more == 36
    assert [r.rank for r in report.ranks] == list(range(MAX_RANKS_SENT))  # the slowest
    wire = json.dumps(report.to_wire())
    assert len(wire) < 40 * MAX_RANKS_SENT
    assert NodeReport.from_wire(json.loads(wire)) == report
    with pytest.raises(ValueError):
        NodeReport.from_wire({"ranks": [[0, 1, None, None]] * (MAX_RANKS_SENT + 1)})


def test_the_relay_hands_its_reads_to_the_node_s_progress(tmp_path: Path) -> None:
    """A shown rank's reads, by reference; a rank not shown: its log's end. Parsed only when
    the node reports."""
    specs = [
        ProcessSpec(f"w{r}", ("x",), {}, "/", str(tmp_path / f"w{r}.log"), rank=r + 4)
        for r in range(2)
    ]
    progress = NodeProgress(1, specs)
    console_fd = os.open(tmp_path / "console", os.O_WRONLY | os.O_CREAT, 0o600)
    console = Console(console_fd)
    console.progress = progress
    log_fd = os.open(specs[0].log, os.O_WRONLY | os.O_CREAT, 0o600)
    stream = OutputStream(log_fd, console, b"[1:4] ", new_tail())
    (tmp_path / "w1.log").write_bytes(b"epoch: 1 step: 7, loss is 0.5\n")  # writes it itself
    stream.feed(b"\r 10%|#  | 10/100 [00:01<00:09]")
    first = progress.report(1.0)
    stream.feed(b"\r 20%|## | 20/100 [00:02<00:08]")
    stream.feed(b"\nsaving\n")
    second = progress.report(11.0)
    stream.close()
    os.close(log_fd)
    os.close(console_fd)
    assert first is not None and second is not None
    assert [(r.rank, r.step, r.total) for r in first.ranks] == [(4, 10, 100), (5, 7, None)]
    # rank 5 seen once: no rate yet
    assert [(r.rank, r.step, r.rate) for r in second.ranks] == [(4, 20, 1.0), (5, 7, None)]

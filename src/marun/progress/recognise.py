"""Step counters in a rank's output, as the frameworks print them (real samples in
tests/data/progress, captured by tests/scripts/progress_samples):

- tqdm bars, redrawn with `\\r`: ` 37%|###7      | 37/100 [00:05<00:10, 7.2it/s]`;
  transformers.Trainer's bar is one, Lightning's adds its epoch: `Epoch 3:  45%|...| 45/100 [`;
- Lightning's Rich bar (where `rich` is installed): `Epoch 1/9  ━━━━ 45/100 0:00:03 • ...`;
- Keras: `Epoch 2/5`, then `45/100 ━━━━━` (Keras 3) or `45/100 [====>....]` (Keras 2), ANSI
  colours and backspaces around them;
- MindSpore's LossMonitor: `epoch: 2 step: 45, loss is 0.31`;
- transformers.Trainer's log dicts: `{'loss': ..., 'epoch': 0.37}`: epochs, not steps (the dict
  has no step), so they count only for a rank that prints no bar;
- a plain `step 45`, `step: 45/100`, `iter 45`, `iteration 45 / 100`;
- a user's pattern (`--progress-pattern`): a named group `step` (and `total`), else the first
  group (and the second).

Only a block's last lines are looked at (`latest`): the latest counter is all a report needs,
so the cost is per look, not per line of output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOOK_BYTES = 4096  # of a block's end looked at
LOOK_SEGMENTS = 32  # lines (or `\r`-redrawn pieces of one) looked at, from the end
_TEXT = 400  # characters of one piece matched (a bar's counter is near its start)

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\b]")
_SPLIT = re.compile(r"[\r\n]")
# A tqdm bar: `| 37/100 [` (`?` as the total while it is unknown); `37it [` without a total.
_TQDM = re.compile(r"\|\s*(\d+)/(\d+|\?)\s*\[|(?:^|\s)(\d+)it \[")
_LIGHTNING_EPOCH = re.compile(r"^\s*Epoch (\d+):")
_RICH = re.compile(r"^\s*Epoch (\d+)/\d+\s+\S+\s+(\d+)/(\d+)\s")
_KERAS_EPOCH = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
_KERAS_BAR = re.compile(r"^\s*(\d+)/(\d+)\s+(?:━|\[[=>.]|-\s)")
_MINDSPORE = re.compile(r"epoch:\s*(\d+)\s+step:\s*(\d+)")
_DICT = re.compile(r"^\s*\{'.*'epoch': '?(\d+(?:\.\d+)?)'?")
_PLAIN = re.compile(r"\b(?:step|iter|iteration)\b\s*[:=#]?\s*(\d+)(?:\s*/\s*(\d+))?", re.I)


@dataclass(frozen=True)
class Reading:
    """One counter as a rank printed it. `step` counts in `unit` (`steps`, or `epochs` for a
    Trainer log dict); `total` where the counter says; `epoch` where the steps restart with each
    epoch (Lightning, Keras, MindSpore), `epochs` where the count of epochs is printed (Keras).
    `step` None: an epoch's header alone (Keras' `Epoch 2/5`): that epoch begins."""

    step: float | None
    total: int | None = None
    epoch: int | None = None
    epochs: int | None = None
    unit: str = "steps"


class Recogniser:
    """The formats above, tried in order on each piece of a line: the user's pattern first."""

    def __init__(self, pattern: str | None = None) -> None:
        self._user = re.compile(pattern) if pattern else None

    def read(self, piece: str) -> Reading | None:
        """The counter in one piece of a line (no `\\r` or `\\n` in it), or None."""
        if "\x1b" in piece or "\b" in piece:
            piece = _ESCAPES.sub("", piece)
        piece = piece[:_TEXT]
        if self._user is not None:
            found = self._user.search(piece)
            return _user_reading(found) if found else None
        if "/" in piece:
            reading = _slashed(piece)
            if reading is not None:
                return reading
        return _worded(piece)

    def latest(self, data: bytes) -> Reading | None:
        """The latest counter in the end of `data` (`LOOK_BYTES`): the last step counter, with
        its epoch where a header printed before it in the window says it; else the last epoch
        header (that epoch begins) or the last epoch-only reading (a Trainer log dict)."""
        text = data[-LOOK_BYTES:].decode("utf-8", "replace")
        pieces = _SPLIT.split(text)[-LOOK_SEGMENTS:]
        found: Reading | None = None
        fallback: Reading | None = None
        for piece in reversed(pieces):
            if not piece or piece.isspace():
                continue
            reading = self.read(piece)
            if reading is None:
                continue
            if reading.step is None:  # an epoch's header
                if found is None:
                    return fallback if fallback is not None else reading
                return Reading(found.step, found.total, reading.epoch, reading.epochs)
            if reading.unit != "steps":
                fallback = fallback or reading
            elif found is None:
                found = reading
                if found.epoch is not None:
                    return found
        return found if found is not None else fallback


def _slashed(piece: str) -> Reading | None:
    """The counters written `a/b`: bars, Keras, Lightning's Rich bar, `step a/b`."""
    bar = _TQDM.search(piece)
    if bar is not None:
        if bar.group(3) is not None:
            return Reading(int(bar.group(3)))
        total = None if bar.group(2) == "?" else int(bar.group(2))
        epoch = _LIGHTNING_EPOCH.match(piece)
        return Reading(int(bar.group(1)), total, int(epoch.group(1)) if epoch else None)
    rich = _RICH.match(piece)
    if rich is not None:
        return Reading(int(rich.group(2)), int(rich.group(3)), int(rich.group(1)))
    header = _KERAS_EPOCH.match(piece)
    if header is not None:
        return Reading(None, None, int(header.group(1)), int(header.group(2)))
    keras = _KERAS_BAR.match(piece)
    if keras is not None:
        return Reading(int(keras.group(1)), int(keras.group(2)))
    return None


def _worded(piece: str) -> Reading | None:
    """The counters written in words: MindSpore's, a Trainer log dict, `step N`."""
    if "poch" in piece:
        found = _MINDSPORE.search(piece)
        if found is not None:
            return Reading(int(found.group(2)), None, int(found.group(1)))
        found = _DICT.match(piece)
        if found is not None:
            return Reading(float(found.group(1)), unit="epochs")
    found = _PLAIN.search(piece)
    if found is not None:
        total = found.group(2)
        return Reading(int(found.group(1)), int(total) if total else None)
    return None


def _user_reading(found: re.Match[str]) -> Reading | None:
    names = found.groupdict()
    step = names.get("step") if "step" in names else found.group(1) if found.re.groups else None
    if "total" in names:
        total = names.get("total")
    else:
        total = found.group(2) if found.re.groups >= 2 and "step" not in names else None
    try:
        return Reading(float(step) if step else None, int(total) if total else None)
    except ValueError:
        return None

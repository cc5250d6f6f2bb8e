"""The plan's JSON is rendered by a faster encoder that must write exactly what
`json.dumps(indent=2)` writes."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from marun.inputs.injected import read_platform
from marun.inputs.settings import Settings
from marun.launch import build_plan
from marun.plan.render import indented_json, masked_dict, render_json

ODD = [
    {},
    [],
    {"a": {}, "b": [], "c": [[], {}], "d": None, "e": True, "f": False, "g": 0, "h": -12},
    {"unicode": "héllo ✓ \U0001f600", "ctrl": 'tab\there\nnl "q" \\ \x00 \x7f'},
    ("tuple", 1, [2, (3,)]),
    {"big": 10**30, "nested": {"deep": {"deeper": [{"x": "y"}]}}},
]


@pytest.mark.parametrize("value", ODD)
def test_odd_values_as_json_writes_them(value: Any) -> None:
    assert indented_json(value) == json.dumps(value, indent=2)


def test_random_structures_as_json_writes_them() -> None:
    rnd = random.Random(7)

    def make(depth: int) -> Any:
        kind = rnd.randrange(7 if depth < 4 else 4)
        if kind == 0:
            return "".join(chr(rnd.randrange(0, 0x2FF)) for _ in range(rnd.randrange(6)))
        if kind == 1:
            return rnd.randrange(-(10**6), 10**6)
        if kind == 2:
            return rnd.choice([True, False, None])
        if kind == 3:
            return str(rnd.random())
        if kind in (4, 5):
            keys = [f"k{i}" + chr(rnd.randrange(0x20, 0x2FF)) for i in range(rnd.randrange(4))]
            return {key: make(depth + 1) for key in keys}
        return [make(depth + 1) for _ in range(rnd.randrange(4))]

    for _ in range(300):
        value = make(0)
        assert indented_json(value) == json.dumps(value, indent=2)


def test_finite_floats_as_json_writes_them_and_other_types_are_left_to_json() -> None:
    """Finite floats are written here (every plan has some: its supervision's seconds), as
    json writes them; nan, inf and non-string keys go to the json module."""
    from marun.plan import render

    for value in (1.5, 30.0, 0.1, 1e-7, 1e22, -2.5e-5, 0.30000000000000004):
        assert indented_json({"f": value}) == json.dumps({"f": value}, indent=2)
    for odd in (math.nan, math.inf):
        with pytest.raises(render._NotPlain):
            indented_json({"f": odd})
    with pytest.raises(render._NotPlain):
        indented_json({1: "int key"})


def test_plans_of_every_mode_render_as_json_writes_them(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    env = {
        "MA_NUM_HOSTS": "3",
        "MA_NUM_GPUS": "2",
        "VC_TASK_INDEX": "0",
        "VC_WORKER_HOSTS": "127.0.0.1,10.0.0.2,10.0.0.3",
        "API_TOKEN": "secret",
    }
    appended = ["--init_method", "tcp://127.0.0.1:29500", "--rank", "0", "--world_size", "3"]
    for mode, extra in (("pytorch", appended), ("mindspore", [])):
        platform = read_platform(
            ["train.py", "--password", "x", *extra], env, str(tmp_path), Settings(nic="lo")
        )
        plan = build_plan(mode, platform, all_nodes=True)
        assert render_json(plan) == json.dumps(masked_dict(plan), indent=2) + "\n"

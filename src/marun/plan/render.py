"""The plan for tools (json, yaml), secrets masked. The table for people is
marun.plan.render_table: the path to exec writes the JSON alone."""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii as _string

from marun.plan.launch_plan import LaunchPlan
from marun.redact import mask_argv, mask_env

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from typing import Any


def masked_dict(plan: LaunchPlan) -> dict[str, Any]:
    data = plan.to_dict()
    for node in data["nodes"]:
        for proc in node["processes"]:
            proc["env"] = mask_env(proc["env"])
            proc["argv"] = mask_argv(proc["argv"])
    return data


def render_json(plan: LaunchPlan) -> str:
    data = masked_dict(plan)
    try:
        return indented_json(data) + "\n"
    except _NotPlain:
        return json.dumps(data, indent=2) + "\n"


class _NotPlain(Exception):
    """A value indented_json leaves to the json module."""


def indented_json(value: object) -> str:
    """Exactly `json.dumps(value, indent=2)` for dicts with string keys, lists, strings, ints,
    finite floats, bools and None, several times faster: json's indenting encoder is pure
    Python, one generator per container, and a plan of every node of a large job has hundreds of
    thousands of them."""
    parts: list[str] = []
    _encode(value, "\n", parts)
    return "".join(parts)


def _encode(value: object, newline: str, parts: list[str]) -> None:
    # `newline` is "\n" and the indentation of the line `value` starts on.
    if isinstance(value, str):
        parts.append(_string(value))
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif type(value) is int:
        parts.append(int.__repr__(value))
    elif type(value) is float and math.isfinite(value):  # the supervision's seconds
        parts.append(float.__repr__(value))
    elif isinstance(value, dict):
        if not value:
            parts.append("{}")
            return
        inner = newline + "  "
        sep = "{" + inner
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotPlain
            parts.append(sep)
            parts.append(_string(key))
            parts.append(": ")
            _encode(item, inner, parts)
            sep = "," + inner
        parts.append(newline + "}")
    elif isinstance(value, (list, tuple)):
        if not value:
            parts.append("[]")
            return
        inner = newline + "  "
        sep = "[" + inner
        for item in value:
            parts.append(sep)
            _encode(item, inner, parts)
            sep = "," + inner
        parts.append(newline + "]")
    else:
        raise _NotPlain


def render_yaml(plan: LaunchPlan) -> str:
    import yaml

    return str(yaml.safe_dump(masked_dict(plan), sort_keys=False, width=100))

"""Which names hold secrets, and how to keep their values out of every output.

A variable is secret when its name contains KEY, SECRET, TOKEN, PASSWORD, PASSWD or CREDENTIAL,
or when one of its `_`-separated words is AK or SK (an access key pair: `AK`, `MA_SK`, `OBS_AK`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

MASK = "***"
_SUBSTRINGS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL")
_WORDS = frozenset({"AK", "SK"})
_WORD_SPLIT = re.compile(r"[^A-Z0-9]+")


@lru_cache(maxsize=4096)  # a plan of every node asks about the same few names again and again
def is_secret_name(name: str) -> bool:
    upper = name.upper()
    if any(s in upper for s in _SUBSTRINGS):
        return True
    return any(word in _WORDS for word in _WORD_SPLIT.split(upper))


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) else v) for k, v in env.items()}


def mask_argv(argv: Sequence[str]) -> list[str]:
    """Mask the values of secret-named options (`--api_key X`, `--password=X`) and `NAME=value`
    words with a secret name (as in `env TOKEN=x cmd` or mpirun's `-x NAME=value`)."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if word.startswith("-"):
            name, eq, _ = word.lstrip("-").partition("=")
            if is_secret_name(name):
                if eq:
                    out.append(word.split("=", 1)[0] + "=" + MASK)
                else:
                    out.append(word)
                    hide_next = True
                continue
        elif "=" in word:
            name = word.split("=", 1)[0]
            if name.isidentifier() and is_secret_name(name):
                out.append(name + "=" + MASK)
                continue
        out.append(word)
    return out

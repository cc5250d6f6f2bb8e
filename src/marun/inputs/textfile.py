"""Reading an input file (config, rank table, Volcano host list) as text, with every way it can
fail turned into one line of bad input: missing, unreadable, a name too long, larger than any
real input (it is refused before it is read), not UTF-8.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from marun.errors import InputError, bad_value

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")

MAX_INPUT_BYTES = 16 * 1024 * 1024  # a rank table of 100000 devices is about 10 MiB


def read_input_text(path: str, what: str, expected: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of `path`. `what` names the file in errors (`config file`, `rank table`),
    `expected` says what it should be (`a YAML file`)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise InputError(
                    f"{what} {path}: {size} bytes: expected {expected} of at most {limit} bytes"
                )
            data = fh.read(limit + 1)
    except (FileNotFoundError, NotADirectoryError):
        raise bad_value(what, path, f"an existing file ({expected})") from None
    except IsADirectoryError:
        raise bad_value(what, path, f"a file, not a directory ({expected})") from None
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:  # a file that grew, or one whose size the stat did not tell (/proc)
        raise InputError(f"{what} {path}: over {limit} bytes: expected {expected}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{what} {path}: not UTF-8 text (byte {exc.start}): expected {expected}"
        ) from None


def parse_guarded(parse: Callable[[str], T], text: str, what: str) -> T:
    """`parse(text)`, with a document nested too deep for the parser (`[[[[...]]]]`, which
    makes json and yaml recurse until Python stops them) reported as bad input."""
    try:
        return parse(text)
    except RecursionError:
        raise nested_too_deeply(what) from None


def nested_too_deeply(what: str) -> InputError:
    """The one line for a document nested past what its parser takes (Python's recursion limit,
    or a parser's own limit such as libyaml's)."""
    return InputError(f"{what}: nested too deeply: expected a plain document")

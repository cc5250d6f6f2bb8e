"""The one parser for numbers marun reads from the platform, the user and files.

Only ASCII digits count: `str.isdigit()` also takes superscripts such as `²` (which `int()` then
refuses with a traceback) and other scripts' digits (which `int()` reads), and `int()` takes
`+1`, `1_0` and ` 1 `, which no platform writes.
Every number has bounds: a count far beyond any real job (`MA_NUM_HOSTS=100000000`) would
otherwise make marun build lists until it runs out of memory.
"""

from __future__ import annotations

import math

from marun.errors import bad_value

MAX_NODES = 100_000  # nodes in one job
MAX_PROCS_PER_NODE = 1024  # processes (devices) per node
MAX_RANKS = MAX_NODES * MAX_PROCS_PER_NODE
MAX_SECONDS = 31_536_000.0  # a year: any wait longer than that is a typo
PORT_MIN, PORT_MAX = 1, 65535
_MAX_DIGITS = 18  # more than any bound here; int() of a huge string is itself slow


def is_digits(text: str) -> bool:
    """`text` is one or more ASCII digits and nothing else."""
    return len(text) > 0 and text.isascii() and text.isdigit()


def parse_int(name: str, raw: object, minimum: int = 0, maximum: int = MAX_RANKS) -> int:
    """`raw` (a string of ASCII digits, surrounding blanks allowed, or an int) as an integer
    from `minimum` to `maximum`; InputError naming `name` otherwise."""
    expected = f"an integer from {minimum} to {maximum}"
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and is_digits(raw.strip()) and len(raw.strip()) <= _MAX_DIGITS:
        value = int(raw.strip())
    else:
        raise bad_value(name, raw, expected)
    if not minimum <= value <= maximum:
        raise bad_value(name, raw, expected)
    return value


def is_port(value: int) -> bool:
    """A TCP port number (1-65535): the one bound every port of the inputs is checked against."""
    return PORT_MIN <= value <= PORT_MAX


def check_port_number(setting: str, port: int) -> int:
    """A port setting's value as given (a `Settings` built by hand skips the parser): 1-65535."""
    if not is_port(port):
        raise bad_value(
            setting,
            port,
            f"a TCP port in {PORT_MIN}-{PORT_MAX} (config key {setting}, MARUN_{setting.upper()})",
        )
    return port


def check_positive_seconds(setting: str, value: float) -> float:
    """A time-out setting that must pass (a wait of 0 s, or nan, would end at once): > 0 and
    finite. The one check of the time-outs the job's coordination and MPI mode need."""
    if not 0 < value < math.inf:
        raise bad_value(setting, value, f"a number of seconds > 0 (MARUN_{setting.upper()})")
    return value


def parse_port(name: str, raw: object, minimum: int = PORT_MIN) -> int:
    return parse_int(name, raw, minimum, PORT_MAX)


def parse_seconds(name: str, raw: object, minimum: float = 0.0) -> float:
    """A finite number of seconds from `minimum` to a year: nan and inf are refused (nan
    compares false with every bound, so it would pass any check written as `x < min`)."""
    expected = f"a number of seconds from {minimum:g} to {MAX_SECONDS:.0f} (a year)"
    if isinstance(raw, bool):
        raise bad_value(name, raw, expected)
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            raise bad_value(name, raw, expected) from None
    else:
        raise bad_value(name, raw, expected)
    if not math.isfinite(value) or not minimum <= value <= MAX_SECONDS:
        raise bad_value(name, raw, expected)
    return value

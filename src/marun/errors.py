"""The errors marun reports to its user, each with the exit code it ends with."""

from __future__ import annotations

EXIT_BAD_INPUT = 2


class MarunError(Exception):
    """A failure the user can act on: printed as one line, no traceback."""

    exit_code = 1


class InputError(MarunError):
    """Bad or unusable input (env, argument, rank table, config, script): nothing was started.

    The message names what is wrong, the value seen, and what was expected.
    """

    exit_code = EXIT_BAD_INPUT


def bad_value(name: str, value: object, expected: str) -> InputError:
    """One-line error in the house format: `NAME='value': expected ...`."""
    return InputError(f"{name}={value!r}: expected {expected}")

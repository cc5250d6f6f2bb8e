"""The errors marun reports to its user, each with the exit code it ends with.

Bad input is reported in one line whatever it quotes: control characters (a newline, an escape
sequence from a hostile file) are shown escaped, a quoted value is cut at `MAX_VALUE` characters,
the whole line at `MAX_LINE`, and a password in a URL (`tcp://user:PASS@host`) is masked.
"""

from __future__ import annotations

from marun.exit_codes import BAD_INPUT_EXIT

MAX_VALUE = 200  # characters of a quoted value
MAX_LINE = 900  # characters of a whole message (the line, with its prefix, stays under 1000)


def escape_controls(text: str) -> str:
    """`text` with every non-printable character written as Python writes it in a repr."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """`text` fit for one line of an error: controls escaped, URL passwords masked, cut."""
    from marun.redact import mask_url_credentials

    text = escape_controls(mask_url_credentials(text))
    return text if len(text) <= limit else text[:limit] + "..."


def show_value(value: object) -> str:
    """A value as an error quotes it: its repr, at most MAX_VALUE characters of it."""
    if isinstance(value, str) and len(value) > MAX_VALUE:
        return repr(value[:MAX_VALUE]) + "..."
    text = repr(value)
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE] + "..."


class MarunError(Exception):
    """A failure the user can act on: printed without a traceback. Some are reports of several
    lines (which hosts of a cluster never answered); a password in a URL is masked in all."""

    exit_code = 1

    def __str__(self) -> str:
        from marun.redact import mask_url_credentials

        return mask_url_credentials(super().__str__())


class InputError(MarunError):
    """Bad or unusable input (env, argument, rank table, config, script): nothing was started.

    The message names what is wrong, the value seen, and what was expected, in one line
    whatever the input held (see `one_line`).
    """

    exit_code = BAD_INPUT_EXIT

    def __str__(self) -> str:
        return one_line(Exception.__str__(self))


def bad_value(name: str, value: object, expected: str) -> InputError:
    """One-line error in the house format: `NAME='value': expected ...`."""
    return InputError(f"{one_line(name, MAX_VALUE)}={show_value(value)}: expected {expected}")

"""Whether a TCP port can be listened on here: the one check `marun run` (runtime.execute,
before anything starts) and `marun doctor` both make, so that they never disagree."""

from __future__ import annotations

import socket


def bind_error(port: int) -> OSError | None:
    """The error binding `port` on every address gives now, or None when it is free. Bound as
    the frameworks bind theirs (SO_REUSEADDR): a port in TIME_WAIT is free to them, and to us."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            return exc
    return None

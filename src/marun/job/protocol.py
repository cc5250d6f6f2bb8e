"""The wire format between the nodes' marun: one JSON object a line over TCP.

Each line is `{"body": "<JSON text>", "mac": "<hex>"}`: the body carries `job` (the job's id),
`node`, `slot`, `type` and the message's fields; `mac` is HMAC-SHA256 of the body's text with the
job's secret (an empty key when the job has none). A line that does not parse, whose MAC does not
match or whose job id is another's is refused (ProtocolError) and never acted upon.

Replay: a signed line recorded off the network must not work a second time. Each connection
begins with node 0 sending a `challenge` carrying a fresh random `nonce`; the member's `hello`
carries a nonce of its own. From then on every line carries `peer` (the other side's nonce for
this connection) and `seq` (one more than the sender's last on this connection), and `fresh`
refuses a line that does not: a line replayed into another connection names the wrong nonce, and
one replayed into the same connection repeats a sequence number.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from typing import Any

MAX_LINE = 1 << 20  # a line longer than this is not ours


class ProtocolError(Exception):
    pass


def job_secret(env: Mapping[str, str], ssh_key: str | None) -> bytes:
    """MARUN_JOB_TOKEN, else the content of Volcano's ssh private key (every node of the job has
    the same, nobody else has it), else nothing."""
    token = env.get("MARUN_JOB_TOKEN")
    if token:
        return token.encode()
    if ssh_key and os.path.isfile(ssh_key):
        try:
            with open(ssh_key, "rb") as fh:
                return fh.read()
        except OSError:
            return b""
    return b""


def encode(secret: bytes, body: Mapping[str, Any]) -> bytes:
    text = json.dumps(body, separators=(",", ":"), sort_keys=True)
    mac = hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()
    return (json.dumps({"body": text, "mac": mac}, separators=(",", ":")) + "\n").encode()


def decode(secret: bytes, job: str, line: bytes) -> dict[str, Any]:
    try:
        outer = json.loads(line)
        text = outer["body"]
        mac = outer["mac"]
        if not isinstance(text, str) or not isinstance(mac, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ProtocolError("not a marun message") from None
    want = hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        raise ProtocolError("bad signature (not signed with this job's secret)")
    try:
        body = json.loads(text)
    except ValueError:
        raise ProtocolError("not a marun message") from None
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise ProtocolError("not a marun message")
    if body.get("job") != job:
        raise ProtocolError(f"job id {body.get('job')!r} is not this job's")
    if not isinstance(body.get("node"), int) or not isinstance(body.get("slot"), int):
        raise ProtocolError("no node index")
    return body


NONCE_BYTES = 16


def new_nonce() -> str:
    return os.urandom(NONCE_BYTES).hex()


def is_nonce(value: object) -> bool:
    return isinstance(value, str) and len(value) == 2 * NONCE_BYTES


def fresh(body: Mapping[str, Any], nonce: str, last_seq: int) -> int:
    """The line's sequence number when it answers `nonce` (this side's, for this connection) and
    comes after `last_seq`; ProtocolError otherwise."""
    peer = body.get("peer")
    if not isinstance(peer, str) or not hmac.compare_digest(peer, nonce):
        raise ProtocolError("not of this connection (a replayed line, or an older marun)")
    seq = body.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= last_seq:
        raise ProtocolError(f"sequence number {seq!r} not after {last_seq} (a replayed line)")
    return seq


class LineBuffer:
    """Bytes from a socket in, complete lines out."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        if len(self._buf) > MAX_LINE:
            raise ProtocolError("line too long")
        return [line for line in lines if line.strip()]

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
import math
import os
from collections.abc import Mapping
from typing import Any

from marun.plan.coordination import TOKEN_VAR

MAX_LINE = 1 << 20  # a line longer than this is not ours (stacks of every rank fit)
MAX_HELLO_LINE = 8 << 10  # before a connection's hello: a hello is a few hundred bytes
_MAC_HEX = 64  # HMAC-SHA256, in hex
# The wire's version, in node 0's challenge and every member's hello: a marun of another
# version is refused at its hello with one line naming both (the maruns before part 18 sent
# none: version 1). Raise it with any change a marun of the version before would misread.
# 3 (part 24): a node's slots reach node 0 through their node's relay (marun.job.relay), one
# connection per node: lanes (`to`), `gone`, `drop` and `beats`. 4 (part 23): hot spares' `place`.
# 5 (part 24): a relay's slots' hellos in one `hellos` line. 6 (part 24): liveness hubs
# (marun.plan.hubs): `hublink`, `groupbeats`. 7: `groupbeats` one entry a node (its slots'
# figures in lists), not one a slot; node 0's `to` a slot or a list of slots (a `hellos`
# line's welcomes in one line).
PROTOCOL = 7

# What each message's fields must be, beyond job/node/slot/type/peer/seq (every other field is
# ignored). A signed line with a field of another type is refused like a forged one: without a
# secret anybody can sign, so the handlers may trust nothing else.
_NUMBER = (int, float)
FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "challenge": {"nonce": (str,), "instance": (str,), "version": (int,)},
    "hello": {"nonce": (str,), "host": (str,), "daemons_only": (bool,), "instance": (str,),
              "leader": (str,), "started": (bool,), "version": (int,)},
    "hb": {"idle": _NUMBER, "cpu": _NUMBER, "progress": (dict,)},
    "failure": {"failure": (dict,), "round": (int,), "uptime": _NUMBER},
    "stacks": {"text": (str,)},
    "end": {"outcome": (str,), "exit_code": (int,)},
    "welcome": {"instance": (str,), "wall": _NUMBER},
    "start": {"round": (int,), "ports": (dict,), "notes": (list,), "hosts": (dict,)},
    "preflight": {"report": (dict,)},
    "probe": {"target": (dict,)},
    "link": {"link": (dict,)},
    "restart": {"round": (int,), "cause": (dict, type(None))},
    "stopped": {"round": (int,)},
    "running": {"round": (int,), "ranks": (int,)},
    "dump": {"sample": (bool,)},
    "stop": {"code": (int,), "failure": (dict, type(None))},
    "done": {"code": (int,)},
    "place": {"place": (int,)},
    "refused": {"why": (str,)},
    # one connection per node (marun.job.relay): a relay's slot that left it (up), a slot node 0
    # let go of (down), and the slots' heartbeats in one line (up): [slot, idle, cpu, progress]
    "gone": {},
    "drop": {},
    "beats": {"beats": (list,)},
    "hellos": {"hellos": (list,), "nonce": (str,)},
    # liveness hubs (marun.plan.hubs): a node's relay's first line to its hub (up), and a hub's
    # group's heartbeats in one line to node 0 (up): [node, idles, cpus, steps] a node
    "hublink": {"nonce": (str,), "version": (int,)},
    "groupbeats": {"nodes": (list,)},
    "hubbeat": {},  # (down) the hub is there; node 0's liveness comes as its `hb`
}  # fmt: skip
# A line of node 0's for one slot behind a relay names it (`to`); a line without one is for
# every slot the relay has that node 0 welcomed (a broadcast: one line per node, not per slot).
TO = "to"


class ProtocolError(Exception):
    pass


def job_secret(env: Mapping[str, str], ssh_key: str | None) -> bytes:
    """MARUN_JOB_TOKEN, else the content of Volcano's ssh private key (every node of the job has
    the same, nobody else has it), else nothing. The token is used as the bytes the environment
    holds: one that is not UTF-8 (Python keeps it as lone surrogates) is as good a secret."""
    token = env.get(TOKEN_VAR)
    if token:
        return token.encode("utf-8", "surrogateescape")
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


def _json(data: bytes | str) -> Any:
    """json.loads, every way it can fail (bad UTF-8, deep nesting: RecursionError) a
    ProtocolError. A marun's line is UTF-8: decoded as that, not guessed at (json.loads of bytes
    looks for UTF-16 and -32 first, in Python, on every line)."""
    try:
        return json.loads(data.decode() if isinstance(data, bytes) else data)
    except (ValueError, RecursionError, MemoryError):
        raise ProtocolError("not a marun message") from None


def is_int(value: object) -> bool:
    """An int of JSON's (not a bool, which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def decode(secret: bytes, job: str | None, line: bytes) -> dict[str, Any]:
    """The body of a line signed with `secret` for job `job` (any job's: None); ProtocolError
    for anything else, whatever the bytes are (this is the only parser of what arrives on the
    job's port)."""
    outer = _json(line)
    if not isinstance(outer, dict):
        raise ProtocolError("not a marun message")
    text, mac = outer.get("body"), outer.get("mac")
    if not isinstance(text, str) or not isinstance(mac, str):
        raise ProtocolError("not a marun message")
    if len(mac) != _MAC_HEX or not mac.isascii():
        raise ProtocolError("bad signature (not signed with this job's secret)")
    try:
        signed = text.encode()
    except UnicodeEncodeError:  # lone surrogates: never from a marun
        raise ProtocolError("not a marun message") from None
    want = hmac.new(secret, signed, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        raise ProtocolError("bad signature (not signed with this job's secret)")
    body = _json(text)
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise ProtocolError("not a marun message")
    if not isinstance(body.get("job"), str) or (job is not None and body["job"] != job):
        theirs = body.get("job")
        shown = repr(theirs)[:80] if isinstance(theirs, str) else "none"
        raise ProtocolError(f"job id {shown} is not this job's (another job's marun)")
    if not is_int(body.get("node")) or not is_int(body.get("slot")):
        raise ProtocolError("no node index")
    check_fields(body["type"], body)
    return body


def check_fields(kind: str, body: Mapping[str, Any]) -> None:
    """ProtocolError unless `kind` is a message type and each of its fields in `body` has its
    type."""
    fields = FIELDS.get(kind)
    if fields is None:
        raise ProtocolError(f"unknown message type {kind[:40]!r}")
    for name, types in fields.items():
        if name in body and not _typed(body[name], types):
            wanted = "/".join(t.__name__ for t in types)
            raise ProtocolError(f"{kind}: field {name!r} is not {wanted}")


def _typed(value: object, types: tuple[type, ...]) -> bool:
    kind = type(value)
    if kind in types and kind is not float:  # (most fields: one test, not three; a bool too)
        return True
    if isinstance(value, bool) and bool not in types:
        return False  # True is an int to Python, not to this protocol
    if isinstance(value, float) and not math.isfinite(value):
        return False  # NaN, Infinity: json.loads takes them
    return isinstance(value, types)


NONCE_BYTES = 16


def new_nonce() -> str:
    return os.urandom(NONCE_BYTES).hex()


def is_nonce(value: object) -> bool:
    return isinstance(value, str) and len(value) == 2 * NONCE_BYTES


def fresh(body: Mapping[str, Any], nonce: str, last_seq: int) -> int:
    """The line's sequence number when it answers `nonce` (this side's, for this connection) and
    comes after `last_seq`; ProtocolError otherwise."""
    peer = body.get("peer")
    # compare_digest takes ASCII text only (TypeError otherwise): a signed line may hold any.
    if not isinstance(peer, str) or not peer.isascii() or not hmac.compare_digest(peer, nonce):
        raise ProtocolError("not of this connection (a replayed line, or an older marun)")
    seq = body.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= last_seq:
        raise ProtocolError(f"sequence number {seq!r} not after {last_seq} (a replayed line)")
    return seq


class LineBuffer:
    """Bytes from a socket in, complete lines out; a line longer than `limit` (complete or not)
    is refused, so a connection holds at most `limit` bytes here."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self._buf = b""
        self.limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        if data and not self._buf and data.find(b"\n") == len(data) - 1 and len(data) <= self.limit:
            return [data[:-1]] if data.strip() else []  # one whole line: most reads are
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        if len(self._buf) > self.limit or any(len(line) > self.limit for line in lines):
            self._buf = b""
            raise ProtocolError(f"line longer than {self.limit} bytes")
        return [line for line in lines if line.strip()]

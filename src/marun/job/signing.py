"""Node 0's lines out, signed per connection at the cost of one HMAC each.

Every line node 0 sends names the connection's nonce (`peer`) and its next sequence number
(`seq`), so a line for one member cannot be replayed to another or twice (marun.job.protocol);
each is therefore signed for its connection. `protocol.encode` does that from the whole body
(three JSON encodings and an HMAC keyed anew); a `Template` encodes the part that is the same
for every connection once (a `stop` to 8,192 members, the heartbeat), and the MAC's state over
it, and adds `peer` and `seq` (and the slot a line behind a relay is for, `to`) after it per
connection. The receiver parses the body as JSON and checks the MAC over the text it got, so
key order does not matter: `protocol.decode` gives the same message as for `protocol.encode`'s line
(tests/unit/test_job_signing.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

_COMPACT = (",", ":")


class Template:
    def __init__(self, secret: bytes, body: Mapping[str, Any]) -> None:
        common = {k: v for k, v in body.items() if k not in ("peer", "seq", "to")}
        self._has_nonce = "nonce" in common
        text = json.dumps(common, separators=_COMPACT, sort_keys=True)
        # text is '{...}' with at least job/node/slot/type: each line is it without its closing
        # brace, then the connection's fields. What comes first is the same on every line, so
        # its part of the MAC is taken once here, and a line costs an HMAC of its own few
        # bytes whatever the message (a stop with a failure's 2 KB tail: half the time)
        self._common = text[:-1]
        self._start = ('{"body":"' + json.dumps(self._common)[1:-1]).encode()
        self._mac = hmac.new(secret, self._common.encode(), digestmod=hashlib.sha256)

    def line(
        self,
        peer: str | None,
        seq: int,
        to: int | list[int] | None = None,
        nonce: str | None = None,
    ) -> bytes:
        """The line for a connection: its peer's nonce, its sequence number, behind a relay the
        slot it is for or (a relay's slots' welcomes, protocol 7) the slots, and a challenge's
        nonce (node 0's for the connection: protocol.new_nonce's hex, else JSON-escaped)."""
        tail = ',"seq":' + str(int(seq))
        if nonce is not None:
            # (node 0's challenges: one template for every connection's, 4,096 at 4,096 x 8,
            # where each was a JSON encoding and an HMAC key schedule)
            if self._has_nonce:
                raise ValueError("a nonce for a line whose template has one")
            tail += ',"nonce":' + json.dumps(nonce)
        if isinstance(to, int):
            tail += ',"to":' + str(int(to))
        elif to is not None:
            tail += ',"to":[' + ",".join(str(int(slot)) for slot in to) + "]"
        tail += "}"
        if peer is not None and peer.isascii() and peer.isalnum():
            # a member's nonce (hex): nothing in the tail JSON escapes but its quotes, so its
            # escaped form is one replace (json.dumps of the peer and of the tail cost as much
            # as the rest of a heartbeat's line)
            tail = ',"peer":"' + peer + '"' + tail
            escaped = tail.replace('"', '\\"')
        else:
            tail = ',"peer":' + json.dumps(peer) + tail
            escaped = json.dumps(tail)[1:-1]
        mac = self._mac.copy()
        mac.update(tail.encode())
        return self._start + (escaped + '","mac":"' + mac.hexdigest() + '"}\n').encode()

"""Node 0's lines out, signed per connection at the cost of one HMAC each.

Every line node 0 sends names the connection's nonce (`peer`) and its next sequence number
(`seq`), so a line for one member cannot be replayed to another or twice (marun.job.protocol);
each is therefore signed for its connection. `protocol.encode` does that from the whole body
(three JSON encodings and an HMAC keyed anew); a `Template` encodes the part that is the same
for every connection once (a `stop` to 8,192 members, the heartbeat) and adds `peer` and `seq`
(and the slot a line behind a relay is for, `to`) in front of it per connection. The receiver
parses the body as JSON and checks the MAC over the text it got, so key order does not
matter: `protocol.decode` gives the same message as for `protocol.encode`'s line
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
        text = json.dumps(common, separators=_COMPACT, sort_keys=True)
        # text is '{...}' with at least job/node/slot/type: what follows the opening brace
        self._rest = text[1:]
        self._rest_escaped = json.dumps(self._rest)[1:-1]
        self._mac = hmac.new(secret, digestmod=hashlib.sha256)

    def line(self, peer: str | None, seq: int, to: int | None = None) -> bytes:
        head = '{"peer":' + json.dumps(peer) + ',"seq":' + str(int(seq)) + ","
        if to is not None:
            head += '"to":' + str(int(to)) + ","
        mac = self._mac.copy()
        mac.update((head + self._rest).encode())
        escaped = json.dumps(head)[1:-1] + self._rest_escaped
        return ('{"body":"' + escaped + '","mac":"' + mac.hexdigest() + '"}\n').encode()

"""marun.job.signing: a Template's line is the message protocol.encode's is, checked by the one
parser (protocol.decode) with the same replay checks (protocol.fresh); signed with another
secret it is refused."""

from __future__ import annotations

from typing import Any

import pytest

from marun.job.protocol import ProtocolError, decode, encode, fresh, new_nonce
from marun.job.signing import Template

SECRET = b"signing-secret"
BODIES: list[dict[str, Any]] = [
    {"job": "j", "node": 0, "slot": 0, "type": "hb"},
    {"job": "j", "node": 0, "slot": 0, "type": "start"},
    {"job": "j\"\\\u00e9\u2603", "node": 0, "slot": 0, "type": "stop", "code": 3,
     "failure": {"why": "a \"quoted\"\nline\t\u00e9", "node": 7, "tail": ["x" * 300]}},
    {"job": "j", "node": 0, "slot": 0, "type": "done", "code": 0, "peer": "x", "seq": 99},
]  # fmt: skip


@pytest.mark.parametrize("body", BODIES)
def test_a_template_line_is_encodes_message(body: dict[str, Any]) -> None:
    peer = new_nonce()
    template = Template(SECRET, body)
    for seq in (0, 1, 12345):
        got = decode(SECRET, body["job"], template.line(peer, seq))
        want = decode(SECRET, body["job"], encode(SECRET, {**body, "peer": peer, "seq": seq}))
        assert got == want
        assert fresh(got, peer, seq - 1) == seq


@pytest.mark.parametrize("body", BODIES)
def test_a_template_line_for_one_slot_is_encodes_message_with_to(body: dict[str, Any]) -> None:
    """One template for a relay's slots (their welcomes): each line names its slot (`to`)."""
    peer, template = new_nonce(), Template(SECRET, {**body, "to": 7})  # (a `to` in it: ignored)
    for to in (0, 5):
        got = decode(SECRET, body["job"], template.line(peer, 3, to))
        want = {**body, "peer": peer, "seq": 3, "to": to}
        assert got == decode(SECRET, body["job"], encode(SECRET, want))
    assert "to" not in decode(SECRET, body["job"], template.line(peer, 3))


def test_a_template_line_answers_its_connection_only() -> None:
    body = BODIES[1]
    ours, theirs = new_nonce(), new_nonce()
    line = Template(SECRET, body).line(ours, 5)
    got = decode(SECRET, "j", line)
    with pytest.raises(ProtocolError):
        fresh(got, theirs, -1)  # replayed into another connection
    with pytest.raises(ProtocolError):
        fresh(got, ours, 5)  # replayed into the same one
    with pytest.raises(ProtocolError):
        decode(b"another", "j", line)


def test_an_odd_peer_nonce_is_escaped_not_injected() -> None:
    """A member's nonce is only checked for its length: quotes in it stay inside the string."""
    peer = '","seq":0,"type":"stop","x":"'[:32].ljust(32, "a")
    line = Template(SECRET, BODIES[0]).line(peer, 3)
    got = decode(SECRET, "j", line)
    assert got["peer"] == peer and got["seq"] == 3 and got["type"] == "hb"


@pytest.mark.parametrize(
    "peer", [new_nonce(), "ABCdef0123456789" * 2, None, "\u00e9" * 32, "a b" * 10]
)
@pytest.mark.parametrize("to", [None, 4, [0, 2, 7]])  # (a list: a relay's slots' welcomes)
def test_every_kind_of_peer_signs_the_line_encode_would(
    peer: str | None, to: int | list[int] | None
) -> None:
    """A nonce of ASCII letters and digits takes the short way (its head escaped by one
    replace); anything else (None, non-ASCII letters, a space) is escaped by json.dumps; both
    give the message protocol.encode gives."""
    body = BODIES[2]
    got = decode(SECRET, body["job"], Template(SECRET, body).line(peer, 5, to))
    extra = {"peer": peer, "seq": 5} if to is None else {"peer": peer, "seq": 5, "to": to}
    assert got == decode(SECRET, body["job"], encode(SECRET, {**body, **extra}))


@pytest.mark.parametrize("nonce", [new_nonce(), '\u00e9"x'])
def test_a_template_line_with_its_own_nonce_is_encodes_message_with_it(nonce: str) -> None:
    """Node 0's challenges: one template for every connection's, each line with its own nonce;
    a template whose body has a nonce takes no second one."""
    body = {"job": "j", "node": 0, "slot": 0, "type": "challenge", "instance": "i", "version": 7}
    got = decode(SECRET, "j", Template(SECRET, body).line(None, 0, nonce=nonce))
    assert got == decode(
        SECRET, "j", encode(SECRET, {**body, "peer": None, "seq": 0, "nonce": nonce})
    )
    with pytest.raises(ValueError, match="a nonce"):
        Template(SECRET, {**body, "nonce": nonce}).line(None, 0, nonce=nonce)

"""Node 0's heartbeats out (marun.job.wire's): a heap by when each connection's is due, not a
pass over every member; a heartbeat only where node 0 sent the connection nothing for an
interval (any line shows node 0 alive), and none to a node whose hub hands node 0's liveness on
(liveness hubs, marun.plan.hubs): those leave the schedule, and come back with node 0's next
line to them, which goes at once when the node beats node 0 itself again or its hub's
connection closes (a node whose hub stops speaking for it otherwise is silent to node 0 too,
and found lost as any)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable

from marun.job.conns import Conn

TICK = 0.2  # the coordinator's loop (and its tick) runs at least this often (marun.job.wire):
# a heartbeat due within it goes now
VIA_FRESH = 1.5  # intervals a hub's word for a node holds (a hub hands on within 1/8 of one)


class BeatSchedule:
    def __init__(
        self, every: float, live: Callable[[Conn], bool], beat: Callable[[Conn], None]
    ) -> None:
        self.every = every
        self._live = live  # the connection is node 0's and not closing
        self._beat = beat  # node 0's heartbeat, signed and sent on it (it may be dropped)
        self._heap: list[tuple[float, int, Conn]] = []
        self._order = itertools.count()

    def schedule(self, conn: Conn, due: float) -> None:
        conn.beating = True
        heapq.heappush(self._heap, (due, next(self._order), conn))

    def due(self, now: float) -> None:
        """A heartbeat to each connection node 0 has sent nothing for an interval; spread over
        the interval, not all in one burst."""
        heap, every = self._heap, self.every
        while heap and heap[0][0] <= now:
            _, _, conn = heapq.heappop(heap)
            if not self._live(conn):
                conn.beating = False
                continue
            if self.through_hub(conn, now):  # its hub hands node 0's heartbeats on: out of the
                conn.beating = False  # schedule until node 0's next line to it (`direct`)
                continue
            if now - conn.last_out >= every - TICK:
                self._beat(conn)
                if not self._live(conn):
                    conn.beating = False
                    continue
                conn.last_out = max(conn.last_out, now)  # due again an interval after `now`
            self.schedule(conn, conn.last_out + every)

    def through_hub(self, conn: Conn, now: float) -> bool:
        """`conn`'s node beats through a hub that node 0 holds, and did lately."""
        hub = conn.via_hub
        if hub is None or not self._live(hub):
            return False
        return now - conn.via_at < VIA_FRESH * self.every

    def unheard(self, conns: Iterable[Conn], now: float) -> float:
        """The longest any member's marun has gone without a line of node 0's (each takes node 0
        for lost after peer_timeout of it): its own, or its hub's (handed on at once)."""
        heard = [self._heard_at(c, now) for c in conns if c.member is not None and not c.closing]
        return now - min(heard) if heard else 0.0

    def _heard_at(self, conn: Conn, now: float) -> float:
        """When `conn`'s marun last heard node 0: its own line, or the hub's, which it heard
        while it was linked to the hub (as far as node 0 knows: up to its last entry through
        it, and an interval on). Not `now`'s freshness: after node 0's own stall every hub's
        word is old, and the nodes heard node 0 through their hubs until the stall began."""
        hub = conn.via_hub
        if hub is None or not self._live(hub):
            return conn.last_out
        return max(conn.last_out, min(hub.last_out, conn.via_at + self.every))

    def via(self, conn: Conn, hub: Conn, now: float) -> None:
        """`hub`'s `groupbeats` spoke for `conn`'s node: node 0's heartbeats reach it through
        the hub while it does."""
        if conn.via_hub is not hub:
            if conn.via_hub is not None:
                conn.via_hub.children.discard(conn)
            conn.via_hub = hub
            hub.children.add(conn)
        conn.via_at = now

    def direct(self, conn: Conn, now: float) -> None:
        """`conn`'s node beats node 0 directly again (its own `beats`, or its hub gone): node
        0's heartbeats go to it directly, the first at once where half an interval has passed
        since node 0's last line to it (its marun heard node 0 last through the hub)."""
        hub, conn.via_hub = conn.via_hub, None
        if hub is None:
            return
        hub.children.discard(conn)
        if self._live(conn) and now - conn.last_out >= self.every / 2:
            self._beat(conn)

    def gone(self, conn: Conn, now: float) -> None:
        """`conn` closed: if it was a hub, its group's nodes have node 0's heartbeats direct."""
        self.direct(conn, now)
        children, conn.children = conn.children, set()
        for child in children:
            self.direct(child, now)

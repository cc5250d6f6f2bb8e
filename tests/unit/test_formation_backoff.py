"""Formation's retry backoff stays bounded however often a host fails: a name that never
resolves fails thousands of times within formation_timeout, and the backoff's power once
overflowed a float (OverflowError, node 0 gone after about 4 minutes)."""

from __future__ import annotations

import pytest

from marun.mpi import formation
from marun.mpi.formation import MAX_BACKOFF, Formation, FormationError, NotReady, retry_ceiling


@pytest.mark.parametrize("failures", [1, 2, 3, 10, 1024, 1025, 5000, 10**9])
def test_the_ceiling_is_bounded_for_any_failure_count(failures: int) -> None:
    ceiling = retry_ceiling(failures)
    assert 0 < ceiling <= MAX_BACKOFF


def test_the_ceiling_doubles_from_the_first_backoff() -> None:
    assert retry_ceiling(1) == formation.FIRST_BACKOFF
    assert retry_ceiling(2) == min(MAX_BACKOFF, 2 * formation.FIRST_BACKOFF)
    assert retry_ceiling(10**6) == MAX_BACKOFF


def test_a_host_failing_over_a_thousand_times_is_still_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Force the failure count past 1,024 quickly (no backoff), then let the name resolve: the
    formation goes on to the end instead of raising OverflowError on the 1,025th failure."""
    monkeypatch.setattr(formation, "MAX_BACKOFF", 0.0)
    calls = 0

    def resolve(name: str) -> str:
        nonlocal calls
        calls += 1
        if calls <= 1100:
            raise NotReady("no DNS answer (not yet)")
        return "127.0.0.1"

    # One host, the local one: it is resolved only, so no listener is needed.
    assert Formation(["late.job"], 22, None, 120, local=0, resolve=resolve).run() == ["127.0.0.1"]
    assert calls == 1101


def test_a_host_that_never_resolves_ends_in_the_one_line_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(formation, "MAX_BACKOFF", 0.0)

    def resolve(name: str) -> str:
        raise NotReady("no DNS answer")

    with pytest.raises(FormationError, match=r"never\.job.*no DNS answer"):
        Formation(["never.job"], 22, None, 1.0, local=0, resolve=resolve).run()

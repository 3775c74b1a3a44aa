"""A PostgreSQL store given a clock: leases, turns, cooldowns and stamps follow it
(as a SQLite store's do), while a write's deadline stays on the server's clock.

The clock is set ten years ahead of the server's, where no statement reading the
server's clock could give the times asserted here, and moved by hand.
"""

from __future__ import annotations

import re

import pytest

from persistence import open_store
from persistence._queries import load_queries
from protocol import DeadTurnError, Message
from tests.pg import pg_rows

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(30)]

#: 2036-12-05: far from the server's clock either way a test could run.
AHEAD = 2_112_000_000.0

#: The statements that read the server's clock whatever the store was given, and why.
SERVER_CLOCK_ONLY = {
    "clock": "the server's time itself (a store given a clock answers now() without it)",
    "record_holder": "when a holder was announced: read by nobody, about the real session",
    "record_version": "when a migration ran: about the real database",
}
_TAKES_NOW = re.compile(r"%\(now\)s::double precision,\s*extract\(epoch FROM clock_timestamp\(\)\)")


class Clock:
    """A clock the test moves (epoch seconds)."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_leases_turns_and_cooldowns_follow_the_clock_given(pg_url):
    clock = Clock(AHEAD)
    with open_store(pg_url, clock=clock) as store:
        assert store.now() == AHEAD
        created = store.create_session("s")
        assert created.created_at == AHEAD

        lease = store.acquire_lease("s", "A", 30)
        assert lease is not None and (lease.acquired_at, lease.expires_at) == (AHEAD, AHEAD + 30)
        assert store.acquire_lease("s", "B", 30) is None  # live on the clock given
        clock.at += 31
        assert store.current_lease("s") is None
        taken = store.acquire_lease("s", "B", 30)
        assert taken is not None and taken.token > lease.token
        assert store.release_lease(taken)

        turn = store.open_turn("s", "A", 30)
        assert turn.expires_at == clock.at + 30
        (stored,) = store.append("s", Message("user", "ask"), turn=turn)
        assert stored.created_at == clock.at
        clock.at += 31  # the holder froze past its lease: the turn is dead
        assert store.current_turn("s") is None
        with pytest.raises(DeadTurnError):
            store.append("s", Message("assistant", "late"), turn=turn)

        cooldown = store.arm_cooldown("s", 60, "rate limited")
        assert cooldown.until == clock.at + 60


def test_the_write_deadline_stays_on_the_servers_clock(pg_url):
    """`call_deadline_check` is about real time: a clock ten years ahead (or behind)
    of the server's must not make every write late (or never late)."""
    for at in (AHEAD, 1_000_000_000.0):
        with open_store(pg_url, clock=Clock(at)) as store:
            sid = f"s{int(at)}"
            store.create_session(sid)  # a grouped create, checked at the server
            (first,) = store.append(sid, Message("user", "ask"))  # the writer's batch statement
            (second,) = store.append(sid, Message("user", "again", key=f"k{int(at)}"))  # a keyed one
            assert first.created_at == second.created_at == at
    server = pg_rows(pg_url, "SELECT extract(epoch FROM clock_timestamp())::float8")[0][0]
    assert 1_000_000_000.0 < server < AHEAD


def test_a_store_without_a_clock_stamps_with_the_servers(pg_url):
    with open_store(pg_url) as store:
        before = store.now()
        (stored,) = store.append(store.create_session("s").id, Message("user", "ask"))
        assert before <= stored.created_at <= store.now()
        assert abs(before - AHEAD) > 1e8


def test_every_statement_that_reads_the_servers_clock_takes_the_stores_first():
    """A statement added with the server's clock alone would judge leases on another
    clock than the harness's: each reading is coalesce(%(now)s, clock_timestamp())."""
    queries = load_queries("postgres")
    assert set(SERVER_CLOCK_ONLY) <= set(queries)
    alone = {
        name: sql.count("clock_timestamp()") - len(_TAKES_NOW.findall(sql))
        for name, sql in queries.items()
        if name not in SERVER_CLOCK_ONLY
    }
    assert {name: n for name, n in alone.items() if n} == {}
    assert sum(len(_TAKES_NOW.findall(sql)) for sql in queries.values()) > 30

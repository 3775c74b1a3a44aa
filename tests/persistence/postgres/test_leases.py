"""Leases on PostgreSQL: the database clock decides expiry, and fencing lives in the write.

The client's clock is moved far into the future and the past (``time.time``
patched): a live lease still cannot be taken, and expiry still happens when the
*database* clock passes ``expires_at``.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from persistence.postgres import PostgresStore
from protocol import LeaseLostError, Message
from tests.pg import (
    pg_rows,
    table_snapshot,
    with_application_name,
)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(30)]

TEN_YEARS_S = 10 * 365 * 24 * 3600.0


def db_clock(url: str) -> float:
    return pg_rows(url, "SELECT extract(epoch FROM clock_timestamp())::float8")[0][0]


def wait_until_db_clock_passes(store: PostgresStore, instant: float) -> None:
    """Poll the store's clock (a condition, not a hopeful sleep) until ``instant``."""
    deadline = time.monotonic() + 10
    while store.now() <= instant:
        assert time.monotonic() < deadline, "database clock never passed the lease expiry"
        time.sleep(0.01)


@pytest.mark.parametrize("skew", [TEN_YEARS_S, -TEN_YEARS_S], ids=["future", "past"])
def test_live_lease_survives_a_skewed_client_clock(pg: PostgresStore, pg_url: str, monkeypatch, skew):
    pg.create_session("s")
    first = pg.acquire_lease("s", "alpha", 30)
    assert first is not None
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)

    assert pg.acquire_lease("s", "beta", 30) is None, "a skewed client clock took a live lease"
    assert pg.current_lease("s") == first
    # Times come from the database, not from the (skewed) client clock.
    server_now = db_clock(pg_url)
    assert abs(pg.now() - server_now) < 5
    assert abs(first.acquired_at - server_now) < 5
    renewed = pg.renew_lease(first, 30)
    assert renewed is not None and renewed.token == first.token
    assert abs(renewed.expires_at - (server_now + 30)) < 5


@pytest.mark.parametrize("skew", [TEN_YEARS_S, -TEN_YEARS_S], ids=["future", "past"])
def test_expiry_follows_the_database_clock(pg: PostgresStore, monkeypatch, skew):
    pg.create_session("s")
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)
    short = pg.acquire_lease("s", "alpha", 0.2)
    assert short is not None
    assert pg.acquire_lease("s", "beta", 30) is None  # still live on the database clock

    wait_until_db_clock_passes(pg, short.expires_at)
    assert pg.current_lease("s") is None
    assert pg.renew_lease(short, 30) is None, "an expired lease was renewed"
    taken = pg.acquire_lease("s", "beta", 30)
    assert taken is not None and taken.token == short.token + 1
    assert [lease.holder for lease in pg.leases()] == ["beta"]


@pytest.mark.parametrize("mode", ["in_place", "rotate"])
def test_expired_and_taken_over_holder_cannot_commit(pg: PostgresStore, pg_url: str, mode):
    pg.create_session("s")
    pg.append("s", [Message("user", f"m{i}") for i in range(4)])
    stale = pg.acquire_lease("s", "alpha", 0.2)
    assert stale is not None
    watermark = pg.transcript("s")[-1].seq
    wait_until_db_clock_passes(pg, stale.expires_at)
    usurper = pg.acquire_lease("s", "beta", 30)
    assert usurper is not None and usurper.token == stale.token + 1

    before = table_snapshot(pg_url)
    with pytest.raises(LeaseLostError) as info:
        pg.commit_compaction(stale, watermark=watermark, compacted=[Message("user", "sum")], mode=mode)
    assert (info.value.session_id, info.value.token) == ("s", stale.token)
    assert table_snapshot(pg_url) == before, "a fenced-off commit wrote something"

    # Still fenced after the usurper releases: the row no longer has the stale token.
    assert pg.release_lease(usurper)
    with pytest.raises(LeaseLostError):
        pg.commit_compaction(stale, watermark=watermark, compacted=[Message("user", "sum")], mode=mode)
    assert table_snapshot(pg_url)["messages"] == before["messages"]


def test_expired_holder_cannot_commit_even_without_takeover(pg: PostgresStore, pg_url: str):
    pg.create_session("s")
    pg.append("s", [Message("user", "a"), Message("assistant", "b")])
    lease = pg.acquire_lease("s", "alpha", 0.2)
    wait_until_db_clock_passes(pg, lease.expires_at)
    before = table_snapshot(pg_url)
    with pytest.raises(LeaseLostError):
        pg.commit_compaction(lease, watermark=2, compacted=[Message("user", "s")], mode="in_place")
    assert table_snapshot(pg_url) == before


def _backend_waiting_on_lock(url: str, application_name: str) -> bool:
    rows = pg_rows(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
        (application_name,),
    )
    return rows[0][0] > 0


@pytest.mark.parametrize("mode", ["in_place", "rotate"])
def test_fencing_is_checked_inside_the_write(pg_url: str, mode):
    """A takeover in flight (row updated, not yet committed) when the commit starts:
    the commit waits on the lease row and, once the takeover commits, re-checks
    the *new* row and refuses. A read-then-write check would have read the old,
    committed row and published."""
    import psycopg

    app = f"fence-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(with_application_name(pg_url, app))
    try:
        store.create_session("s")
        store.append("s", [Message("user", "a"), Message("assistant", "b")])
        lease = store.acquire_lease("s", "alpha", 30)
        before = table_snapshot(pg_url)
        outcome: dict[str, BaseException | object] = {}

        with psycopg.connect(pg_url) as thief:  # a transaction open until we commit it
            thief.execute("UPDATE leases SET holder = 'thief', token = token + 1 WHERE session_id = 's'")

            def commit() -> None:
                try:
                    outcome["result"] = store.commit_compaction(
                        lease, watermark=2, compacted=[Message("user", "sum")], mode=mode
                    )
                except BaseException as exc:  # collected and asserted below
                    outcome["result"] = exc

            worker = threading.Thread(target=commit, name="committer")
            worker.start()
            deadline = time.monotonic() + 10
            while not _backend_waiting_on_lock(pg_url, app):
                assert worker.is_alive() and time.monotonic() < deadline, f"commit did not block: {outcome}"
                time.sleep(0.01)
            thief.commit()
        worker.join(10)
        assert not worker.is_alive()
        assert isinstance(outcome["result"], LeaseLostError), outcome
        after = table_snapshot(pg_url)
        before["leases"] = after["leases"]  # the thief's takeover is the only change
        assert after == before
    finally:
        store.close()


def test_takeover_waits_for_a_commit_in_flight_and_gets_the_next_token(pg_url: str):
    """The other order: a commit holds the lease row, an acquire by another
    holder after expiry waits for it and then continues the token sequence."""
    import psycopg

    app = f"takeover-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(with_application_name(pg_url, app))
    try:
        store.create_session("s")
        lease = store.acquire_lease("s", "alpha", 30)
        with psycopg.connect(pg_url) as holder_txn:
            # Stand-in for the fenced UPDATE at the start of a commit: lock the row
            # while it is still ours, then let it expire before committing.
            holder_txn.execute("UPDATE leases SET expires_at = 0 WHERE session_id = 's' AND token = %s", (lease.token,))
            got: dict[str, object] = {}
            worker = threading.Thread(target=lambda: got.update(l=store.acquire_lease("s", "beta", 30)))
            worker.start()
            deadline = time.monotonic() + 10
            while not _backend_waiting_on_lock(pg_url, app):
                assert worker.is_alive() and time.monotonic() < deadline
                time.sleep(0.01)
            holder_txn.commit()
        worker.join(10)
        taken = got["l"]
        assert taken is not None and taken.holder == "beta" and taken.token == lease.token + 1
    finally:
        store.close()

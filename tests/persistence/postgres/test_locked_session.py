"""One locked session holds up its own appends only: the batch statement skips a
session row another transaction holds (a foreign lock, a peer process frozen in
its transaction), commits everyone else's, and tries the locked session's appends
again in a later batch, in the order they were queued; directly and through
PgBouncer."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from persistence import open_store
from protocol import Message
from tests.actors.helpers import wait_until
from tests.pg import PG_URL, isolated_postgres_url, pg_rows, pgbouncer_store_url

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

SPAWN = multiprocessing.get_context("spawn")
OTHERS = [f"s{k}" for k in range(8)]
PER_SESSION = 25


@pytest.fixture(params=["postgres", "pgbouncer"])
def urls(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(the store's URL, a direct URL to the same database for the lock holder)."""
    if request.param == "postgres":
        with isolated_postgres_url() as url:
            yield url, url
    else:
        name = request.getfixturevalue("pgbouncer_db")
        yield pgbouncer_store_url(name), PG_URL.rsplit("/", 1)[0] + f"/{name}"


def lock_holder(url: str, ready: Any) -> None:
    """A peer that locks the row of "locked" in a transaction and then just waits
    (the parent freezes it there)."""
    import psycopg

    conn = psycopg.connect(url, connect_timeout=5)
    conn.execute("SELECT id FROM sessions WHERE id = 'locked' FOR UPDATE")
    ready.put(os.getpid())
    threading.Event().wait(120)


@contextmanager
def foreign_lock(url: str) -> Iterator[None]:
    import psycopg

    with psycopg.connect(url, connect_timeout=5) as conn:
        conn.execute("SELECT id FROM sessions WHERE id = 'locked' FOR UPDATE")
        yield
        conn.rollback()


@contextmanager
def frozen_peer(url: str) -> Iterator[None]:
    """A real process holding the row lock, SIGSTOPped mid-transaction; killed at the
    end, so its backend rolls back and lets go."""
    ready = SPAWN.Queue()
    peer = SPAWN.Process(target=lock_holder, args=(url, ready), name="lock-holder")
    peer.start()
    try:
        assert ready.get(timeout=30) == peer.pid
        os.kill(peer.pid, signal.SIGSTOP)
        yield
    finally:
        os.kill(peer.pid, signal.SIGKILL)
        peer.join(10)
        ready.close()
        ready.join_thread()


def appends_from_threads(store: Any) -> dict[str, list[Any]]:
    """Each other session's appends, one caller thread each, to their end."""
    out: dict[str, list[Any]] = {sid: [] for sid in OTHERS}

    def run(sid: str) -> None:
        for n in range(PER_SESSION):
            try:
                out[sid].append(store.append(sid, Message("user", f"{sid}-{n}"))[0].seq)
            except Exception as exc:  # the outcome under test
                out[sid].append(exc)

    threads = [threading.Thread(target=run, args=(sid,)) for sid in OTHERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    return out


@pytest.mark.parametrize("holder", [foreign_lock, frozen_peer], ids=["foreign-lock", "frozen-peer"])
def test_a_locked_session_holds_up_only_its_own_appends(urls: tuple[str, str], holder) -> None:
    store_url, direct_url = urls
    with open_store(store_url, patience_s=30) as store:
        for sid in ["locked", *OTHERS]:
            store.create_session(sid)
        submitted: list[tuple[Any, BaseException | None]] = []
        all_submitted = threading.Event()

        def on_done(built: Any, error: BaseException | None) -> None:
            submitted.append((built() if built is not None else None, error))
            if len(submitted) == 5:
                all_submitted.set()

        held: dict[str, Any] = {}
        with holder(direct_url):
            waiting = threading.Thread(
                target=lambda: held.setdefault("seq", store.append("locked", Message("user", "held"))[0])
            )
            waiting.start()
            wait_until(lambda: (s := store.write_stats()).in_flight + s.queued == 1, what="the held append queued")
            for n in range(5):
                assert store.append_nowait("locked", [Message("user", f"queued-{n}")], on_done)
            others = appends_from_threads(store)  # all of them while the row stays locked
            assert others == {sid: list(range(1, PER_SESSION + 1)) for sid in OTHERS}
            assert waiting.is_alive() and not submitted  # the locked session's appends wait
            assert pg_rows(direct_url, "SELECT count(*) FROM messages WHERE session_id = 'locked'") == [(0,)]
        waiting.join(30)
        assert all_submitted.wait(30)
    assert held["seq"].seq == 1
    assert [error for _, error in submitted] == [None] * 5
    rows = pg_rows(direct_url, "SELECT seq, content FROM messages WHERE session_id = 'locked' ORDER BY seq")
    assert rows == [(1, '"held"')] + [(n + 2, f'"queued-{n}"') for n in range(5)]  # in the order queued

"""Deadlines hold against PostgreSQL backends that stop answering (SIGSTOP, real
backend processes of this machine's server): each call ends with `StoreBusyError`
within ``patience_s`` plus the watchdog's grace (and a margin for a loaded
machine), calls after it go through on new connections while the old backends
stay frozen, and a write reported failed never applies once its backend
resumes: its deadline went to the server with it."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import persistence.postgres._driver as driver
from actors import CompactionPolicy, SessionRegistry
from persistence import open_store
from protocol import Message, StoreBusyError, TranscriptError
from tests.actors.helpers import wait_until
from tests.pg import PG_URL, isolated_postgres_url, pg_rows, pgbouncer_store_url, with_application_name

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

PATIENCE_S = 1.0
BOUND_S = PATIENCE_S + 0.5 + 2.5  # patience, the watchdog's grace, a loaded machine's margin


@pytest.fixture
def app() -> Iterator[tuple[str, str]]:
    """(a store URL on a fresh schema, the application name its backends carry)."""
    name = f"stall-{uuid.uuid4().hex[:8]}"
    with isolated_postgres_url() as url:
        yield with_application_name(url, name), name


def backends(name: str) -> list[int]:
    rows = pg_rows(PG_URL, "SELECT pid FROM pg_stat_activity WHERE application_name = %s ORDER BY pid", (name,))
    return [pid for (pid,) in rows]


def freeze(name: str, count: int) -> list[int]:
    """SIGSTOP every backend of ``name`` once there are ``count`` of them."""
    wait_until(lambda: len(backends(name)) == count, what=f"{count} backends of the store")
    pids = backends(name)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    return pids


def resume_and_drain(pids: list[int]) -> None:
    """SIGCONT the frozen backends (their clients have gone) and wait until each has
    read what it was sent and exited: only then has a late write had its chance."""
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
    wait_until(
        lambda: not pg_rows(PG_URL, "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)),
        timeout=30,
        what="the resumed backends to exit",
    )


def timed(call: Any) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(TranscriptError) as caught:
        call()
    return caught.value, time.monotonic() - started


def contents(url: str, sid: str) -> list[tuple[int, str]]:
    return pg_rows(url, "SELECT seq, content FROM messages WHERE session_id = %s ORDER BY seq", (sid,))


def test_an_append_to_a_frozen_backend_fails_in_time_and_never_applies(app: tuple[str, str]) -> None:
    url, name = app
    with open_store(url, patience_s=PATIENCE_S, min_size=1, max_size=1) as store:
        store.create_session("s")
        store.append("s", Message("user", "before"))
        frozen = freeze(name, 2)  # the pool's connection and the writer's
        error, took = timed(lambda: store.append("s", Message("user", "stalled")))
        assert isinstance(error, StoreBusyError) and "stopped answering" in str(error), error
        assert took < BOUND_S, took
        # the writer goes on with a new connection while the old backend stays frozen
        assert store.append("s", Message("user", "after"))[0].seq == 2
    resume_and_drain(frozen)
    assert contents(url, "s") == [(1, '"before"'), (2, '"after"')]


def test_a_read_from_a_frozen_backend_fails_in_time(app: tuple[str, str]) -> None:
    url, name = app
    with open_store(url, patience_s=PATIENCE_S, min_size=1, max_size=1) as store:
        store.create_session("s")
        frozen = freeze(name, 2)
        error, took = timed(lambda: store.transcript("s"))
        assert isinstance(error, StoreBusyError) and "stopped answering" in str(error), error
        assert took < BOUND_S, took
        assert store.transcript("s") == []  # a new pool connection
    resume_and_drain(frozen)


def test_a_commit_sent_to_a_frozen_backend_never_applies_later(
    app: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fault lands between a transaction's last statement and its COMMIT: the
    backend is frozen just before the COMMIT message is sent to it."""
    url, name = app
    with open_store(url, patience_s=PATIENCE_S, min_size=1, max_size=1) as store:
        wait_until(lambda: len(backends(name)) == 1, what="the pool's backend alone")
        (pool_backend,) = backends(name)  # (the writer connects on its first write)
        store.create_session("s", metadata={"k": "before"})
        checked = driver.checked_commit_sql

        def freezing_commit(until: float) -> str:  # the injected fault
            os.kill(pool_backend, signal.SIGSTOP)
            return checked(until)

        monkeypatch.setattr(driver, "checked_commit_sql", freezing_commit)
        error, took = timed(lambda: store.update_metadata("s", {"k": "late"}))
        monkeypatch.undo()
        assert isinstance(error, StoreBusyError) and "during COMMIT" in str(error), error
        assert took < BOUND_S, took
    resume_and_drain([pool_backend])
    assert pg_rows(url, "SELECT metadata ->> 'k' FROM sessions WHERE id = 's'") == [("before",)]


def test_registry_calls_end_within_their_deadlines(app: tuple[str, str]) -> None:
    url, name = app
    policy = CompactionPolicy(ask_timeout_s=2.0)
    with open_store(url, patience_s=PATIENCE_S, min_size=1, max_size=1) as store:
        with SessionRegistry(store, policy=policy, holder="stalled") as registry:
            handle = registry.session("s")
            handle.append(Message("user", "before"))
            frozen = freeze(name, len(backends(name)))
            error, took = timed(lambda: handle.append(Message("user", "stalled")))
            assert took < BOUND_S, (took, error)
            error, took = timed(lambda: registry.session("new"))
            assert took < BOUND_S, (took, error)
            assert handle.append(Message("user", "after"))  # new connections meanwhile
    resume_and_drain(frozen)
    assert [content for _, content in contents(url, "s")] == ['"before"', '"after"']


def test_deadlines_follow_a_server_clock_stepped_forward(app: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The injected fault: our monotonic clock falls 100 s behind what the store
    measured against the server's clock when it opened, as if the server's clock had
    been stepped forward. The server refuses the first writes as late; the store
    measures the clock again and the writes then commit, through a transaction and
    through the writer."""
    url, _ = app
    with open_store(url, patience_s=5.0) as store:
        store.create_session("s")
        real = time.monotonic
        monkeypatch.setattr(time, "monotonic", lambda: real() - 100.0)
        assert store.update_metadata("s", {"k": "v"}).metadata == {"k": "v"}
        assert store.append("s", Message("user", "m"))[0].seq == 1
        monkeypatch.undo()
    assert contents(url, "s") == [(1, '"m"')]


def test_through_pgbouncer_a_write_to_a_frozen_backend_fails_in_time_and_never_applies(pgbouncer_db: str) -> None:
    """PgBouncer answers while the server backend behind it is frozen: the call
    still ends at its deadline, and the statement PgBouncer had passed on carries
    that deadline, so the backend refuses it once it resumes. Every server
    connection PgBouncer holds to the test's database is frozen (which one a
    transaction gets is PgBouncer's choice)."""
    url = pgbouncer_store_url(pgbouncer_db)
    frozen: list[int] = []
    try:
        with open_store(url, patience_s=PATIENCE_S, min_size=1, max_size=1) as store:
            store.create_session("s")
            store.append("s", Message("user", "before"))
            frozen = [pid for (pid,) in pg_rows(PG_URL, _SERVER_CONNECTIONS, (pgbouncer_db,))]
            assert frozen, "PgBouncer holds a server connection to the database"
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            error, took = timed(lambda: store.append("s", Message("user", "stalled")))
            assert isinstance(error, StoreBusyError), error
            assert took < BOUND_S, took
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
            busy = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) AND state = 'active'"
            wait_until(lambda: pg_rows(PG_URL, busy, (frozen,)) == [(0,)], timeout=30, what="the resumed backends")
            assert store.append("s", Message("user", "after"))[0].seq == 2
    finally:
        for pid in frozen:  # never leave a backend stopped, whatever failed
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    direct = PG_URL.rsplit("/", 1)[0] + f"/{pgbouncer_db}"
    assert contents(direct, "s") == [(1, '"before"'), (2, '"after"')]


#: The server backends of a database (the checks query another one).
_SERVER_CONNECTIONS = "SELECT pid FROM pg_stat_activity WHERE datname = %s"

"""Contract: announced holders (`HolderAwareStore`). On PostgreSQL (direct) an
announced holder is alive while its announcement's database session holds its
lock, and gone (False) once that session ends; every other case answers None:
nobody can tell (a name never announced, or withdrawn by a clean close; a store
behind PgBouncer, where no session outlives a transaction; SQLite, one host, where
a registry reads /proc)."""

from __future__ import annotations

import pytest

from persistence._store import features_of
from protocol import InvalidArgumentError
from tests.persistence.contract.db import execute, wait_for

#: The backend pid holding a holder's lock (the key the store's queries.sql computes).
_LOCK_PID = """
SELECT l.pid
FROM pg_locks l,
     (SELECT hashtextextended('session_actors.holder:' || current_schema() || ':' || '{holder}', 0) AS k) x
WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
  AND l.classid::bigint = ((x.k >> 32) & 4294967295) AND l.objid::bigint = (x.k & 4294967295)
"""


def test_only_a_direct_postgresql_store_knows_holders(store, backend):
    assert features_of(store).knows_holders == (backend != "sqlite")  # a class feature: PgBouncer too...
    announcement = store.announce_holder("h")
    try:
        expected = True if backend == "postgres" else None  # ...whose instance cannot tell
        assert store.holder_alive("h") is expected
        assert announcement.keep() is (backend == "postgres")
    finally:
        announcement.close()
    assert store.holder_alive("h") is None  # withdrawn by a clean close: no verdict
    with pytest.raises(InvalidArgumentError):
        store.holder_alive("")


def test_a_name_never_announced_is_not_judged(store):
    assert store.holder_alive("never-announced") is None  # another registry behind PgBouncer, say


def test_a_holder_whose_session_ended_is_gone_until_it_announces_again(store, store_url, backend):
    if backend != "postgres":
        pytest.skip("a holder's session lock: PostgreSQL on a direct connection")
    announcement = store.announce_holder("host-b:worker")
    other = store.announce_holder("host-c:worker")
    try:
        (pid,) = execute(backend, store_url, _LOCK_PID.format(holder="host-b:worker"))[0]
        assert store.holder_alive("host-b:worker") is True
        assert execute(backend, store_url, f"SELECT pg_terminate_backend({int(pid)})") == [(True,)]
        wait_for(lambda: store.holder_alive("host-b:worker") is False)  # the server ends it: no fixed sleep
        assert store.holder_alive("host-c:worker") is True  # another holder's lock is its own
        assert announcement.keep() is True  # its registry sees the cut and announces again
        assert store.holder_alive("host-b:worker") is True
    finally:
        announcement.close()
        other.close()


def test_two_registries_sharing_a_name_share_its_lock(store, store_url, backend):
    """A name given by hand to two registries: both hold its lock (shared); the first to
    close withdraws the name, so the other's death is waited out (None), never misjudged."""
    if backend != "postgres":
        pytest.skip("a holder's session lock: PostgreSQL on a direct connection")
    first, second = store.announce_holder("shared"), store.announce_holder("shared")
    try:
        assert len(execute(backend, store_url, _LOCK_PID.format(holder="shared"))) == 2
        first.close()
        # withdrawn for both, though the other's session still holds the lock: no verdict
        assert store.holder_alive("shared") is None
        # the closed connection's session ends on the server an instant later
        wait_for(lambda: len(execute(backend, store_url, _LOCK_PID.format(holder="shared"))) == 1)
        ((pid,),) = execute(backend, store_url, _LOCK_PID.format(holder="shared"))
        execute(backend, store_url, f"SELECT pg_terminate_backend({int(pid)})")
        wait_for(lambda: not execute(backend, store_url, _LOCK_PID.format(holder="shared")))
        assert store.holder_alive("shared") is None
    finally:
        second.close()

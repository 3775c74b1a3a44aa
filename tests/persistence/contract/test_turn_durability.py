"""Contract: a turn costs no durable write of its own. Its renew and close, and on
SQLite its open, commit without waiting for the disk (SQLite: ``synchronous=NORMAL``
for their batch; PostgreSQL: ``synchronous_commit`` off for their transaction), are
seen by every other connection at once, and leave the store's own level as it was:
the next append syncs as configured. A test trigger records the level each write of
the store's own connection ran under. PostgreSQL's open stays durable: its token
comes from a sequence a server crash may set back (`Dialect.turn_tokens_fenced`)."""

from __future__ import annotations

import pytest

from persistence import open_store
from persistence.sqlite import SqliteStore
from protocol import Message, TurnHeldError, TurnLease
from tests.persistence.contract.db import execute

#: One row per session update or message insert: the synchronous level in effect.
PROBE = {
    "sqlite": [
        "CREATE TABLE sync_probe (level TEXT)",
        "CREATE TRIGGER sync_probe_sessions AFTER UPDATE ON sessions"
        " BEGIN INSERT INTO sync_probe SELECT synchronous FROM pragma_synchronous; END",
        "CREATE TRIGGER sync_probe_messages AFTER INSERT ON messages"
        " BEGIN INSERT INTO sync_probe SELECT synchronous FROM pragma_synchronous; END",
    ],
    "postgres": [
        "CREATE TABLE sync_probe (level TEXT)",
        "CREATE FUNCTION sync_probe_record() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN INSERT INTO sync_probe VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$",
        "CREATE TRIGGER sync_probe_sessions AFTER UPDATE ON sessions FOR EACH ROW EXECUTE FUNCTION sync_probe_record()",
        "CREATE TRIGGER sync_probe_messages AFTER INSERT ON messages FOR EACH ROW EXECUTE FUNCTION sync_probe_record()",
    ],
}
#: What a write that waits for no disk runs under: SQLite's NORMAL, PostgreSQL's off.
UNSYNCED = {"sqlite": "1", "postgres": "off"}


def _dialect(backend: str) -> str:
    return "sqlite" if backend == "sqlite" else "postgres"


def _install_probe(backend: str, url: str) -> None:
    for statement in PROBE[_dialect(backend)]:
        execute(backend, url, statement)


def _levels(backend: str, url: str) -> set[str]:
    """The levels recorded since the last call (then forgotten)."""
    levels = {str(row[0]) for row in execute(backend, url, "SELECT level FROM sync_probe")}
    execute(backend, url, "DELETE FROM sync_probe")
    return levels


def _configured(backend: str, url: str) -> str:
    """The store's own level, read outside any of its transactions: SQLite's default
    FULL (2), or what a fresh PostgreSQL session gets (``SHOW synchronous_commit``)."""
    if backend == "sqlite":
        return "2"
    return str(execute(backend, url, "SHOW synchronous_commit")[0][0])


def test_open_renew_and_close_wait_for_no_disk_and_appends_still_do(store, store_url, backend):
    store.create_session("s")
    _install_probe(backend, store_url)
    synced, unsynced = _configured(backend, store_url), UNSYNCED[_dialect(backend)]
    assert synced != unsynced  # else this test could not tell them apart
    lease = store.open_turn("s", "A", 30)
    assert _levels(backend, store_url) == {unsynced if backend == "sqlite" else synced}
    lease = store.renew_turn(lease, 30)
    assert lease is not None and _levels(backend, store_url) == {unsynced}
    store.append("s", Message("user", "in the turn"), turn=lease)
    assert _levels(backend, store_url) == {synced}  # the first append: durable, the open with it
    assert store.close_turn(lease) is True
    assert _levels(backend, store_url) == {unsynced}
    store.append("s", Message("user", "after the turn"))
    assert _levels(backend, store_url) == {synced}  # the store's own level, set again


def test_a_keyed_turn_closes_durably_even_through_a_lease_that_does_not_name_its_key(store, store_url, backend):
    """The close completes the key: lost in a crash, the key would open afresh after
    the seal and the same message be answered twice. A lease rebuilt from holder and
    token (as a restarted server adopts a turn) does not carry the key: the store looks."""
    store.create_session("s")
    _install_probe(backend, store_url)
    synced = _configured(backend, store_url)
    lease = store.open_turn("s", "A", 30, key="delivery-1")
    store.append("s", Message("user", "ask"), turn=lease)
    _levels(backend, store_url)
    adopted = TurnLease(lease.session_id, lease.holder, lease.token, 0.0)
    assert store.close_turn(adopted) is True
    assert _levels(backend, store_url) == {synced}
    unkeyed = store.open_turn("s", "A", 30)
    _levels(backend, store_url)
    assert store.close_turn(unkeyed) is True
    assert _levels(backend, store_url) == {UNSYNCED[_dialect(backend)]}


def test_turn_writes_that_retract_or_flag_stay_durable(store, store_url, backend):
    store.create_session("s")
    first = store.open_turn("s", "A", 30)
    store.append("s", Message("assistant", "replaced"), turn=first)
    store.close_turn(first)
    _install_probe(backend, store_url)
    synced = _configured(backend, store_url)
    second = store.open_turn("s", "A", 30, rollback=first.token)  # retracts the turn it replaces
    assert second.rolled_back == 1 and _levels(backend, store_url) == {synced}
    assert store.interrupt_turn("s") is True
    assert _levels(backend, store_url) == {synced}
    assert store.seal_turn("s", lease=second) == 0
    assert _levels(backend, store_url) == {synced}


def test_another_connection_sees_the_open_and_the_close_at_once(store, store_url):
    other = open_store(store_url)  # its own connections (and writer)
    try:
        store.create_session("s")
        lease = store.open_turn("s", "A", 30)
        with pytest.raises(TurnHeldError) as held:
            other.open_turn("s", "B", 30)
        assert held.value.token == lease.token
        with pytest.raises(TurnHeldError):
            other.append("s", Message("user", "outside the turn"))
        assert store.close_turn(lease) is True
        theirs = other.open_turn("s", "B", 30)
        assert theirs.token > lease.token
        assert other.append("s", Message("user", "B's turn"), turn=theirs)[0].seq == 1
    finally:
        other.close()


@pytest.mark.parametrize(("level", "number"), [("OFF", "0"), ("NORMAL", "1"), ("EXTRA", "3")])
def test_sqlite_keeps_the_level_it_was_opened_with(tmp_path, level, number):
    path = str(tmp_path / "state.db")
    store = SqliteStore(path, synchronous=level)
    try:
        store.create_session("s")
        _install_probe("sqlite", path)
        lease = store.open_turn("s", "A", 30)
        assert _levels("sqlite", path) == {min(number, "1")}  # never more than NORMAL, never less than asked
        store.append("s", Message("user", "in the turn"), turn=lease)
        store.close_turn(lease)
        store.append("s", Message("user", "after the turn"))
        levels = _levels("sqlite", path)
        assert number in levels and levels <= {number, min(number, "1")}
    finally:
        store.close()


def test_sqlite_tokens_drawn_by_a_store_opened_later_stay_above_any_an_earlier_one_drew(sqlite_path):
    # an open without fsync lost in an OS crash drew a token the counter forgets: every
    # store's first open moves the counter 2^20 ahead, durably, so none is drawn again
    first, second = SqliteStore(sqlite_path), SqliteStore(sqlite_path)  # two processes' stores
    try:
        first.create_session("a")
        first.create_session("b")
        before = first.open_turn("a", "A", 30)
        after = second.open_turn("b", "B", 30)
        assert after.token >= before.token + 2**20
        assert first.close_turn(before) and first.open_turn("a", "A", 30).token == after.token + 1  # fenced once
    finally:
        first.close()
        second.close()


def test_sqlite_counts_the_commits_made_without_fsync(sqlite_path):
    store = SqliteStore(sqlite_path)
    try:
        store.create_session("s")
        before = store.write_stats().unsynced
        lease = store.open_turn("s", "A", 30)
        store.append("s", Message("user", "in the turn"), turn=lease)
        store.close_turn(lease)
        assert store.write_stats().unsynced - before == 2  # the open and the close; the append synced
    finally:
        store.close()

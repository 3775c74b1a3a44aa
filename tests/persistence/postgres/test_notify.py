"""LISTEN/NOTIFY hints: a committed compaction is announced to listeners of the
same schema, a fenced-off one is not, and other schemas' events are filtered out."""

from __future__ import annotations

import threading

import pytest

from persistence.postgres import PostgresStore
from persistence.postgres._notify import CompactionEvent
from protocol import LeaseLostError, Message, TurnHeldError
from tests.pg import isolated_postgres_url

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(30)]


def _compact(store: PostgresStore, sid: str, mode: str):
    lease = store.acquire_lease(sid, "h", 30)
    try:
        return store.commit_compaction(
            lease, watermark=store.transcript(sid)[-1].seq, compacted=[Message("user", "sum")], mode=mode
        )
    finally:
        store.release_lease(lease)


def test_commit_is_announced_to_listeners_of_the_schema(pg: PostgresStore):
    pg.create_session("s")
    pg.append("s", [Message("user", "a"), Message("assistant", "b")])
    with isolated_postgres_url() as other_url:
        other = PostgresStore(other_url)
        try:
            other.create_session("s")
            other.append("s", [Message("user", "x"), Message("assistant", "y")])
            with pg.listen_compactions() as listener:
                _compact(other, "s", "in_place")  # same channel, another schema: filtered
                record = _compact(pg, "s", "rotate")
                events = listener.wait(5, max_events=1)
        finally:
            other.close()
    assert events == [CompactionEvent("s", record.child_session_id, "rotate", record.token)]


def test_fenced_commit_is_not_announced(pg: PostgresStore):
    pg.create_session("s")
    pg.append("s", [Message("user", "a"), Message("assistant", "b")])
    lease = pg.acquire_lease("s", "h", 30)
    assert pg.release_lease(lease)
    with pg.listen_compactions() as listener:
        with pytest.raises(LeaseLostError):
            pg.commit_compaction(lease, watermark=2, compacted=[Message("user", "sum")], mode="in_place")
        record = _compact(pg, "s", "in_place")  # a later real commit is the first event heard
        events = listener.wait(5, max_events=1)
    assert [(e.session_id, e.token) for e in events] == [("s", record.token)]


def test_a_closed_turn_is_announced_and_a_refused_open_is_not(pg: PostgresStore):
    pg.create_session("s")
    lease = pg.open_turn("s", "A", 30)
    with pg.listen_turns() as listener:
        with pytest.raises(TurnHeldError):
            pg.open_turn("s", "B", 30)
        assert listener.wait_closed(0.2) == set()  # nothing closed yet
        assert pg.close_turn(lease)
        assert listener.wait_closed(5) == {"s"}
        assert not pg.close_turn(lease)  # closed already: no second hint
        assert listener.wait_closed(0.2) == set()


def test_a_registry_held_behind_another_turn_goes_on_when_it_closes(pg: PostgresStore):
    from actors import CompactionPolicy, SessionRegistry

    pg.create_session("s")
    lease = pg.open_turn("s", "another-process", 30)
    with SessionRegistry(pg, policy=CompactionPolicy(lease_ttl_s=30)) as registry:
        held = threading.Thread(target=lambda: registry.session("s").append("user", "after the turn"))
        held.start()
        held.join(0.5)
        assert held.is_alive()  # held while the other holder's turn is open
        pg.append("s", Message("assistant", "inside the turn"), turn=lease)
        pg.close_turn(lease)
        held.join(30)
        assert not held.is_alive()
    assert [m.content for m in pg.transcript("s")] == ["inside the turn", "after the turn"]

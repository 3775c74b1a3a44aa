"""Group commit on PostgreSQL: many sessions' appends and creates share a transaction,
a failing request fails alone, and two writers never deadlock.

The writer is held at a *gate*: another connection holds the messages table in
SHARE mode, the writer's batch stalls at its insert, and everything submitted
meanwhile queues up and is committed together once the gate opens. A session row
another transaction locks holds up that session's appends only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from persistence.postgres import PostgresStore
from protocol import (
    Message,
    SessionEndedError,
    SessionExistsError,
    SessionNotFoundError,
    StoreBusyError,
    TranscriptError,
)
from tests.pg import pg_rows

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


@contextmanager
def gate(url: str) -> Iterator[None]:
    """Hold every writer of the database in its next insert until the block ends: a
    statement trigger on ``messages`` waits for an advisory lock this block holds (a
    row lock would not do: the batch statement skips a locked session and goes on)."""
    import psycopg

    pg_rows(
        url,
        f"CREATE OR REPLACE FUNCTION gate_hold() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN PERFORM pg_advisory_xact_lock_shared({_GATE_KEY}); RETURN NULL; END $$",
    )
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_GATE_KEY,))
        conn.execute(
            "CREATE OR REPLACE TRIGGER gate_hold BEFORE INSERT ON messages "
            "FOR EACH STATEMENT EXECUTE FUNCTION gate_hold()"
        )
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_GATE_KEY,))


_GATE_KEY = 4343


def wait_queued(store: PostgresStore, count: int) -> None:
    """Until the writer is held in a batch of one (at the gate) and ``count`` requests
    wait in its queue (bounded)."""
    deadline = time.monotonic() + 10
    while (stats := store.write_stats()).in_flight != 1 or stats.queued < count:
        assert time.monotonic() < deadline, f"{stats} never reached {count} queued"
        time.sleep(0.005)


class Calls:
    """Calls running on their own threads; each outcome kept by name."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.outcomes: dict[str, Any] = {}

    def start(self, name: str, call: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                self.outcomes[name] = call()
            except BaseException as exc:  # the outcome under test
                self.outcomes[name] = exc

        thread = threading.Thread(target=run, name=name)
        thread.start()
        self.threads.append(thread)

    def join(self) -> dict[str, Any]:
        for thread in self.threads:
            thread.join(30)
        assert not any(t.is_alive() for t in self.threads)
        return self.outcomes


def test_a_failing_request_fails_alone_and_its_batch_commits(pg_url: str):
    PostgresStore(pg_url).close()  # the schema
    pg_rows(
        pg_url,
        """
        CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.content LIKE '%%poison%%' THEN RAISE EXCEPTION 'poisoned row'; END IF;
            RETURN NEW;
        END $$""",
    )
    pg_rows(pg_url, "CREATE TRIGGER poison BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION poison()")
    with PostgresStore(pg_url) as store:
        for sid in ("gate", "ok-1", "ok-2", "ok-3", "bad", "ended", "taken"):
            store.create_session(sid)
        store.end_session("ended", "closed")
        calls = Calls()
        with gate(pg_url):
            calls.start("gate", lambda: store.append("gate", Message("user", "held")))
            wait_queued(store, 0)
            submitted = 0
            for name, call in [
                ("ok-1", lambda: store.append("ok-1", [Message("user", "a"), Message("assistant", "b")])),
                ("bad", lambda: store.append("bad", Message("user", "poison pill"))),
                ("ok-2", lambda: store.append("ok-2", Message("user", "c"))),
                ("ended", lambda: store.append("ended", Message("user", "late"))),
                ("unknown", lambda: store.append("unknown", Message("user", "nobody"))),
                ("taken", lambda: store.create_session("taken")),
                ("new", lambda: store.create_session("new")),
                ("ok-3", lambda: store.append("ok-3", Message("user", "d"))),
            ]:
                calls.start(name, call)
                submitted += 1
                wait_queued(store, submitted)
        out = calls.join()
        assert [m.seq for m in out["ok-1"]] == [1, 2]
        assert out["ok-2"][0].seq == 1 and out["ok-3"][0].seq == 1
        assert out["new"].id == "new" and out["new"].ended_at is None
        assert isinstance(out["bad"], TranscriptError) and "poisoned row" in str(out["bad"])
        assert not isinstance(out["bad"], StoreBusyError)
        assert isinstance(out["ended"], SessionEndedError)
        assert isinstance(out["unknown"], SessionNotFoundError)
        assert isinstance(out["taken"], SessionExistsError)
        rows = pg_rows(pg_url, "SELECT session_id, seq, content FROM messages ORDER BY session_id, seq")
        assert rows == [
            ("gate", 1, '"held"'),
            ("ok-1", 1, '"a"'),
            ("ok-1", 2, '"b"'),
            ("ok-2", 1, '"c"'),
            ("ok-3", 1, '"d"'),
        ]
        assert store.get_session("new") is not None


def test_two_writers_locking_opposite_orders_never_deadlock(pg_url: str, caplog):
    """Each writer's batch names the same sessions in opposite orders; both lock them
    in id order, so neither waits for the other while holding what it wants."""
    caplog.set_level(logging.DEBUG, logger="session_actors.postgres.writer")
    ids = [f"shared-{i:02d}" for i in range(12)]
    with PostgresStore(pg_url) as one, PostgresStore(pg_url) as two:
        for sid in ids + ["gate-1", "gate-2"]:
            one.create_session(sid)
        for round_ in range(3):
            calls = Calls()
            with gate(pg_url):
                calls.start("gate-1", lambda: one.append("gate-1", Message("user", "g")))
                calls.start("gate-2", lambda: two.append("gate-2", Message("user", "g")))
                wait_queued(one, 0)
                wait_queued(two, 0)
                for store, order, tag in ((one, ids, "one"), (two, ids[::-1], "two")):
                    for n, sid in enumerate(order):
                        calls.start(
                            f"{tag}-{sid}", lambda s=store, sid=sid: s.append(sid, Message("user", f"{round_} {sid}"))
                        )
                        wait_queued(store, n + 1)
            out = calls.join()
            failed = {k: v for k, v in out.items() if isinstance(v, BaseException)}
            assert not failed
        deadlocks = [r for r in caplog.records if "Deadlock" in r.getMessage()]
        assert not deadlocks
        seqs = pg_rows(
            pg_url,
            "SELECT session_id, array_agg(seq ORDER BY seq) FROM messages "
            "WHERE session_id LIKE 'shared-%%' GROUP BY session_id",
        )
        assert sorted(seqs) == [(sid, list(range(1, 7))) for sid in ids]


def test_appends_of_many_sessions_share_one_transaction(pg_url: str):
    with PostgresStore(pg_url) as store:
        for sid in ["gate"] + [f"s-{n}" for n in range(20)]:
            store.create_session(sid)
        calls = Calls()
        with gate(pg_url):
            calls.start("gate", lambda: store.append("gate", Message("user", "held")))
            wait_queued(store, 0)
            before = store.write_stats()
            for n in range(40):  # two appends per session, each caller its own
                calls.start(f"a-{n}", lambda n=n: store.append(f"s-{n % 20}", Message("user", f"m{n}")))
            wait_queued(store, 40)
        out = calls.join()
        after = store.write_stats()
        assert after.transactions - before.transactions == 2  # the gate's, then all 40
        assert after.requests - before.requests == 41
        for n in range(20):
            seqs = sorted(out[f"a-{k}"][0].seq for k in (n, n + 20))
            assert seqs == [1, 2]
        rows = pg_rows(pg_url, "SELECT session_id, seq, content FROM messages WHERE session_id <> 'gate'")
        assert sorted(rows) == sorted(
            (m.session_id, m.seq, f'"{m.content}"') for o in out.values() for m in o if m.session_id != "gate"
        )


def test_concurrent_creates_share_transactions_and_one_id_is_created_once(pg_url: str):
    with PostgresStore(pg_url) as store:
        store.create_session("gate")
        calls = Calls()
        with gate(pg_url):
            calls.start("gate", lambda: store.append("gate", Message("user", "held")))
            wait_queued(store, 0)
            before = store.write_stats()
            for n in range(24):
                calls.start(f"distinct-{n}", lambda n=n: store.create_session(f"s-{n}", source="bench"))
            for n in range(6):
                calls.start(f"same-{n}", lambda: store.create_session("same"))
            wait_queued(store, 30)
        out = calls.join()
        assert store.write_stats().transactions - before.transactions == 2
        assert all(out[f"distinct-{n}"].source == "bench" for n in range(24))
        same = [out[f"same-{n}"] for n in range(6)]
        assert sum(not isinstance(o, BaseException) for o in same) == 1
        assert sum(isinstance(o, SessionExistsError) for o in same) == 5
        assert pg_rows(pg_url, "SELECT count(*) FROM sessions")[0][0] == 24 + 2


#: Text that JSON must escape, or that reaches the server as escapes (the batch is
#: one ASCII JSON document): quotes, backslashes, an escape written out as text,
#: controls, line separators, astral characters (a surrogate pair in JSON), CJK.
TRICKY = [
    'say "hi" \\ and \\\\',
    "literal \\u0000 and \\ud800 as text",
    "tab\tnew\nline\r",
    "\u2028\u2029",
    "emoji \U0001f468\u200d\U0001f469 and \U0001f600",
    "\u4e2d\u6587 \u00e9",
    '{"json": [1, 2]} as text',
    "",
    " ",
]


def test_tricky_text_in_one_batch_is_stored_exactly_as_sent(pg_url: str):
    """Every message of a batch travels inside one JSON document: what is read back,
    and the stored JSON text, equal what was appended, character for character."""
    from persistence._rows import message_params

    with PostgresStore(pg_url) as store:
        for sid in ["gate", "tricky-a", "tricky-b"]:
            store.create_session(sid)
        messages = {
            "tricky-a": [Message("user", text, name=text or None, meta={"k": text}) for text in TRICKY],
            "tricky-b": [
                Message(
                    "assistant",
                    [{"type": "text", "text": t} for t in TRICKY],
                    tool_calls=[{"id": t, "type": "function"} for t in TRICKY],
                    tool_call_id=TRICKY[4],
                )
            ],
        }
        calls = Calls()
        with gate(pg_url):
            calls.start("gate", lambda: store.append("gate", Message("user", "held")))
            wait_queued(store, 0)
            before = store.write_stats()
            for n, (sid, batch) in enumerate(messages.items()):
                calls.start(sid, lambda sid=sid, batch=batch: store.append(sid, batch))
                wait_queued(store, n + 1)
        out = calls.join()
        assert store.write_stats().transactions - before.transactions == 2  # the gate's, then both
        for sid, sent in messages.items():
            read = store.transcript(sid)
            assert [(m.role, m.content, m.name, m.tool_call_id, m.tool_calls, m.meta) for m in read] == [
                (m.role, m.content, m.name, m.tool_call_id, m.tool_calls, m.meta) for m in sent
            ]
            assert [(m.seq, m.id) for m in read] == [(m.seq, m.id) for m in out[sid]]
            stored = pg_rows(
                pg_url,
                "SELECT content, name, tool_calls, meta FROM messages WHERE session_id = %s ORDER BY seq",
                (sid,),
            )
            expected = [message_params(m, None) for m in sent]
            assert stored == [(p["content"], p["name"], p["tool_calls"], p["meta"]) for p in expected]


def test_callers_after_one_that_never_passes_the_release_on_still_return(pg_url: str, monkeypatch):
    """The callers of a batch release one another in a chain. A caller interrupted
    while it waited never passes the release on: the writer sweeps the chain, so the
    callers after it still return (each with its own result)."""
    from persistence.postgres import _batch as batch

    class Interrupted(BaseException):
        """What an interrupt (KeyboardInterrupt, an async exception) is to the waiter."""

    original = batch.Pending.wait

    def interrupted(self):  # the fault: wakes, then dies before releasing the next caller
        if isinstance(self.job, batch.AppendJob) and self.job.session_id == "stalls":
            self.done.wait()
            raise Interrupted()
        return original(self)

    monkeypatch.setattr(batch.Pending, "wait", interrupted)
    with PostgresStore(pg_url) as store:
        order = ["first", "stalls", "third", "fourth"]
        for sid in ["gate"] + order:
            store.create_session(sid)
        calls = Calls()
        with gate(pg_url):
            calls.start("gate", lambda: store.append("gate", Message("user", "held")))
            wait_queued(store, 0)
            for n, sid in enumerate(order):  # queued in this order: the chain's order
                calls.start(sid, lambda sid=sid: store.append(sid, Message("user", sid)))
                wait_queued(store, n + 1)
        out = calls.join()
        assert isinstance(out["stalls"], Interrupted)
        assert [out[sid][0].content for sid in ("first", "third", "fourth")] == ["first", "third", "fourth"]
        rows = pg_rows(pg_url, "SELECT session_id FROM messages WHERE session_id <> 'gate' ORDER BY id")
        assert [r[0] for r in rows] == order  # the interrupted caller's row was committed too

"""The writer's pipeline: the next batch is sent while the last one commits.

A batch is answered only once its own commit is; a session's appends commit in
the order they were queued, whatever becomes of the batch before; a batch lost
with the connection is sent again only when the server is known to have run
none of it (terminated), otherwise its callers hear that it may or may not have
been written.

The writer is held at two points with real locks: its statement behind a session
row another connection locked (a *gate*, as in test_group_commit), its commit
inside a deferred trigger that waits for an advisory lock the test holds (a
*hold*), so a second batch is in flight, sent, while the first commits.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from persistence.postgres import PostgresStore
from protocol import Message, StoreBusyError, TranscriptError
from tests.persistence.postgres.test_group_commit import Calls, gate, wait_queued
from tests.persistence.sqlite.test_append_nowait import Completions
from tests.pg import pg_rows, with_application_name

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

_HOLD_KEY = 4242
_STALL_KEY = 4244


def install_hold(url: str) -> None:
    """A deferred trigger: the commit of a row whose content says "hold" waits for the
    advisory lock `held_commits` holds, then fails if the content says "poison"; and
    the insert of a row whose content says "stall" waits for `stalled_inserts`'."""
    PostgresStore(url).close()  # the schema
    pg_rows(
        url,
        f"""
        CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.content LIKE '%%hold%%' THEN PERFORM pg_advisory_xact_lock_shared({_HOLD_KEY}); END IF;
            IF NEW.content LIKE '%%poison%%' THEN RAISE EXCEPTION 'poisoned at commit'; END IF;
            RETURN NULL;
        END $$""",
    )
    pg_rows(
        url,
        "CREATE CONSTRAINT TRIGGER hold AFTER INSERT ON messages DEFERRABLE INITIALLY DEFERRED "
        "FOR EACH ROW EXECUTE FUNCTION hold()",
    )
    pg_rows(
        url,
        f"""
        CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.content LIKE '%%stall%%' THEN PERFORM pg_advisory_xact_lock_shared({_STALL_KEY}); END IF;
            RETURN NEW;
        END $$""",
    )
    pg_rows(url, "CREATE TRIGGER stall BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION stall()")


@contextmanager
def held_commits(url: str) -> Iterator[None]:
    """Commits of "hold" rows wait until the block ends."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_HOLD_KEY,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_HOLD_KEY,))


@contextmanager
def stalled_inserts(url: str) -> Iterator[None]:
    """Inserts of "stall" rows wait until the block ends (their statement is in flight)."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_STALL_KEY,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_STALL_KEY,))


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def in_flight_and_queued(store: PostgresStore) -> tuple[int, int]:
    stats = store.write_stats()
    return stats.in_flight, stats.queued


def committing(url: str, app: str) -> list[int]:
    """The store's backends waiting for the hold in their commit."""
    return [
        pid
        for (pid,) in pg_rows(
            url, "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event = 'advisory'", (app,)
        )
    ]


@contextmanager
def held_store(pg_url: str, *sessions: str) -> Iterator[tuple[PostgresStore, str]]:
    """A store whose connections carry their own application name (returned, to find
    its backends), with the commit hold installed and ``sessions`` created."""
    app = f"pipe-{uuid.uuid4().hex[:8]}"
    install_hold(pg_url)
    with PostgresStore(with_application_name(pg_url, app)) as store:
        for sid in sessions:
            store.create_session(sid)
        yield store, app


def first_batch_committing(
    pg_url: str, store: PostgresStore, app: str, calls: Calls, *more: tuple[str, str, Message | list[Message]]
) -> None:
    """Under a gate: "held" appends to session "g" (its batch stops at the gate),
    then each ``(name, session, messages)`` is queued, in this order. Returns once the
    gate opened and the first batch ran its statement and waits in its commit."""
    with gate(pg_url):
        calls.start("held", lambda: store.append("g", Message("user", "hold me")))
        wait_queued(store, 0)
        for n, (name, sid, messages) in enumerate(more):
            calls.start(name, lambda sid=sid, messages=messages: store.append(sid, messages))
            wait_queued(store, n + 1)
    wait_for(lambda: committing(pg_url, app), "the first batch waits in its commit")


def contents(url: str) -> list[tuple[str, int, str]]:
    return pg_rows(url, "SELECT session_id, seq, content FROM messages ORDER BY session_id, seq")


def test_a_batch_is_answered_only_after_its_commit_and_the_next_one_rides_behind_it(pg_url: str):
    with held_store(pg_url, "g", "b") as (store, app):
        calls = Calls()
        with held_commits(pg_url):
            first_batch_committing(pg_url, store, app, calls, ("behind", "b", Message("user", "behind")))
            # the statement ran; its commit waits at the hold, the next batch was sent
            wait_for(lambda: store.write_stats().in_flight == 2, "the second batch in flight")
            assert store.write_stats().queued == 0
            assert calls.outcomes == {}  # neither answered: the first is not committed yet
            assert contents(pg_url) == []  # nor visible
        out = calls.join()
    assert [m.seq for m in out["held"]] == [1] and [m.seq for m in out["behind"]] == [1]
    assert contents(pg_url) == [("b", 1, '"behind"'), ("g", 1, '"hold me"')]


def test_terminated_while_committing_with_the_next_batch_in_flight_both_run_once(pg_url: str):
    """pg_terminate_backend of the writer's backend during the first batch's commit:
    the server rolled it back and never started the second, so both are sent again,
    on a new connection, and each is written exactly once."""
    with held_store(pg_url, "g", "b", "c") as (store, app):
        calls = Calls()
        with held_commits(pg_url):
            first_batch_committing(
                pg_url,
                store,
                app,
                calls,
                ("b", "b", [Message("user", "b1"), Message("user", "b2")]),
                ("c", "c", Message("user", "c1")),
            )
            wait_for(lambda: store.write_stats().in_flight == 3, "the second batch in flight")
            (pid,) = committing(pg_url, app)
            assert pg_rows(pg_url, "SELECT pg_terminate_backend(%s)", (pid,)) == [(True,)]
            wait_for(
                lambda: not pg_rows(pg_url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)), "the backend gone"
            )
        out = calls.join()
    assert not [o for o in out.values() if isinstance(o, BaseException)], out
    assert [m.seq for m in out["b"]] == [1, 2] and [m.seq for m in out["held"]] == [1]
    assert contents(pg_url) == [("b", 1, '"b1"'), ("b", 2, '"b2"'), ("c", 1, '"c1"'), ("g", 1, '"hold me"')]


def test_a_batch_failing_at_commit_lets_the_next_commit_and_then_fails_only_its_guilty_request(pg_url: str):
    """The first batch's commit fails (a deferred trigger) while the second is in
    flight on the same, live, connection: the second commits; the first is tried
    again, fails again, and is replayed request by request: only the poisoned
    request fails, and nothing of it is written."""
    with held_store(pg_url, "g", "p", "q", "r") as (store, app):
        calls = Calls()
        with held_commits(pg_url):
            with stalled_inserts(pg_url):
                with gate(pg_url):
                    calls.start("gate", lambda: store.append("g", Message("user", "gate")))
                    wait_queued(store, 0)
                    calls.start("p", lambda: store.append("p", Message("user", "hold poison stall")))
                    calls.start("q", lambda: store.append("q", Message("user", "q1")))
                    wait_queued(store, 2)
                # the gate's batch committed; p's and q's statement stalls at p's row
                wait_for(lambda: in_flight_and_queued(store) == (2, 0), "the batch of p and q in flight")
                calls.start("r", lambda: store.append("r", Message("user", "r1")))
                wait_for(lambda: store.write_stats().queued == 1, "r queued")
            wait_for(lambda: committing(pg_url, app), "the batch of p and q waits in its commit")
            wait_for(lambda: in_flight_and_queued(store) == (3, 0), "r's batch in flight behind it")
        out = calls.join()
    assert [m.seq for m in out["r"]] == [1] and [m.seq for m in out["q"]] == [1]
    assert isinstance(out["p"], TranscriptError) and "poisoned at commit" in str(out["p"])
    assert not isinstance(out["p"], StoreBusyError)
    assert contents(pg_url) == [("g", 1, '"gate"'), ("q", 1, '"q1"'), ("r", 1, '"r1"')]


def test_appends_queued_without_waiting_commit_in_queue_order_across_pipelined_batches(pg_url: str):
    """One thread queues thousands of appends to a few sessions without waiting for
    any (`append_nowait`): batches follow one another down the pipeline, and each
    session's seqs follow the order its appends were queued."""
    sessions = [f"s{k}" for k in range(4)]
    per_session = 600
    with PostgresStore(pg_url) as store:
        for sid in sessions:
            store.create_session(sid)
        done = Completions(expected=len(sessions) * per_session)
        for i in range(per_session):
            for sid in sessions:
                assert store.append_nowait(sid, [Message("user", f"{sid}-{i}")], done.on_done)
        assert done.all_in.wait(30)
        assert all(error is None for _, error, _ in done.outcomes)
        assert store.write_stats().transactions < len(sessions) * per_session / 4  # they were batched
        for sid in sessions:
            assert [(m.seq, m.content) for m in store.transcript(sid)] == [
                (i + 1, f"{sid}-{i}") for i in range(per_session)
            ]


def test_terminations_under_load_lose_nothing_acknowledged_and_report_the_unknown(pg_url: str):
    """Many callers append while the store's backends are terminated again and
    again. Every acknowledged append is in the table with the seqs it was given; a
    row in the table was either acknowledged or its caller was told it may or may
    not have been written; a session's seqs have no gaps; nothing is written twice."""
    app = f"pipe-{uuid.uuid4().hex[:8]}"
    url = with_application_name(pg_url, app)
    sessions = [f"s{k}" for k in range(16)]
    acked: dict[str, tuple[str, int]] = {}
    unknown: set[str] = set()
    failed: list[BaseException] = []
    stop = threading.Event()
    started = threading.Barrier(len(sessions) + 1)
    with PostgresStore(url, patience_s=5) as store:
        for sid in sessions:
            store.create_session(sid)

        def caller(sid: str) -> None:
            started.wait()
            n = 0
            while not stop.is_set():
                text = f"{sid}-{n}"
                n += 1
                try:
                    (stored,) = store.append(sid, Message("user", text))
                    acked[text] = (sid, stored.seq)
                except StoreBusyError as exc:
                    if "may or may not" in str(exc):
                        unknown.add(text)
                    else:
                        failed.append(exc)
                except TranscriptError as exc:
                    failed.append(exc)

        threads = [threading.Thread(target=caller, args=(sid,)) for sid in sessions]
        for thread in threads:
            thread.start()
        started.wait()
        rng = random.Random(7)
        killed = 0
        try:
            while killed < 25:
                target = store.write_stats().transactions + rng.randint(1, 20)
                wait_for(lambda: store.write_stats().transactions >= target, "commits")
                killed += sum(
                    ok
                    for (ok,) in pg_rows(
                        pg_url,
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = %s AND state = 'active'",
                        (app,),
                    )
                )
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
    assert not failed, failed[:3]
    rows = pg_rows(pg_url, "SELECT content, session_id, seq FROM messages")
    stored = {content.strip('"'): (sid, seq) for content, sid, seq in rows}
    assert len(stored) == len(rows)  # nothing written twice
    assert {text: stored.get(text) for text in acked} == acked  # nothing acknowledged lost
    assert set(stored) - set(acked) <= unknown  # nothing else written
    for sid in sessions:
        seqs = sorted(seq for s, seq in stored.values() if s == sid)
        assert seqs == list(range(1, len(seqs) + 1))
    assert len(acked) > 1000


@contextmanager
def files_open(count: int) -> Iterator[None]:
    """``count`` more descriptors open in this process (/dev/null), so that the next
    sockets get numbers from 1024 up, as in a busy server process."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 256
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(count)]
    try:
        yield
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_writer_keeps_writing_with_its_connection_above_descriptor_1024(pg_url: str):
    """select() refuses descriptors from 1024 up (ValueError): with the writer's
    connection there, the writer thread died at its first pipelined batch and every
    append waited for ever. Appends and their completions still arrive."""
    with files_open(1100):
        with PostgresStore(pg_url) as store:
            for sid in ("a", "b"):
                store.create_session(sid)
            done = Completions(expected=40)
            for i in range(20):
                for sid in ("a", "b"):
                    assert store.append_nowait(sid, [Message("user", f"{sid}-{i}")], done.on_done)
            assert done.all_in.wait(10), f"{len(done.outcomes)} of 40 appends answered"
            assert all(error is None for _, error, _ in done.outcomes)
            (stored,) = store.append("a", Message("user", "waited"))
            assert stored.seq == 21
            assert [m.content for m in store.transcript("b")] == [f"b-{i}" for i in range(20)]


def test_a_batch_whose_sending_fails_unexpectedly_is_written_the_plain_way(pg_url: str, monkeypatch):
    """Sending the first batch down the pipeline fails with something else than a
    driver error (injected): the writer thread died there and the append's
    completion never came. The batch is written the plain way instead."""
    from persistence.postgres._pipeline import AppendPipeline

    real_send, failures = AppendPipeline.send, []

    def send_failing_once(self, *args, **kwargs):
        if not failures:
            failures.append(1)
            raise RuntimeError("injected")
        return real_send(self, *args, **kwargs)

    with PostgresStore(pg_url) as store:
        store.create_session("a")
        monkeypatch.setattr(AppendPipeline, "send", send_failing_once)
        done = Completions(expected=1)
        assert store.append_nowait("a", [Message("user", "first")], done.on_done)
        assert done.all_in.wait(10), "the append was never answered"
        assert failures and done.outcomes[0][1] is None
        (stored,) = store.append("a", Message("user", "second"))
        assert stored.seq == 2
        assert [m.content for m in store.transcript("a")] == ["first", "second"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_batch_too_big_for_jsonb_is_still_written(pg_url: str):
    """A jsonb value holds at most 268435455 bytes: an append (or a batch) whose rows
    take more failed, every caller told it may or may not have been written, where
    the statement reading json wrote it. Two messages of 130 MiB are written, once."""
    size = 130 * 1024 * 1024
    messages = [Message("user", "x" * size), Message("assistant", "y" * size)]
    with PostgresStore(pg_url, patience_s=240, max_content_bytes=256 * 1024 * 1024) as store:
        store.create_session("big")
        stored = store.append("big", messages)
        del messages
        assert [m.seq for m in stored] == [1, 2]
        assert store.append("big", Message("user", "after"))[0].seq == 3
    assert pg_rows(pg_url, "SELECT seq, octet_length(content) FROM messages ORDER BY seq") == [
        (1, size + 2),
        (2, size + 2),
        (3, 7),
    ]


def test_a_request_held_back_for_the_batch_after_counts_as_queued(pg_url: str):
    """A request whose session is in the batch in flight is taken from the queue and
    held for the batch after: write_stats counted it nowhere (neither in flight nor
    queued), so a store with three requests outstanding showed two."""
    with held_store(pg_url, "g", "b") as (store, app):
        calls = Calls()
        with held_commits(pg_url):
            first_batch_committing(
                pg_url, store, app, calls, ("g2", "g", Message("user", "g2")), ("b", "b", Message("user", "b1"))
            )
            wait_for(lambda: store.write_stats().in_flight == 2, "b's batch in flight behind it")
            assert in_flight_and_queued(store) == (2, 1)  # g2 waits for the batch after
        out = calls.join()
    assert [m.seq for m in out["held"]] == [1] and [m.seq for m in out["g2"]] == [2]
    assert [m.seq for m in out["b"]] == [1]


def test_a_session_id_outside_ascii_is_answered_under_another_client_encoding(pg_url: str):
    """The pipeline read the session ids of its rows as UTF-8 whatever the client
    encoding (a LATIN1 database, PGCLIENTENCODING): "café" came back as b"caf\\xe9",
    and every append to it was answered "write failed" although it committed."""
    with PostgresStore(f"{pg_url}&client_encoding=LATIN1") as store:
        store.create_session("café")
        assert [store.append("café", Message("user", f"m{i}"))[0].seq for i in range(3)] == [1, 2, 3]
    assert contents(pg_url) == [("café", 1, '"m0"'), ("café", 2, '"m1"'), ("café", 3, '"m2"')]


def test_a_crash_while_landing_a_sent_batch_answers_that_it_may_have_been_written(pg_url: str, monkeypatch):
    """Reading a batch's rows crashes (injected) after its Sync was sent: the server
    commits it anyway, so its caller must hear that the outcome is unknown, never a
    plain failure (which says nothing was written: a retry would write it twice)."""
    from persistence.postgres._pipeline import AppendPipeline

    real_rows = AppendPipeline.rows

    def rows_then_crash(self):
        real_rows(self)
        raise RuntimeError("injected")

    with PostgresStore(pg_url) as store:
        store.create_session("a")
        monkeypatch.setattr(AppendPipeline, "rows", rows_then_crash)
        with pytest.raises(TranscriptError) as failed:
            store.append("a", Message("user", "sent"))
        monkeypatch.setattr(AppendPipeline, "rows", real_rows)
        wait_for(lambda: contents(pg_url) != [], "the sent batch committed by the server")
        assert isinstance(failed.value, StoreBusyError) and "may or may not" in str(failed.value)
        assert store.append("a", Message("user", "next"))[0].seq == 2
    assert contents(pg_url) == [("a", 1, '"sent"'), ("a", 2, '"next"')]

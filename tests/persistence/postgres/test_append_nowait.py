"""`PostgresStore.append_nowait`: an append queued for the group-commit writer without a
waiting thread, completed by the writer after its commit (the event loop's path)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from persistence.postgres import PostgresStore
from protocol import InvalidMessageError, Message
from tests.persistence.postgres.test_group_commit import gate, wait_queued
from tests.persistence.sqlite.test_append_nowait import Completions

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


def test_a_batch_of_submitted_appends_is_completed_by_the_writer_and_woken_once(pg_url: str):
    with PostgresStore(pg_url) as store:
        for sid in ["gate"] + [f"s{k}" for k in range(8)]:
            store.create_session(sid)
        done = Completions(expected=81)
        with gate(pg_url):  # the writer waits: every submission joins one batch
            assert store.append_nowait("gate", [Message("user", "held")], done.on_done)
            wait_queued(store, 0)
            for i in range(10):
                for k in range(8):
                    assert store.append_nowait(f"s{k}", [Message("user", f"{k}-{i}")], done.on_done)
            wait_queued(store, 80)
        assert done.all_in.wait(10)
        assert done.wakes == 2 and done.woken_after == [1, 81]  # once per batch, after its completions
        assert all(error is None for _, error, _ in done.outcomes)
        assert {thread for _, _, thread in done.outcomes} == {f"pg-writer-{id(store):x}"}
        stored = [built() for built, _, _ in done.outcomes]
        for k in range(8):
            assert [m.content for m in store.transcript(f"s{k}")] == [f"{k}-{i}" for i in range(10)]
        first = [m for batch in stored for m in batch if m.session_id == "s0"]
        assert [m.seq for m in first] == list(range(1, 11)) and first[0].content == "0-0"
        assert [(m.id, m.seq) for m in store.transcript("s0")] == [(m.id, m.seq) for m in first]


def test_bad_messages_are_refused_before_anything_is_queued_and_empty_ones_are_not_submitted(pg_url: str):
    with PostgresStore(pg_url, max_content_bytes=16) as small:
        small.create_session("s")
        with pytest.raises(InvalidMessageError):
            small.append_nowait("s", [Message("user", "x" * 17)], lambda *_: None)
        assert small.append_nowait("s", [], lambda *_: None) is False
        assert small.write_stats().queued == 0 and small.transcript("s") == []


def test_a_waiting_caller_and_submissions_share_a_batch(pg_url: str):
    """Submitted requests are completed first; the waiting callers of the same batch
    are still released (the chain skips the submitted ones, which have no thread)."""
    with PostgresStore(pg_url) as store:
        for sid in ("gate", "a", "b", "c"):
            store.create_session(sid)
        done = Completions(expected=2)
        outcome: dict[str, Any] = {}
        with gate(pg_url):
            assert store.append_nowait("gate", [Message("user", "held")], lambda *_: None)
            wait_queued(store, 0)
            assert store.append_nowait("a", [Message("user", "a")], done.on_done)
            wait_queued(store, 1)
            caller = threading.Thread(target=lambda: outcome.setdefault("b", store.append("b", Message("user", "b"))))
            caller.start()
            wait_queued(store, 2)
            assert store.append_nowait("c", [Message("user", "c")], done.on_done)
            wait_queued(store, 3)
        caller.join(30)
        assert not caller.is_alive() and outcome["b"][0].content == "b"
        assert done.all_in.wait(10)
        assert [built()[0].content for built, _, _ in done.outcomes] == ["a", "c"]


def test_a_failing_telemetry_hook_still_completes_the_submission(pg_url: str, monkeypatch):
    """The appends counter raises on the writer thread (a broken metrics SDK;
    injected): the committed append is still completed, so its actor is answered."""
    from persistence import _telemetry as telemetry

    def broken(count: int, seconds: float) -> None:
        raise RuntimeError("the metrics SDK is broken")

    monkeypatch.setattr(telemetry, "appended", broken)
    with PostgresStore(pg_url) as store:
        store.create_session("metered")
        done = Completions(expected=1)
        assert store.append_nowait("metered", [Message("user", "counted or not")], done.on_done)
        assert done.all_in.wait(10)
        [(built, error, _)] = done.outcomes
        assert error is None and built()[0].content == "counted or not"

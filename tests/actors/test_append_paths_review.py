"""Edges of the appends that run off the actor thread (caller-run and submitted):
an actor they hand over still stops, and an actor stopped under a submitted
append still answers it.

The registries and stores are real (one SQLite file); a second registry stands
for another process. A submitted append is kept uncommitted by holding the SQLite
write lock from another connection (see test_append_submitted).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pykka
import pytest

from actors.session.actor import SessionActor
from actors.testing import GatedCompressor
from persistence import _telemetry as telemetry
from protocol import CompressionStatus

from .helpers import conversation, result_of, run_in_thread
from .test_append_submitted import WriteLock, contents, db, make, submitted_and_held

pytestmark = pytest.mark.timeout(60)


def session_actors() -> set[Any]:
    return set(pykka.ActorRegistry.get_by_class(SessionActor))


@pytest.mark.parametrize("path", ["caller-run", "submitted"])
def test_an_actor_handed_over_by_an_append_off_its_thread_stops(make, path):
    """Another process rotated the session and this registry already serves the
    child: an append on the parent's handle meets the parent ended, its actor hands
    over to the child's and must stop (as it does when a mailbox message hands it
    over), not stay resident until the registry closes."""
    registry, store = make()
    gated = GatedCompressor()
    gated.release()
    handle = registry.session("handed")
    handle.append(conversation(4))
    (parent_actor,) = session_actors()
    other, _ = make(gated, mode="rotate")
    outcome = other.session("handed").compress()
    assert outcome.status is CompressionStatus.ROTATED
    registry.session(outcome.session_id)  # the child's own actor, in this registry

    if path == "caller-run":
        stored = handle.append("user", "after the rotation")
    else:
        stored = asyncio.run(handle.append_async("user", "after the rotation"))
    assert stored.session_id == outcome.session_id
    assert contents(store, outcome.session_id)[-1] == "after the rotation"
    assert parent_actor.actor_stopped.wait(10), "the handed-over actor never stopped"


def test_closing_the_registry_under_a_submitted_append_still_answers_it(make, db):
    """registry.close() stops the actor while its append is submitted: the stop
    waits for the commit, and the awaiting task gets its answer even though the
    actor is dead when the commit completes it (the automatic-compaction check then
    meets a stopped actor: the actor has not counted the session yet, so it asks).
    Nothing else reaches the actor first (a message in its mailbox would take the
    append through it)."""
    gated = GatedCompressor()
    gated.release()  # nothing may block if an attempt started
    registry, store = make(gated, max_tokens=10_000)
    handle = registry.session("closing")
    (actor,) = session_actors()

    async def main() -> Any:
        lock = WriteLock(db)
        try:
            task = await submitted_and_held(store, handle.append_async("assistant", "two"))
            closing, box = run_in_thread(registry.close)
            # the actor is marked stopped before its on_stop waits for the append
            assert await asyncio.to_thread(actor.actor_stopped.wait, 10)
            assert not task.done()
        finally:
            lock.release()
        stored = await asyncio.wait_for(task, 10)
        await asyncio.to_thread(result_of, closing, box)
        return stored

    stored = asyncio.run(main())
    assert stored.seq == 1 and stored.content == "two"
    assert contents(store, "closing") == ["two"]


def test_a_failing_telemetry_hook_neither_loses_a_submitted_append_nor_its_actor(make_registry, monkeypatch):
    """The appends counter raises on the writer thread (a broken metrics SDK;
    injected): the committed append is still answered, and the actor's exclusivity
    is released with it, so the next append is not stuck behind it forever."""
    registry = make_registry()
    handle = registry.session("metered")
    handle.append("user", "one")
    calls: list[int] = []

    def broken(count: int, seconds: float) -> None:  # only the submitted path calls it
        calls.append(count)
        raise RuntimeError("the metrics SDK is broken")

    monkeypatch.setattr(telemetry, "appended", broken)

    async def main() -> tuple[Any, Any]:
        first = await asyncio.wait_for(handle.append_async("assistant", "two"), 10)
        second = await asyncio.wait_for(handle.append_async("user", "three"), 10)
        return first, second

    first, second = asyncio.run(main())
    assert calls, "no append was submitted"
    assert (first.seq, second.seq) == (2, 3)
    assert [m.content for m in registry.store.transcript("metered")] == ["one", "two", "three"]

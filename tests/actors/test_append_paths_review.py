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

from actors.actor import SessionActor
from actors.testing import GatedCompressor
from protocol import CompressionStatus

from .helpers import conversation, result_of, run_in_thread
from .test_append_submitted import WriteLock, contents, db, make, submitted_and_held  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(60)


def session_actors() -> set[Any]:
    return set(pykka.ActorRegistry.get_by_class(SessionActor))


def uncountable(messages: Any) -> int:
    raise ValueError("this counter cannot count")


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
    meets a stopped actor: a counter that cannot count keeps that check asking)."""
    gated = GatedCompressor()
    gated.release()  # no attempt starts (the counter fails), and none may block
    registry, store = make(gated, max_tokens=10_000, token_counter=uncountable)
    handle = registry.session("closing")
    handle.append("user", "one")
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
    assert stored.seq == 2 and stored.content == "two"
    assert contents(store, "closing") == ["one", "two"]

"""An open turn survives its actor handing over to another resident actor.

Another process rotated the session while this registry already served the child
(a handle opened on the child's id): the parent's next append meets the parent
ended and its actor hands over to the child's. A turn open on the parent's actor
must go with it: the owner's messages stay contiguous, and every other handle's
mutating call waits for the turn to close, on the child's actor too.

Real registries and one SQLite file; a second registry stands for another process.
One event loop makes the orderings deterministic: a coroutine's request is sent
before its first await.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from actors.testing import GatedCompressor
from protocol import CompressionStatus

from .helpers import conversation, wait_until
from .test_append_submitted import contents, db, make

pytestmark = pytest.mark.timeout(60)


def rotated_elsewhere(make, session_id: str) -> str:
    """Rotate ``session_id`` from another registry (process); the child's id."""
    gated = GatedCompressor()
    gated.release()
    other, _ = make(gated, mode="rotate")
    outcome = other.session(session_id).compress()
    assert outcome.status is CompressionStatus.ROTATED
    return outcome.session_id


def parent_handles_and_child(make, registry, session_id: str) -> tuple[object, object, object]:
    """Two handles on ``session_id`` (same actor) and one on the child another process
    rotated it into: this registry serves the child already, so a hand-over is coming."""
    owner, bystander = registry.session(session_id), registry.session(session_id)
    owner.append(conversation(4))
    return owner, bystander, registry.session(rotated_elsewhere(make, session_id))


@contextlib.asynccontextmanager
async def handed_over_inside(
    child_turn_of: object, registry: object, owner_turn: Callable[[], Awaitable[None]]
) -> AsyncIterator[asyncio.Task[None]]:
    """Inside a turn of ``child_turn_of`` (a handle on the child, after its "child ask"):
    ``owner_turn`` running as a task, once the parent's actor has handed over."""
    stopped = registry.stats()["actors_stopped"]
    async with child_turn_of.turn():
        await child_turn_of.append_async("user", "child ask")
        moving = asyncio.ensure_future(owner_turn())
        await asyncio.to_thread(wait_until, lambda: registry.stats()["actors_stopped"] > stopped, 10, "the hand-over")
        yield moving


def test_a_turn_open_when_its_actor_hands_over_stays_contiguous(make):
    registry, store = make()
    owner, bystander = registry.session("moving"), registry.session("moving")
    owner.append(conversation(4))
    child = rotated_elsewhere(make, "moving")
    registry.session(child)  # this registry serves the child already: a hand-over is coming

    async def scenario() -> None:
        async with owner.turn():
            await owner.append_async("user", "ask")  # meets the parent ended: hands over
            interloper = asyncio.ensure_future(bystander.append_async("assistant", "interloper"))
            await asyncio.sleep(0)  # its request is sent: it must wait for the turn
            await owner.append_async("assistant", "answer")
            assert not interloper.done()
        await asyncio.wait_for(interloper, 10)

    asyncio.run(scenario())
    assert contents(store, child)[-3:] == ["ask", "answer", "interloper"]


def test_calls_held_behind_a_turn_wait_for_it_on_the_actor_handed_to(make):
    """Calls already held behind the turn when the hand-over happens are moved to
    the child's actor still held, in their order, behind the same turn."""
    registry, store = make()
    owner, first, second = (registry.session("holding") for _ in range(3))
    owner.append(conversation(4))
    child = rotated_elsewhere(make, "holding")
    registry.session(child)

    async def scenario() -> None:
        async with owner.turn():
            held = [
                asyncio.ensure_future(first.append_async("user", "held one")),
                asyncio.ensure_future(second.append_async("user", "held two")),
            ]
            await asyncio.sleep(0)
            await owner.append_async("user", "ask")  # hands over with two calls held
            await owner.append_async("assistant", "answer")
            assert not any(task.done() for task in held)
        await asyncio.wait_for(asyncio.gather(*held), 10)

    asyncio.run(scenario())
    assert contents(store, child)[-4:] == ["ask", "answer", "held one", "held two"]


def test_a_moved_turn_waits_for_the_turn_open_on_the_actor_handed_to(make):
    """The child's actor has a turn of its own open when the parent's turn arrives:
    the moved turn reopens once that one closes, and holds the calls sent after the
    hand-over until it closes in turn."""
    registry, store = make()
    owner, bystander, child_handle = parent_handles_and_child(make, registry, "queued")
    child = child_handle.session_id

    async def owner_turn() -> None:
        async with owner.turn():
            await owner.append_async("user", "ask")  # hands over, then waits for the child's turn
            await owner.append_async("assistant", "answer")

    async def scenario() -> None:
        async with handed_over_inside(child_handle, registry, owner_turn) as moving:
            late = asyncio.ensure_future(bystander.append_async("user", "late"))
            await asyncio.sleep(0)  # sent: held behind the child's turn, after the moved one
            await child_handle.append_async("assistant", "child answer")
            assert not moving.done() and not late.done()
        await asyncio.wait_for(moving, 10)
        await asyncio.wait_for(late, 10)

    asyncio.run(scenario())
    assert contents(store, child)[-5:] == ["child ask", "child answer", "ask", "answer", "late"]


def test_an_owner_leaving_its_moved_turn_while_it_waits_closes_it(make):
    """The owner gives up while its moved turn waits behind the child's turn (its
    held append withdrawn, its turn exited): the turn must not reopen later with
    nobody in it, holding everyone else for ``max_turn_s``."""
    registry, store = make(max_turn_s=300)
    owner, bystander, child_handle = parent_handles_and_child(make, registry, "leaving")
    child = child_handle.session_id

    async def owner_turn() -> None:
        async with owner.turn():
            await owner.append_async("user", "never applied")  # held: cancelled below

    async def scenario() -> None:
        async with handed_over_inside(child_handle, registry, owner_turn) as moving:
            moving.cancel()  # the held append is withdrawn, the turn's exit is sent
            with pytest.raises(asyncio.CancelledError):
                await moving
            late = asyncio.ensure_future(bystander.append_async("user", "late"))
            await asyncio.sleep(0)
        await asyncio.wait_for(late, 10)  # not held by a turn nobody is in

    asyncio.run(scenario())
    assert contents(store, child)[-2:] == ["child ask", "late"]

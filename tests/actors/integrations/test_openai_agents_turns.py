"""`AgentsSession.turn()`: a run's writes are one turn, whatever else appends to the
session meanwhile (concurrent runs of one session object, a background review)."""

from __future__ import annotations

import asyncio

import pytest

from protocol import InvalidArgumentError, SessionBusyError

agents = pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from actors.integrations.openai_agents import AgentsSession  # noqa: E402


@pytest.fixture
def registry(make_registry):
    return make_registry()


def _items(tag: str, n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"{tag}{i}"}] for i in range(n)]


def test_concurrent_runs_of_one_session_object_are_not_interleaved(registry):
    session = AgentsSession(registry, "g")

    async def run(tag: str) -> None:
        async with session.turn():
            for batch in _items(tag, 5):
                await session.add_items(batch)
                await asyncio.sleep(0)  # let the other run's task go on

    async def both() -> list[str]:
        await asyncio.gather(run("a"), run("b"), run("c"))
        return [item["content"] for item in await session.get_items()]

    contents = asyncio.run(both())
    runs = [contents[i : i + 5] for i in range(0, 15, 5)]
    assert sorted(r[0][0] for r in runs) == ["a", "b", "c"]
    assert all(len({c[0] for c in r}) == 1 for r in runs), contents  # each run whole


def test_a_review_appending_during_a_run_lands_after_it(registry):
    session = AgentsSession(registry, "g")
    review = registry.review("g")

    async def scenario() -> list[str]:
        async with session.turn():
            await session.add_items([{"role": "user", "content": "ask"}])
            note = asyncio.create_task(review.append_async("assistant", "review note"))
            await asyncio.sleep(0)
            assert not note.done()  # held: the run's turn is open
            await session.add_items([{"role": "assistant", "content": "answer"}])
        await note
        return [item["content"] for item in await session.get_items()]

    assert asyncio.run(scenario()) == ["ask", "answer", "review note"]


def test_on_busy_reject_refuses_a_second_run_while_one_is_open(registry):
    session = AgentsSession(registry, "g", on_busy="reject")

    async def scenario() -> None:
        async with session.turn():
            with pytest.raises(SessionBusyError):
                async with session.turn():
                    pass

    asyncio.run(scenario())


def test_a_bad_on_busy_is_typed(registry):
    with pytest.raises(InvalidArgumentError):
        AgentsSession(registry, "g", on_busy="sometimes")
    with pytest.raises(InvalidArgumentError):
        AgentsSession(registry, "g").turn(on_busy="never")

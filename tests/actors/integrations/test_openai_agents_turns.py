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


def _run_with_a_tool_and_a_review(registry, *, run_turns: bool) -> list[str]:
    """One Runner run whose tool fires off a review note (not awaited: it lands when
    the session lets it); the live items' text, in order."""
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    session = AgentsSession(registry, "run", run_turns=run_turns)
    review = registry.review("run")
    notes: list[asyncio.Task] = []

    @function_tool
    async def lookup(n: int) -> str:
        """Look something up."""
        notes.append(asyncio.create_task(review.append_async("assistant", "review note")))
        await asyncio.sleep(0)  # the note's task runs now: held, or written at once
        return f"result {n}"

    model = ScriptedModel()
    model.extend([[function_call("lookup", {"n": 1}, call_id="call_1")], [assistant_message("answer", item_id="m1")]])
    agent = Agent(name="assistant", model=model, tools=[lookup])

    async def scenario() -> list[str]:
        result = await Runner.run(agent, "question", session=session, run_config=RunConfig(tracing_disabled=True))
        assert result.final_output == "answer"
        await asyncio.gather(*notes)
        return [
            m.text or (m.tool_calls[0]["function"]["name"] if m.tool_calls else "")
            for m in await registry.session("run").transcript_async()
        ]

    return asyncio.run(scenario())


def test_run_turns_keep_a_run_whole_without_an_explicit_turn(registry):
    texts = _run_with_a_tool_and_a_review(registry, run_turns=True)
    assert texts == ["question", "lookup", "result 1", "answer", "review note"]


def test_without_run_turns_the_same_note_lands_inside_the_run(make_registry):
    texts = _run_with_a_tool_and_a_review(make_registry(), run_turns=False)
    assert texts.index("review note") < texts.index("answer")  # what run_turns prevents


def test_run_turns_close_after_each_run_so_others_go_on(registry):
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message

    session = AgentsSession(registry, "runs", run_turns=True)
    model = ScriptedModel()
    agent = Agent(name="assistant", model=model)

    async def scenario() -> None:
        for n in range(3):
            model.enqueue([assistant_message(f"reply {n}", item_id=f"m{n}")])
            await Runner.run(agent, f"message {n}", session=session, run_config=RunConfig(tracing_disabled=True))
            # the run's turn closed with its final output: another path appends at once
            await asyncio.wait_for(registry.review("runs").append_async("assistant", f"note {n}"), 5)

    asyncio.run(scenario())
    texts = [m.text for m in registry.session("runs").transcript()]
    assert texts == [t for n in range(3) for t in (f"message {n}", f"reply {n}", f"note {n}")]


def test_each_run_records_its_usage_once_on_an_assistant_message(registry):
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
    from agents.usage import Usage as SdkUsage

    from protocol import Usage

    @function_tool
    async def lookup(n: int) -> str:
        """Look something up."""
        return f"result {n}"

    session = AgentsSession(registry, "usage", model="scripted-1")
    model = ScriptedModel()
    model.extend(
        [
            ModelStep(
                output=[function_call("lookup", {"n": 1}, call_id="c1")], usage=SdkUsage(1, 100, output_tokens=7)
            ),
            ModelStep(output=[assistant_message("answer", item_id="m1")], usage=SdkUsage(1, 130, output_tokens=12)),
            ModelStep(output=[assistant_message("again", item_id="m2")], usage=SdkUsage(1, 150, output_tokens=3)),
        ]
    )
    agent = Agent(name="assistant", model=model, tools=[lookup])

    async def scenario() -> None:
        for text in ("question", "follow-up"):
            await Runner.run(agent, text, session=session, run_config=RunConfig(tracing_disabled=True))

    asyncio.run(scenario())
    live = registry.session("usage").transcript()
    recorded = [m.usage for m in live if m.usage is not None]
    assert all(m.role == "assistant" for m in live if m.usage is not None)
    assert {u.model for u in recorded} == {"scripted-1"} and recorded[-1] == Usage(150, 3, "scripted-1")
    total = registry.store.usage("usage")
    assert (total.input_tokens, total.output_tokens) == (380, 22)  # every model call once
    with pytest.raises(InvalidArgumentError):
        AgentsSession(registry, "x", model="bad\nmodel")

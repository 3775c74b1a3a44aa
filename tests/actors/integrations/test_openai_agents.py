"""`AgentsSession` against the SDK's own `SQLiteSession`, operation by operation, on
both backends; real registries, real stores, real event loops."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from actors import HeadTailCompressor
from actors.testing import GatedCompressor, ScriptedCompressor
from protocol import (
    SUMMARY_PREFIX,
    CompressionStatus,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
)

from ..helpers import result_of, run_in_thread, wait_until
from .items_catalog import ITEMS, orphan_outputs, tool_run_items

agents = pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from agents import SQLiteSession  # noqa: E402
from agents.memory import Session, SessionSettings  # noqa: E402

from actors.integrations.openai_agents import AgentsSession  # noqa: E402


def run(coro: Any) -> Any:
    """Each call is a fresh event loop, as separate SDK runs may be."""
    return asyncio.run(coro)


@pytest.fixture
def registry(make_registry):
    return make_registry()


@pytest.fixture
def sqlite_session(tmp_path):
    """The SDK's reference implementation, on a real file."""
    made = []

    def make(session_id: str = "ref", **kwargs: Any) -> SQLiteSession:
        made.append(SQLiteSession(session_id, tmp_path / "sdk.db", **kwargs))
        return made[-1]

    yield make
    for session in made:
        session.close()


def messages(n: int, *, start: int = 0) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i}"} for i in range(start, start + n)]


# -- the protocol and exact round-trips --------------------------------------------------------


def test_is_a_session_of_the_sdk(registry):
    session = AgentsSession(registry, "discord:1")
    assert isinstance(session, Session)
    assert session.session_id == "discord:1"
    assert session.session_settings == SessionSettings()


def test_every_item_type_round_trips_exactly(make_registry, registry, sqlite_session):
    ours, reference = AgentsSession(registry, "all-types"), sqlite_session()

    async def scenario(session):
        await session.add_items(ITEMS[:5])
        await session.add_items(ITEMS[5:])
        return await session.get_items()

    assert run(scenario(ours)) == run(scenario(reference)) == ITEMS
    # durable: a second registry on the database (another process) reads the same items
    assert run(AgentsSession(make_registry(), "all-types").get_items()) == ITEMS


def test_a_bad_item_writes_nothing(registry):
    session = AgentsSession(registry, "bad")
    run(session.add_items(messages(2)))
    with pytest.raises(InvalidMessageError):
        run(session.add_items([{"role": "user", "content": "fine"}, {"role": "user", "content": object()}]))
    assert run(session.get_items()) == messages(2)


# -- limits and ordering, as SQLiteSession does them -------------------------------------------


@pytest.mark.parametrize("limit", [None, 1, 2, 4, 6, 10, 0])
def test_get_items_returns_the_latest_limit_in_order(registry, sqlite_session, limit):
    ours, reference = AgentsSession(registry, "limits"), sqlite_session()
    for session in (ours, reference):
        run(session.add_items(messages(3)))
        run(session.add_items(messages(3, start=3)))
    expected = run(reference.get_items(limit))
    assert run(ours.get_items(limit)) == expected
    assert len(expected) == (6 if limit is None else min(limit, 6))


def test_a_limit_counts_items_when_a_message_holds_several(registry):
    """A message a gateway appended with tool calls is several items: the latest
    ``limit`` items are still exactly the tail of the whole list."""
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in range(3)]
    handle = registry.session("multi")
    handle.append(Message("user", "q"))
    handle.append(Message("assistant", "let me look", tool_calls=calls))
    handle.append([Message("tool", f"r{i}", tool_call_id=f"c{i}") for i in range(3)])
    handle.append(Message("assistant", "done"))
    session = AgentsSession(registry, "multi")
    everything = run(session.get_items())
    assert len(everything) == 9  # q, the text, 3 calls, 3 outputs, done
    for limit in range(1, 11):
        assert run(session.get_items(limit)) == everything[-limit:]


def test_a_negative_limit_returns_nothing(registry):
    session = AgentsSession(registry, "negative")
    run(session.add_items(messages(2)))
    assert run(session.get_items(-1)) == []


def test_session_settings_limit_applies_when_limit_is_none(registry, sqlite_session):
    ours = AgentsSession(registry, "settings", session_settings=SessionSettings(limit=3))
    reference = sqlite_session(session_settings=SessionSettings(limit=3))
    for session in (ours, reference):
        run(session.add_items(messages(5)))
        assert [i["content"] for i in run(session.get_items())] == ["Message 2", "Message 3", "Message 4"]
        assert [i["content"] for i in run(session.get_items(2))] == ["Message 3", "Message 4"]


def test_session_settings_dict_is_coerced_and_checked_as_the_sdk_does(registry, sqlite_session):
    session = AgentsSession(registry, "coerced", session_settings={"limit": 2})
    assert session.session_settings == SessionSettings(limit=2)
    run(session.add_items(messages(4)))
    assert len(run(session.get_items())) == 2
    for bad, error in (({"limitt": 3}, TypeError), (5, TypeError), ({"limit": "many"}, ValueError)):
        with pytest.raises(error):
            sqlite_session(session_settings=bad)
        with pytest.raises(error) as raised:
            AgentsSession(registry, "coerced", session_settings=bad)
        assert isinstance(raised.value, InvalidArgumentError)
    with pytest.raises(InvalidArgumentError):
        run(session.get_items(limit="2"))


# -- writers: tasks, threads, sessions, databases -----------------------------------------------


def test_concurrent_adds_from_several_tasks_keep_every_batch_whole(registry):
    sessions = [AgentsSession(registry, "busy") for _ in range(2)]
    batches = [[{"role": "user", "content": f"task {t} item {i}"} for i in range(5)] for t in range(8)]

    async def scenario():
        await asyncio.gather(*(sessions[t % 2].add_items(batch) for t, batch in enumerate(batches)))
        return await sessions[0].get_items()

    items = run(scenario())
    assert sorted(i["content"] for i in items) == sorted(i["content"] for b in batches for i in b)
    for batch in batches:  # each add_items is one contiguous append, in order
        start = items.index(batch[0])
        assert items[start : start + len(batch)] == batch


def test_concurrent_adds_from_threads_with_their_own_loops(registry):
    session = AgentsSession(registry, "threads")
    barrier = threading.Barrier(5)

    def writer(n: int) -> None:
        barrier.wait(10)
        for i in range(4):
            run(session.add_items([{"role": "user", "content": f"thread {n} item {i}"}]))

    for thread, box in [run_in_thread(lambda n=n: writer(n)) for n in range(5)]:
        result_of(thread, box, timeout=30)
    contents = [i["content"] for i in run(session.get_items())]
    assert sorted(contents) == sorted(f"thread {n} item {i}" for n in range(5) for i in range(4))
    for n in range(5):  # each thread's items in its own order
        mine = [c for c in contents if c.startswith(f"thread {n} ")]
        assert mine == [f"thread {n} item {i}" for i in range(4)]


def test_two_sessions_on_one_database_stay_apart(make_registry, registry):
    first, second = AgentsSession(registry, "session_1"), AgentsSession(registry, "session_2")
    run(first.add_items([{"role": "user", "content": "I like cats"}]))
    run(second.add_items([{"role": "user", "content": "I like dogs"}, {"role": "user", "content": "and birds"}]))
    assert [i["content"] for i in run(first.get_items())] == ["I like cats"]
    assert [i["content"] for i in run(second.get_items())] == ["I like dogs", "and birds"]
    # a second registry on the same database (another process) shares each session
    elsewhere = AgentsSession(make_registry(), "session_1")
    run(elsewhere.add_items([{"role": "assistant", "content": "noted"}]))
    assert [i["content"] for i in run(first.get_items())] == ["I like cats", "noted"]
    assert len(run(second.get_items())) == 2


# -- close -------------------------------------------------------------------------------------


def test_every_call_after_close_raises_runtime_error(registry):
    session = AgentsSession(registry, "closing")
    run(session.add_items(messages(2)))
    session.close()
    session.close()  # idempotent
    for call in (
        session.get_items(),
        session.get_items(1),
        session.add_items(messages(1)),
        session.add_items([]),
        session.pop_item(),
        session.clear_session(),
    ):
        with pytest.raises(RuntimeError, match="closed"):
            run(call)
    # the data and the registry stay
    assert run(AgentsSession(registry, "closing").get_items()) == messages(2)


# -- compaction is the registry's ----------------------------------------------------------------


def test_after_compaction_get_items_returns_the_compacted_transcript(make_registry):
    registry = make_registry(HeadTailCompressor(keep_last=4))
    session = AgentsSession(registry, "compacted")
    for turn in range(4):
        run(session.add_items(tool_run_items(turn)))
    outcome = registry.session("compacted").compress()
    assert outcome.status is CompressionStatus.COMPACTED
    items = run(session.get_items())
    assert len(items) < 20
    assert items[0] == {"role": "user", "content": "question 0"}  # the first ask is kept
    assert any(str(i.get("content", "")).startswith("[CONTEXT COMPACTION]") for i in items)
    assert {"role": "assistant", "content": "answer 3"} in items
    assert orphan_outputs(items) == []
    # every kept call has its output right with it
    kept_calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    kept_outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert kept_calls == kept_outputs


def test_an_ask_merged_by_compaction_is_rendered_from_the_merged_message(make_registry):
    summary = Message("user", f"{SUMMARY_PREFIX} the user asked twice", meta={"synthetic": True})
    registry = make_registry(ScriptedCompressor([summary]))  # drops the latest ask
    session = AgentsSession(registry, "merged")
    run(
        session.add_items(
            [
                {"role": "user", "content": "first ask"},
                {"role": "assistant", "content": "first answer"},
                {"type": "message", "role": "user", "content": "latest ask"},
            ]
        )
    )
    outcome = registry.session("merged").compress()
    assert outcome.status is CompressionStatus.COMPACTED
    (live,) = registry.session("merged").transcript()
    assert "merged_from" in live.meta  # rule 9 put the ask back by merging it
    items = run(session.get_items())
    assert items == [{"role": "user", "content": live.content}]
    assert "latest ask" in live.content and SUMMARY_PREFIX in live.content


def test_responses_compact_items_round_trip_through_get_items_and_the_next_compaction(make_registry, store, llm_server):
    import openai

    from actors.compressors import ResponsesCompactCompressor

    client = openai.AsyncOpenAI(base_url=llm_server.base_url, api_key="sk-test", max_retries=0)
    registry = make_registry(ResponsesCompactCompressor(client, "gpt-test", keep_last=2), merge_user_messages=False)
    session = AgentsSession(registry, "native")
    run(session.add_items(messages(8)))
    assert registry.session("native").compress().status is CompressionStatus.COMPACTED
    items = run(session.get_items())
    first = {"id": "cmp_1", "type": "compaction", "encrypted_content": "enc-1"}
    assert first in items  # exactly the item the API returned
    assert items[0] == {"role": "user", "content": "Message 0"}
    assert items[-2:] == messages(2, start=6)

    run(session.add_items(messages(4, start=8)))
    assert registry.session("native").compress().status is CompressionStatus.COMPACTED
    assert first in llm_server.requests[-1]["input"]  # the next compaction sends it back
    items = run(session.get_items())
    assert first not in items
    assert {"id": "cmp_2", "type": "compaction", "encrypted_content": "enc-2"} in items
    assert items[-2:] == messages(2, start=10)
    compressors = store.usage("native").compactions
    assert compressors is not None and compressors.total_tokens > 0


# -- pop_item and clear_session ----------------------------------------------------------------


def test_pop_item_behaves_like_sqlite_session(registry, sqlite_session):
    items = ITEMS[5:11]  # a reasoning item, two calls, their outputs, an answer

    async def scenario(session):
        popped = [await session.pop_item()]  # empty: None
        await session.add_items(items)
        popped.append(await session.pop_item())
        left = await session.get_items()
        while (item := await session.pop_item()) is not None:
            popped.append(item)
        popped.append(await session.pop_item())
        return popped, left, await session.get_items()

    ours = run(scenario(AgentsSession(registry, "pop")))
    assert ours == run(scenario(sqlite_session()))
    popped, left, after = ours
    assert popped == [None, *reversed(items), None]
    assert left == items[:-1]
    assert after == []


def test_pop_item_retracts_into_the_archive_and_only_from_its_session(registry, store):
    session, other = AgentsSession(registry, "retracting"), AgentsSession(registry, "untouched")
    run(session.add_items(messages(2)))
    run(other.add_items(messages(2)))
    assert run(session.pop_item()) == messages(2)[1]
    (archived,) = store.archive("retracting")
    assert (archived.state, archived.content) == ("retracted", "Message 1")
    run(session.add_items(messages(1, start=7)))
    assert [m.seq for m in store.transcript("retracting")] == [1, 3]  # seqs never reused
    assert run(session.get_items()) == [messages(2)[0], *messages(1, start=7)]
    assert run(other.get_items()) == messages(2)


def test_clear_session_behaves_like_sqlite_session(registry, sqlite_session):
    async def scenario(session):
        await session.clear_session()  # nothing stored yet: a no-op
        await session.add_items(messages(3))
        await session.clear_session()
        cleared = await session.get_items()
        await session.add_items(messages(2, start=5))  # clear then add
        return cleared, await session.get_items()

    ours = run(scenario(AgentsSession(registry, "clear")))
    assert ours == run(scenario(sqlite_session())) == ([], messages(2, start=5))


def test_clear_session_erases_the_whole_lineage(make_registry, store):
    registry = make_registry(HeadTailCompressor(keep_last=2), mode="rotate")
    session = AgentsSession(registry, "erase")
    run(session.add_items(messages(8)))
    outcome = registry.session("erase").compress()
    assert outcome.status is CompressionStatus.ROTATED
    run(session.clear_session())
    assert store.get_session("erase") is None
    assert store.get_session(outcome.session_id) is None
    assert run(session.get_items()) == []
    run(session.add_items(messages(1, start=9)))  # a fresh conversation under the same id
    assert [m.content for m in store.transcript("erase")] == ["Message 9"]


def test_clear_session_during_a_compaction_leaves_nothing_behind(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated)
    session = AgentsSession(registry, "racing")
    run(session.add_items(messages(6)))
    thread, box = run_in_thread(registry.session("racing").compress)
    assert gated.wait_started(10)
    run(session.clear_session())  # interrupts the attempt, then erases
    assert result_of(thread, box).status is CompressionStatus.CANCELLED
    gated.release()
    assert store.get_session("racing") is None  # nothing resurrected by the attempt's cleanup
    assert run(session.get_items()) == []
    assert store.compactions("racing") == []


def test_a_lineage_erased_by_another_process_starts_afresh(make_registry):
    first = AgentsSession(make_registry(), "elsewhere")
    run(first.add_items(messages(2)))
    run(AgentsSession(make_registry(), "elsewhere").clear_session())  # another process
    run(first.add_items(messages(1, start=7)))
    assert run(first.get_items()) == messages(1, start=7)


# -- Runner.run end to end --------------------------------------------------------------------


@pytest.mark.parametrize("keep_last", [2, 3])
def test_runner_run_with_tools_a_review_path_and_auto_compaction(make_registry, store, keep_last):
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call
    from openai.types.responses import ResponseReasoningItem

    # a kept tail of 2 or 3 messages would start at a function output or right after a
    # reasoning item if the compressors did not see the SDK's calls as a tool run
    head_tail = HeadTailCompressor(keep_last=keep_last)
    gated = GatedCompressor(lambda messages: head_tail.compress(messages, target_tokens=100, cancel=threading.Event()))
    registry = make_registry(gated, max_tokens=300, target_tokens=100, keep_last=keep_last)
    session = AgentsSession(registry, "discord:42")
    review = registry.review("discord:42")
    release_in_turn: list[int] = []

    @function_tool
    def lookup(n: int) -> str:
        """Look something up."""
        # a background review writes while the run waits for its tool
        review.append("assistant", f"review note {n}")
        if release_in_turn and release_in_turn[0] == n:
            gated.release()  # the commit races this run's save of the call and its output
        return f"result {n} " * 10

    model = ScriptedModel()
    agent = Agent(name="assistant", model=model, tools=[lookup])

    async def turn(n: int) -> None:
        model.extend(
            [
                [
                    ResponseReasoningItem(id=f"rs_{n}", type="reasoning", summary=[]),
                    function_call("lookup", {"n": n}, call_id=f"call_{n}"),
                ],
                [assistant_message(f"answer {n}", item_id=f"msg_{n}")],
            ]
        )
        result = await Runner.run(agent, f"question {n}", session=session, run_config=RunConfig(tracing_disabled=True))
        assert result.final_output == f"answer {n}"

    async def scenario() -> None:
        n = 0
        while not gated.started.is_set():  # auto-compaction starts past max_tokens
            assert n < 10, "no automatic compaction"
            await turn(n)
            n += 1
        release_in_turn.append(n + 1)
        for _ in range(4):  # two turns while the summary runs, two after its commit
            await turn(n)
            n += 1

    run(scenario())
    live_id = registry.session("discord:42").session_id
    wait_until(lambda: len(store.compactions(live_id)) >= 1, what="the automatic commit")
    model.assert_complete()

    inputs = [call.input for call in model.calls]
    for model_input in inputs:
        assert orphan_outputs(model_input) == [], "a model call got a function output without its call"
        for i, item in enumerate(model_input):  # reasoning and its call travel together
            if item.get("type") == "reasoning":
                assert model_input[i + 1].get("call_id") == item["id"].replace("rs_", "call_")
            if item.get("type") == "function_call":
                assert model_input[i - 1].get("id") == item["call_id"].replace("call_", "rs_")
    assert any(str(item.get("content", "")).startswith("[CONTEXT COMPACTION]") for item in inputs[-1]), (
        "the last run did not see the compacted transcript"
    )

    items = run(session.get_items())
    assert orphan_outputs(items) == []
    # nothing acknowledged was lost: every item written is live or archived
    kept = store.transcript(live_id) + store.archive(live_id)
    texts = {m.content for m in kept if isinstance(m.content, str)}
    answered = {m.tool_call_id for m in kept if m.role == "tool"}
    for n in range(len(inputs) // 2):
        assert {f"question {n}", f"review note {n}"} <= texts
        assert f"call_{n}" in answered


def test_runner_remembers_across_runs_streamed_too_and_honours_run_config_limits(registry):
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message

    model = ScriptedModel()
    agent = Agent(name="assistant", model=model)
    session = AgentsSession(registry, "history")

    async def scenario() -> None:
        for n in range(3):
            model.enqueue([assistant_message(f"Reply {n}", item_id=f"msg_{n}")])
            await Runner.run(agent, f"Message {n}", session=session, run_config=RunConfig(tracing_disabled=True))
        model.enqueue([assistant_message("Reply 3", item_id="msg_3")])
        streamed = Runner.run_streamed(
            agent,
            "Message 3",
            session=session,
            run_config=RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=2)),
        )
        async for _event in streamed.stream_events():
            pass

    run(scenario())
    inputs = [call.input for call in model.calls]
    assert [item.get("content") for item in inputs[2][::2]] == ["Message 0", "Message 1", "Message 2"]
    assert len(inputs[2]) == 5  # four items of history and the new message
    assert inputs[3][0] == {"role": "user", "content": "Message 2"}  # the last two, then the new one
    assert inputs[3][1]["content"][0]["text"] == "Reply 2"
    assert inputs[3][2] == {"role": "user", "content": "Message 3"}
    assert len(run(session.get_items())) == 8


def test_the_readme_example_runs(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    from agents import set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.index("## Use with the OpenAI Agents SDK")
    example = re.compile(r"```python\n(.*?)```", re.S).search(readme, section).group(1)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    model = ScriptedModel(
        [[assistant_message("hi there", item_id="m1")], [assistant_message("you said hello", item_id="m2")]]
    )
    # the example's agent would call OpenAI: the same agent on a scripted model
    namespace["agent"] = namespace["agent"].clone(model=model)
    set_tracing_disabled(True)  # no trace export thread (the example runs without RunConfig)
    try:
        assert run(namespace["on_message"]("123", "m-1", "hello")) == "hi there"
        assert run(namespace["on_message"]("123", "m-2", "what did I say?")) == "you said hello"
        assert [item.get("content") for item in model.last_call.input[::2]] == ["hello", "what did I say?"]
        # the platform redelivers m-1: its stored answer, the agent does not run again (the
        # scripted model has no third reply to give)
        assert run(namespace["on_message"]("123", "m-1", "hello")) == "hi there"
        assert [m.role for m in namespace["store"].transcript("discord:123")] == ["user", "assistant"] * 2
    finally:
        set_tracing_disabled(False)
        namespace["registry"].close()
        namespace["store"].close()

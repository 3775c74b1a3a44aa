"""`PydanticAISession`: Pydantic AI runs (TestModel, FunctionModel: no network) keep their
history in a registry, across runs, workers and compactions, exactly and exactly once."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from actors import HeadTailCompressor, SessionRegistry
from persistence import open_store
from protocol import SUMMARY_PREFIX, CompressionStatus, ConfigurationError, InvalidArgumentError, TurnReplayedError

ROOT = Path(__file__).resolve().parents[3]
HAVE_PYDANTIC_AI = importlib.util.find_spec("pydantic_ai") is not None
needs_pydantic_ai = pytest.mark.skipif(
    not HAVE_PYDANTIC_AI, reason="the pydantic-ai extra is not installed (pip install 'session-actors[pydantic-ai]')"
)

if HAVE_PYDANTIC_AI:
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import (
        BinaryContent,
        ImageUrl,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RequestUsage

from actors.integrations.pydantic_ai import SOURCE, PydanticAISession  # noqa: E402


def _json(messages) -> bytes:
    """What Pydantic AI writes for ``messages``: every field, timestamps and usage included
    (``==`` on messages leaves some out)."""
    return ModelMessagesTypeAdapter.dump_json(list(messages))


class Recorder:
    """A FunctionModel that answers ``reply(n)`` and records what each call was sent."""

    def __init__(self, reply=None) -> None:
        self.seen: list[list] = []
        self._reply = reply or (lambda n, messages: ModelResponse(parts=[TextPart(f"answer {n}")]))

    def __call__(self, messages, info: AgentInfo):
        self.seen.append(list(messages))
        return self._reply(len(self.seen), messages)

    def texts(self, call: int) -> list[str]:
        """The user prompts and answers the model was sent in call ``call`` (0-based)."""
        out = []
        for message in self.seen[call]:
            for part in message.parts:
                if isinstance(part, UserPromptPart | TextPart) and isinstance(part.content, str):
                    out.append(part.content)
        return out


# -- without the extra -------------------------------------------------------------------


def test_importing_the_adapter_does_not_import_pydantic_ai():
    code = (
        "import sys, actors.integrations.pydantic_ai; "
        "assert 'pydantic_ai' not in sys.modules, 'pydantic_ai was imported eagerly'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_constructing_without_pydantic_ai_raises_configuration_error_naming_the_extra(sqlite_path, monkeypatch):
    for name in [m for m in sys.modules if m == "pydantic_ai" or m.startswith("pydantic_ai.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)  # the fault: "not installed"
    store = open_store(sqlite_path)
    with SessionRegistry(store) as registry:
        with pytest.raises(ConfigurationError, match=r"session-actors\[pydantic-ai\]"):
            PydanticAISession(registry, "no-extra")
    store.close()


# -- with it -----------------------------------------------------------------------------


@pytest.fixture
def registry(make_registry):
    return make_registry()


@needs_pydantic_ai
def test_the_model_sees_the_previous_runs(registry):
    model = Recorder()
    agent = Agent(FunctionModel(model), system_prompt="Be brief.")

    async def scenario():
        session = PydanticAISession(registry, "chat:1")
        first = await agent.run("my name is Ada", message_history=await session.messages())
        await session.add(first.new_messages())
        second = await agent.run("what is my name?", message_history=await session.messages())
        await session.add(second.new_messages())
        return first, second, await session.messages()

    first, second, history = asyncio.run(scenario())
    assert model.texts(1) == ["my name is Ada", "answer 1", "what is my name?"]
    assert _json(model.seen[1][:2]) == _json(first.all_messages())  # sent exactly as the run made them
    assert _json(history) == _json(second.all_messages())
    assert registry.store.get_session("chat:1").source == SOURCE == "pydantic-ai"


@needs_pydantic_ai
def test_a_second_worker_on_the_database_continues_the_conversation(registry, make_registry):
    model = Recorder()
    agent = Agent(FunctionModel(model))

    async def on(worker: SessionRegistry, prompt: str):
        session = PydanticAISession(worker, "chat:2")
        result = await agent.run(prompt, message_history=await session.messages())
        await session.add(result.new_messages())
        return result

    first = asyncio.run(on(registry, "remember 42"))
    asyncio.run(on(make_registry(), "what number?"))  # another process, its own connection
    assert model.texts(1) == ["remember 42", "answer 1", "what number?"]
    assert _json(model.seen[1][:2]) == _json(first.all_messages())


@needs_pydantic_ai
def test_a_compaction_summary_reaches_the_model_as_a_user_prompt(make_registry):
    registry = make_registry(HeadTailCompressor(keep_last=2))
    model = Recorder()
    agent = Agent(FunctionModel(model), system_prompt="Be brief.")

    async def run(prompt: str):
        session = PydanticAISession(registry, "chat:3")
        result = await agent.run(prompt, message_history=await session.messages())
        await session.add(result.new_messages())

    for n in range(6):
        asyncio.run(run(f"question {n}"))
    outcome = registry.session("chat:3").compress(force=True)
    assert outcome.status is CompressionStatus.COMPACTED
    asyncio.run(run("and now?"))

    sent = model.seen[-1]
    summaries = [
        part
        for message in sent
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and str(part.content).startswith(SUMMARY_PREFIX)
    ]
    assert len(summaries) == 1, sent
    assert "question 2" in summaries[0].content  # the middle, condensed
    assert isinstance(sent[0].parts[0], SystemPromptPart) and sent[0].parts[0].content == "Be brief."
    assert model.texts(len(model.seen) - 1)[-3:] == ["question 5", "answer 6", "and now?"]  # the kept tail
    assert "question 3" not in model.texts(len(model.seen) - 1)  # summarized away


@needs_pydantic_ai
def test_tool_calls_retries_and_thinking_round_trip_and_reach_the_next_run(registry):
    def reply(n, messages):
        if n == 1:  # a tool call the tool answers with a retry
            return ModelResponse(
                parts=[ThinkingPart("look it up", signature="sig"), ToolCallPart("weather", {"city": "Paris"}, "c1")]
            )
        if n == 2:
            return ModelResponse(parts=[ToolCallPart("weather", '{"city": "Lisbon"}', "c2")])
        if n == 3:
            return ModelResponse(parts=[TextPart("bad")])  # the output validator asks again
        return ModelResponse(parts=[TextPart(f"answer {n}")])

    model = Recorder(reply)
    agent = Agent(FunctionModel(model), instructions="Use the tool.")

    @agent.tool_plain
    def weather(city: str) -> str:
        if city == "Paris":
            raise ModelRetry("no data for Paris")
        return f"sunny in {city}"

    @agent.output_validator
    def not_bad(output: str) -> str:
        if output == "bad":
            raise ModelRetry("say it well")
        return output

    async def scenario():
        session = PydanticAISession(registry, "chat:4")
        first = await agent.run("weather?", message_history=await session.messages())
        stored = await session.add(first.new_messages())
        history = await session.messages()
        await agent.run("thanks", message_history=history)
        return first, stored, history

    first, stored, history = asyncio.run(scenario())
    assert _json(history) == _json(first.all_messages())
    kinds = {part.part_kind for message in history for part in message.parts}
    assert {"user-prompt", "thinking", "tool-call", "tool-return", "retry-feedback", "text"} <= kinds
    # the chat shape: calls are assistant tool_calls, results tool messages answering them
    roles = [(m.role, m.tool_call_id, [c["id"] for c in m.tool_calls or ()]) for m in stored]
    assert roles[:5] == [
        ("user", None, []),
        ("assistant", None, ["c1"]),
        ("tool", "c1", []),
        ("assistant", None, ["c2"]),
        ("tool", "c2", []),
    ]
    assert stored[3].tool_calls[0]["function"] == {"name": "weather", "arguments": '{"city": "Lisbon"}'}
    assert stored[4].content == "sunny in Lisbon"
    last = first.all_messages()[-1]  # the usage of each model call is recorded once, on its answer
    assert (stored[-1].usage.output_tokens, stored[-1].usage.model) == (last.usage.output_tokens, last.model_name)
    calls = [p for m in model.seen[-1] for p in m.parts if isinstance(p, ToolCallPart)]
    returns = [p for m in model.seen[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(c.tool_name, c.tool_call_id) for c in calls] == [("weather", "c1"), ("weather", "c2")]
    assert [(r.content, r.tool_call_id) for r in returns] == [("no data for Paris", "c1"), ("sunny in Lisbon", "c2")]


@needs_pydantic_ai
def test_every_part_round_trips_exactly(registry):
    messages = [
        ModelRequest(
            parts=[
                SystemPromptPart("You are terse."),
                UserPromptPart(
                    [
                        "what is this?",
                        ImageUrl(url="https://example.com/cat.png"),
                        BinaryContent(b"\x89PNG", media_type="image/png"),
                    ]
                ),
            ],
            instructions="Answer in French.",
        ),
        ModelResponse(
            parts=[
                ThinkingPart("a cat, probably", signature="sig-1"),
                TextPart("Un chat."),
                ToolCallPart("lookup", {"q": "cat"}, tool_call_id="t1"),
                ToolCallPart("lookup", '{"q": "dog"}', tool_call_id="t2"),
            ],
            usage=RequestUsage(input_tokens=30, output_tokens=7),
            model_name="model-x",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("lookup", {"hits": [1, 2]}, tool_call_id="t1"),
                ToolReturnPart("lookup", "none", tool_call_id="t2"),
            ]
        ),
        ModelResponse(parts=[TextPart("Voilà.")]),
    ]

    async def scenario():
        session = PydanticAISession(registry, "chat:5")
        stored = await session.add(messages)
        return stored, await session.messages()

    stored, back = asyncio.run(scenario())
    assert _json(back) == _json(messages)
    assert [m.role for m in stored] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert [m.seq for m in stored] == list(range(stored[0].seq, stored[0].seq + 6))  # one contiguous append
    assert stored[1].content == [
        {"type": "text", "text": "what is this?"},
        {"type": "text", "text": "[image-url: https://example.com/cat.png]"},
        {"type": "text", "text": "[binary]"},
    ]
    assert (stored[2].content, stored[2].usage.input_tokens, stored[2].usage.model) == ("Un chat.", 30, "model-x")


@needs_pydantic_ai
def test_a_redelivered_message_runs_the_agent_once(registry, make_registry):
    model = Recorder()
    agent = Agent(FunctionModel(model))

    async def on_message(worker: SessionRegistry, message_id: str, text: str):
        session = PydanticAISession(worker, "chat:6")
        async with session.turn(key=message_id) as turn:
            if turn.replayed:
                with pytest.raises(TurnReplayedError):
                    await session.add([ModelRequest.user_text_prompt("twice")])
                return turn, None
            result = await agent.run(text, message_history=await session.messages())
            await session.add(result.new_messages())
        return turn, result

    first_turn, result = asyncio.run(on_message(registry, "msg-1", "hello"))
    again, none = asyncio.run(on_message(registry, "msg-1", "hello"))
    elsewhere, _ = asyncio.run(on_message(make_registry(), "msg-1", "hello"))  # another worker got it too
    assert not first_turn.replayed and again.replayed and elsewhere.replayed and none is None
    assert len(model.seen) == 1  # the agent ran once
    assert _json(again.model_messages) == _json(result.new_messages()) == _json(elsewhere.model_messages)
    assert again.messages[-1].text == "answer 1"  # what the gateway answers from
    assert [m.id for m in again.messages] == [m.id for m in elsewhere.messages]
    history = asyncio.run(PydanticAISession(registry, "chat:6").messages())
    assert _json(history) == _json(result.all_messages())  # nothing written twice


@needs_pydantic_ai
def test_writes_inside_a_turn_are_the_turns_and_other_paths_wait(registry):
    agent = Agent(TestModel(custom_output_text="done"))
    review = registry.review("chat:7")

    async def scenario():
        async with PydanticAISession(registry, "chat:7").turn():
            session = PydanticAISession(registry, "chat:7")  # another object: still the turn's handle
            result = await agent.run("go", message_history=await session.messages())
            note = asyncio.create_task(review.append_async("assistant", "review note"))
            await asyncio.sleep(0)
            assert not note.done()  # held: the turn is open
            await session.add(result.new_messages())
        await note
        return result, await PydanticAISession(registry, "chat:7").messages()

    result, history = asyncio.run(scenario())
    assert _json(history[:-1]) == _json(result.all_messages())
    assert history[-1].parts[0].content == "review note"  # another path's message, rendered


@needs_pydantic_ai
def test_bad_arguments_are_refused_before_anything_is_written(registry):
    session = PydanticAISession(registry, "chat:8")
    with pytest.raises(InvalidArgumentError):
        asyncio.run(session.add("hello"))
    with pytest.raises(InvalidArgumentError):
        asyncio.run(session.add([{"kind": "request"}]))
    with pytest.raises(InvalidArgumentError):
        PydanticAISession(registry, "chat:8", on_busy="sometimes")
    assert asyncio.run(session.messages()) == []


@needs_pydantic_ai
def test_an_erased_conversation_starts_afresh(registry):
    agent = Agent(TestModel(custom_output_text="hi"))
    session = PydanticAISession(registry, "chat:9")

    async def run(prompt: str):
        result = await agent.run(prompt, message_history=await session.messages())
        await session.add(result.new_messages())
        return result

    asyncio.run(run("first"))
    registry.delete("chat:9")  # another path erased the lineage meanwhile
    assert asyncio.run(session.messages()) == []
    second = asyncio.run(run("second"))
    assert _json(asyncio.run(session.messages())) == _json(second.all_messages())

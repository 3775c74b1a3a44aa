"""`recall_tool`: an agent searches its own lineage's history, archived parts included."""

from __future__ import annotations

import asyncio
import json

import pytest

from protocol import InvalidArgumentError, InvalidSessionIdError

agents = pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from actors.integrations.openai_agents import AgentsSession, recall_tool  # noqa: E402
from actors.testing import ScriptedCompressor, summary_only  # noqa: E402


@pytest.fixture
def registry(make_registry):
    return make_registry(ScriptedCompressor(*[summary_only] * 4))


def _archived_trip(registry) -> str:
    """A conversation whose hotel name was compacted away (rotated: a new session id)."""
    handle = registry.session("trip")
    handle.append("user", "Book me the Hotel Miradouro in Lisbon")
    handle.append("assistant", "Booked Hotel Miradouro for two nights")
    handle.append("user", "thanks")
    outcome = handle.compress(force=True, mode="rotate")
    assert outcome.status.value == "rotated", outcome
    return outcome.session_id


def test_an_agent_run_recalls_what_was_compacted_away(registry):
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    live_id = _archived_trip(registry)
    assert all("Miradouro" not in (m.text or "") for m in registry.session(live_id).transcript())
    model = ScriptedModel()
    model.extend(
        [
            [function_call("recall", {"query": "miradouro"}, call_id="call_1")],
            [assistant_message("You stayed at the Hotel Miradouro.", item_id="m1")],
        ]
    )
    agent = Agent(name="assistant", model=model, tools=[recall_tool(registry, live_id)])
    session = AgentsSession(registry, live_id)

    async def run():
        return await Runner.run(
            agent, "Which hotel was it?", session=session, run_config=RunConfig(tracing_disabled=True)
        )

    result = asyncio.run(run())
    assert result.final_output == "You stayed at the Hotel Miradouro."
    [output] = [i for i in asyncio.run(session.get_items()) if i.get("type") == "function_call_output"]
    text = output["output"]
    assert "2 message(s) matching 'miradouro'" in text
    assert "#1 user (archived, session trip)" in text and "[Miradouro]" in text
    assert "#2 assistant (archived, session trip)" in text
    # the model's second call saw the tool's answer
    seen = json.dumps(model.last_call.input, default=str)
    assert "Hotel [Miradouro]" in seen


def test_refusals_and_empty_history_are_sentences_for_the_model(registry):
    tool = recall_tool(registry, "nobody-yet", limit=3)
    assert tool.name == "recall" and tool.params_json_schema["required"] == ["query"]

    async def call(tool, arguments: str) -> str:
        return await tool.on_invoke_tool(None, arguments)

    assert asyncio.run(call(tool, '{"query": "anything"}')).startswith("Nothing found: this conversation has no")
    live_id = _archived_trip(registry)
    tool = recall_tool(registry, live_id, name="search_history", limit=1)
    assert tool.name == "search_history"
    assert asyncio.run(call(tool, '{"query": "!!!"}')).startswith("The search was refused: query must hold")
    assert asyncio.run(call(tool, "not json")).startswith("The search was refused")
    one = asyncio.run(call(tool, '{"query": "miradouro", "limit": 99}'))  # a bad limit: the default, 1
    assert one.startswith("1 message(s) matching") and one.count("\n- ") == 1
    assert "Nothing in this conversation's history matches 'zebra'" in asyncio.run(call(tool, '{"query": "zebra"}'))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"limit": 0}, InvalidArgumentError), ({"limit": 21}, InvalidArgumentError), ({"name": ""}, InvalidArgumentError)],
)
def test_bad_tool_settings_are_typed(registry, kwargs, error):
    with pytest.raises(error):
        recall_tool(registry, "s", **kwargs)
    with pytest.raises(InvalidSessionIdError):
        recall_tool(registry, " bad ")

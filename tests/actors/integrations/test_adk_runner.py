"""A real ADK `Runner` over `SessionService`: concurrent ``run_async`` on one session never
interleave (threads of one loop, and two worker processes), a replayed invocation runs once,
and a compaction's summary reaches the model (a model of our own: no network)."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from actors import HeadTailCompressor, SessionRegistry
from persistence import open_store
from protocol import SUMMARY_PREFIX, TurnReplayedError

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(importlib.util.find_spec("google.adk") is None, reason="the adk extra is not installed")

if importlib.util.find_spec("google.adk") is not None:
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.genai import types

    from actors.integrations.adk import SessionService

    class Recorder(BaseLlm):
        """Answers ``seen N`` (N: the contents it was sent) and records each request's texts.
        ``hold`` (an asyncio.Event) keeps the first call waiting until it is set."""

        model: str = "recorder"
        seen: list[list[str]] = []
        entered: Any = None
        hold: Any = None

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> AsyncGenerator[Any, None]:
            texts = [part.text for content in llm_request.contents for part in content.parts or [] if part.text]
            self.seen.append(texts)
            if self.entered is not None:
                self.entered.set()
            if self.hold is not None and len(self.seen) == 1:
                await asyncio.wait_for(self.hold.wait(), 30)
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"seen {len(texts)}")]))


def _ask(text: str) -> Any:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def _run(runner: Any, text: str, session_id: str = "s", **kwargs: Any) -> list[Any]:
    return [
        event async for event in runner.run_async(user_id="u", session_id=session_id, new_message=_ask(text), **kwargs)
    ]


def _interleavings(events: list[Any]) -> int:
    """How many times an invocation's events resume after another invocation's."""
    seen: set[str] = set()
    count, previous = 0, None
    for event in events:
        if event.invocation_id != previous:
            count += event.invocation_id in seen
            seen.add(event.invocation_id)
            previous = event.invocation_id
    return count


@pytest.fixture
def registry(make_registry) -> SessionRegistry:
    return make_registry()


def test_two_concurrent_runs_on_one_session_never_interleave(registry):
    model = Recorder(seen=[])

    class Observed(SessionService):
        async def get_session(self, **kwargs: Any) -> Any:
            session = await super().get_session(**kwargs)
            if model.entered is not None and model.entered.is_set():
                model.hold.set()  # the second run has its session: let the first answer
            return session

    async def scenario() -> Any:
        model.entered, model.hold = asyncio.Event(), asyncio.Event()
        service = Observed(registry)
        runner = Runner(app_name="app", agent=LlmAgent(name="a", model=model), session_service=service)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        first = asyncio.create_task(_run(runner, "one"))
        await asyncio.wait_for(model.entered.wait(), 30)  # the first run is in the model
        second = asyncio.create_task(_run(runner, "two"))
        await asyncio.wait_for(asyncio.gather(first, second), 60)
        return await service.get_session(app_name="app", user_id="u", session_id="s")

    session = asyncio.run(scenario())
    assert [e.content.parts[0].text for e in session.events] == ["one", "seen 1", "two", "seen 3"]
    assert _interleavings(session.events) == 0
    assert model.seen[1] == ["one", "seen 1", "two"]  # the second run read the first's answer


def test_many_concurrent_runs_stay_contiguous(registry):
    model = Recorder(seen=[])

    async def scenario() -> Any:
        service = SessionService(registry)
        runner = Runner(app_name="app", agent=LlmAgent(name="a", model=model), session_service=service)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        await asyncio.wait_for(asyncio.gather(*(_run(runner, f"ask {i}") for i in range(6))), 90)
        return await service.get_session(app_name="app", user_id="u", session_id="s")

    session = asyncio.run(scenario())
    assert len(session.events) == 12
    assert _interleavings(session.events) == 0
    # each answer counted everything before it: every run read the runs before it
    answers = [e.content.parts[0].text for e in session.events[1::2]]
    assert answers == [f"seen {2 * i + 1}" for i in range(6)]


def test_a_pipeline_run_stays_whole_with_the_plugin(registry):
    """A SequentialAgent answers finally once per agent: the plugin keeps the run's turn
    open until the run ends, so four concurrent runs do not interleave."""
    from google.adk.agents import SequentialAgent
    from google.adk.apps.app import App

    async def scenario() -> Any:
        service = SessionService(registry)
        agents = [LlmAgent(name=name, model=Recorder(seen=[])) for name in ("a1", "a2")]
        with pytest.warns(DeprecationWarning):  # SequentialAgent, still ADK's pipeline agent
            pipeline = SequentialAgent(name="pipeline", sub_agents=agents)
        app = App(name="app", root_agent=pipeline, plugins=[service.plugin()])
        runner = Runner(app=app, session_service=service)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        await asyncio.wait_for(asyncio.gather(*(_run(runner, f"ask {i}") for i in range(4))), 90)
        return await service.get_session(app_name="app", user_id="u", session_id="s")

    session = asyncio.run(scenario())
    assert [e.author for e in session.events] == ["user", "a1", "a2"] * 4
    assert _interleavings(session.events) == 0


def test_a_replayed_invocation_stores_nothing_twice(registry):
    model = Recorder(seen=[])

    async def scenario() -> Any:
        service = SessionService(registry)
        runner = Runner(app_name="app", agent=LlmAgent(name="a", model=model), session_service=service)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        done = await asyncio.create_task(_run(runner, "once"))  # a request's task, ended
        with pytest.raises(TurnReplayedError):  # redelivered under the same invocation id
            await asyncio.create_task(_run(runner, "once", invocation_id=done[0].invocation_id))
        return await service.get_session(app_name="app", user_id="u", session_id="s")

    session = asyncio.run(scenario())
    assert [e.content.parts[0].text for e in session.events] == ["once", "seen 1"]


def test_an_explicit_keyed_turn_replays_a_redelivered_message(registry):
    model = Recorder(seen=[])

    async def on_message(service: Any, runner: Any, message_id: str, text: str) -> str:
        async with service.turn(app_name="app", user_id="u", session_id="s", key=message_id) as turn:
            if turn.replayed:
                return service.events(turn.messages)[-1].content.parts[0].text
            events = await _run(runner, text)
        return events[-1].content.parts[0].text

    async def scenario() -> Any:
        service = SessionService(registry)
        runner = Runner(app_name="app", agent=LlmAgent(name="a", model=model), session_service=service)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        answers = [await on_message(service, runner, "m-1", "hi"), await on_message(service, runner, "m-1", "hi")]
        return answers, await service.get_session(app_name="app", user_id="u", session_id="s")

    answers, session = asyncio.run(scenario())
    assert answers == ["seen 1", "seen 1"]
    assert len(model.seen) == 1 and len(session.events) == 2


def test_the_summary_reaches_the_model(make_registry):
    registry = make_registry(HeadTailCompressor(), keep_last=2, max_tokens=10_000, target_tokens=100)
    model = Recorder(seen=[])

    async def scenario() -> Any:
        service = SessionService(registry)
        runner = Runner(app_name="app", agent=LlmAgent(name="a", model=model), session_service=service)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        for i in range(4):
            await _run(runner, f"fact {i} " + "x" * 200)
        await asyncio.to_thread(registry.session(_store_id(registry)).compress, force=True)
        await _run(runner, "what do you know?")

    asyncio.run(scenario())
    last = model.seen[-1]
    assert any(text.startswith(SUMMARY_PREFIX) for text in last), last
    assert last[-1] == "what do you know?"


def _store_id(registry: SessionRegistry) -> str:
    (info,) = registry.store.sessions(source="adk")
    return info.id


# -- two worker processes ------------------------------------------------------------------


def worker(url: str, name: str, runs: int) -> None:
    """A worker process: its own store and registry, ``runs`` runs on the shared session."""
    store = open_store(url)
    with SessionRegistry(store) as registry:
        runner = Runner(
            app_name="app", agent=LlmAgent(name="a", model=Recorder(seen=[])), session_service=SessionService(registry)
        )

        async def runs_() -> None:
            await asyncio.gather(*(_run(runner, f"{name} {i}") for i in range(runs)))

        asyncio.run(runs_())
    store.close()


def test_two_worker_processes_never_interleave(store_url, registry):
    async def create() -> None:
        await SessionService(registry).create_session(app_name="app", user_id="u", session_id="s")

    asyncio.run(create())
    code = (
        "import sys; from tests.actors.integrations.test_adk_runner import worker; worker(sys.argv[1], sys.argv[2], 4)"
    )
    workers = [
        subprocess.Popen([sys.executable, "-c", code, store_url, name], cwd=ROOT, stderr=subprocess.PIPE, text=True)
        for name in ("w1", "w2")
    ]
    for process in workers:
        _, err = process.communicate(timeout=100)
        assert process.returncode == 0, err

    async def read() -> Any:
        return await SessionService(registry).get_session(app_name="app", user_id="u", session_id="s")

    session = asyncio.run(read())
    assert len(session.events) == 16
    assert _interleavings(session.events) == 0
    assert sorted(e.content.parts[0].text for e in session.events if e.author == "user") == sorted(
        f"{w} {i}" for w in ("w1", "w2") for i in range(4)
    )

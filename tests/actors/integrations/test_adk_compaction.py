"""`SessionService` across compactions: the kept events come back exactly (merged user
events included), the summary as a user event, state and listing survive a rotation."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest

from actors import HeadTailCompressor
from protocol import SUMMARY_PREFIX

pytestmark = pytest.mark.skipif(importlib.util.find_spec("google.adk") is None, reason="the adk extra is not installed")

if importlib.util.find_spec("google.adk") is not None:
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    from actors.integrations.adk import SessionService


def _event(author: str, text: str, at: float, **fields: Any) -> Event:
    role = "user" if author == "user" else "model"
    content = types.Content(role=role, parts=[types.Part(text=text)])
    return Event(id=f"e{at}", invocation_id=f"inv{int(at)}", author=author, content=content, timestamp=at, **fields)


def _texts(events: list[Any]) -> list[str]:
    return [e.content.parts[0].text for e in events]


@pytest.mark.parametrize("mode", ["in_place", "rotate"])
def test_compaction_keeps_events_exact_and_the_summary_readable(make_registry, mode):
    registry = make_registry(HeadTailCompressor(), keep_last=3, mode=mode)
    history = [
        _event("user", "first ask " + "x" * 300, 1.0),
        _event("a", "first answer " + "y" * 300, 2.0, actions=EventActions(state_delta={"seen": 1})),
        _event("user", "second ask", 3.0),
        _event("user", "third ask, no answer between", 4.0, custom_metadata={"k": [1, None]}),
        _event("a", "last answer", 5.0),
    ]

    async def scenario() -> Any:
        service = SessionService(registry)
        session = await service.create_session(app_name="app", user_id="u", session_id="s", state={"user:name": "Ada"})
        for event in history:
            await service.append_event(session, event)
        (info,) = registry.store.sessions(source="adk")
        outcome = await asyncio.to_thread(registry.session(info.id).compress, force=True)
        compacted = await service.get_session(app_name="app", user_id="u", session_id="s")
        later = _event("user", "after the compaction", 6.0, actions=EventActions(state_delta={"after": True}))
        await service.append_event(compacted.model_copy(deep=True), later)
        listed = await service.list_sessions(app_name="app", user_id="u")
        return outcome, compacted, await service.get_session(app_name="app", user_id="u", session_id="s"), listed

    outcome, compacted, after, listed = asyncio.run(scenario())
    assert outcome.status.value == ("compacted" if mode == "in_place" else "rotated")
    summary = [e for e in compacted.events if _texts([e])[0].startswith(SUMMARY_PREFIX)]
    assert len(summary) == 1 and summary[0].author == "user"  # the model reads it as context
    assert compacted.events[-3:] == history[-3:]  # the kept tail, merged user events split again, exact
    assert compacted.state == {"user:name": "Ada", "seen": 1}
    assert after.events[-1].content.parts[0].text == "after the compaction"
    assert after.state == {"user:name": "Ada", "seen": 1, "after": True}
    assert [s.id for s in listed.sessions] == ["s"] and listed.sessions[0].last_update_time == 6.0

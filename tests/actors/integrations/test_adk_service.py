"""`SessionService` against ADK's own session services, operation by operation.

Each test is a scenario (the behaviours ADK's session-service tests check) run on our service
(a real SQLite file, a real PostgreSQL) and on ADK's ``InMemorySessionService`` and
``SqliteSessionService`` (a real file); what each observes must be the same.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from actors import SessionRegistry
from persistence import open_store
from protocol import ConfigurationError, SessionExistsError, SessionNotFoundError

ROOT = Path(__file__).resolve().parents[3]
HAVE_ADK = importlib.util.find_spec("google.adk") is not None
needs_adk = pytest.mark.skipif(
    not HAVE_ADK, reason="the adk extra is not installed (pip install 'session-actors[adk]')"
)

if HAVE_ADK:
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkSessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.adk.sessions import InMemorySessionService
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.adk.sessions.session import Session
    from google.adk.sessions.sqlite_session_service import SqliteSessionService
    from google.genai import types

Scenario = Callable[[Any], Awaitable[Any]]
REFERENCES = ["in_memory", "sqlite"]


# -- without the extra -------------------------------------------------------------------


def test_importing_the_adapter_does_not_import_adk():
    code = "import sys, actors.integrations.adk; assert 'google.adk' not in sys.modules, 'ADK was imported eagerly'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_using_it_without_adk_raises_configuration_error_naming_the_extra(monkeypatch):
    import actors.integrations.adk as adk

    for name in [m for m in sys.modules if m == "google.adk" or m.startswith("google.adk.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "actors.integrations._adk_service", raising=False)
    monkeypatch.delattr(sys.modules["actors.integrations"], "_adk_service", raising=False)  # imported before
    monkeypatch.setitem(sys.modules, "google.adk", None)  # the fault: "not installed"
    with pytest.raises(ConfigurationError, match=r"session-actors\[adk\]"):
        adk.SessionService  # noqa: B018  # the name's first use imports ADK


# -- with it -----------------------------------------------------------------------------


@pytest.fixture
def compare(make_registry, tmp_path) -> Callable[[Scenario], Any]:
    """``compare(scenario)``: run it on ours and on each reference service; all must return
    the same (returned)."""
    from actors.integrations.adk import SessionService

    def run(scenario: Scenario, references: list[str] = REFERENCES) -> Any:
        ours = asyncio.run(scenario(SessionService(make_registry())))
        for name in references:
            service = InMemorySessionService() if name == "in_memory" else SqliteSessionService(str(tmp_path / "a.db"))
            theirs = asyncio.run(scenario(service))
            assert ours == theirs, f"differs from ADK's {name} service"
            if name == "sqlite":
                (tmp_path / "a.db").unlink()
        return ours

    return run


def _view(session: Session | None) -> Any:
    """What a caller observes of a session (its last update time is the service's clock)."""
    if session is None:
        return None
    return (session.id, session.app_name, session.user_id, session.state, [e.model_dump() for e in session.events])


@needs_adk
def test_an_unknown_session_is_none(compare):
    async def scenario(service: Any) -> Any:
        return await service.get_session(app_name="my_app", user_id="u", session_id="123")

    assert compare(scenario) is None


@needs_adk
def test_create_get_delete(compare):
    async def scenario(service: Any) -> Any:
        made = await service.create_session(app_name="my_app", user_id="u", state={"key": "value"})
        got = await service.get_session(app_name="my_app", user_id="u", session_id=made.id)
        assert got == made and bool(made.id)
        await service.delete_session(app_name="my_app", user_id="u", session_id=made.id)
        await service.delete_session(app_name="my_app", user_id="u", session_id=made.id)  # gone: a no-op
        return made.state, await service.get_session(app_name="my_app", user_id="u", session_id=made.id)

    assert compare(scenario) == ({"key": "value"}, None)


@needs_adk
def test_list_sessions_of_a_user_and_of_all_users(compare):
    async def scenario(service: Any) -> Any:
        for user, sid in (("u1", "s1a"), ("u1", "s1b"), ("u2", "s2a")):
            await service.create_session(app_name="app", user_id=user, session_id=sid, state={"key": sid})
        await service.create_session(app_name="other", user_id="u1", session_id="elsewhere")
        out = []
        for user in ("u1", "u2", None, "nobody"):
            listed = (await service.list_sessions(app_name="app", user_id=user)).sessions
            out.append(sorted((s.id, s.user_id, s.state, s.events) for s in listed))
        return out

    listed = compare(scenario)
    assert [len(x) for x in listed] == [2, 1, 3, 0]


@needs_adk
def test_list_sessions_oldest_update_first(compare):
    async def scenario(service: Any) -> Any:
        sessions = [await service.create_session(app_name="app", user_id="u", session_id=f"s{i}") for i in range(3)]
        base = max(s.last_update_time for s in sessions)
        await service.append_event(sessions[0], Event(author="user", timestamp=base + 20))
        await service.append_event(sessions[1], Event(author="user", timestamp=base + 10))
        return [s.id for s in (await service.list_sessions(app_name="app", user_id="u")).sessions]

    assert compare(scenario) == ["s2", "s1", "s0"]


@needs_adk
def test_app_user_and_session_state_scopes(compare):
    async def scenario(service: Any) -> Any:
        s1 = await service.create_session(
            app_name="app", user_id="u1", session_id="s1", state={"app:k1": "v1", "user:k1": "v1", "sk1": "v1"}
        )
        delta = {"app:k2": "v2", "user:k2": "v2", "sk2": "v2", "none": None}
        await service.append_event(
            s1, Event(invocation_id="inv1", author="user", actions=EventActions(state_delta=delta))
        )
        same_user = await service.create_session(app_name="app", user_id="u1", session_id="s1b")
        other_user = await service.create_session(app_name="app", user_id="u2", session_id="s2")
        other_app = await service.create_session(app_name="app2", user_id="u1", session_id="s3")
        again = await service.get_session(app_name="app", user_id="u1", session_id="s1")
        return [s.state for s in (s1, same_user, other_user, other_app, again)]

    s1, same_user, other_user, other_app, again = compare(scenario)
    assert same_user == {"app:k1": "v1", "app:k2": "v2", "user:k1": "v1", "user:k2": "v2"}
    assert other_user == {"app:k1": "v1", "app:k2": "v2"} and other_app == {}
    assert again == s1 and again["none"] is None


@needs_adk
def test_temp_state_stays_in_the_session_object(compare):
    async def scenario(service: Any) -> Any:
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        first = Event(invocation_id="inv1", author="a1", actions=EventActions(state_delta={"temp:k": "v", "sk": "v2"}))
        await service.append_event(session, first)
        visible = dict(session.state)  # the next agent of the invocation reads it
        stored = await service.get_session(app_name="app", user_id="u", session_id="s")
        return visible, first.actions.state_delta, stored.state, stored.events[0].actions.state_delta

    visible, delta, stored, stored_delta = compare(scenario)
    assert visible == {"temp:k": "v", "sk": "v2"} and delta == stored == stored_delta == {"sk": "v2"}


@needs_adk
def test_get_session_respects_the_user(compare):
    async def scenario(service: Any) -> Any:
        mine = await service.create_session(app_name="app", user_id="u1", session_id="s1")
        await service.append_event(mine, Event(invocation_id="inv1", author="user"))
        await service.create_session(app_name="app", user_id="u2", session_id="s1")
        got = await service.get_session(app_name="app", user_id="u2", session_id="s1")
        return got.user_id, len(got.events)

    assert compare(scenario) == ("u2", 0)


@needs_adk
def test_a_taken_id_raises_already_exists(compare):
    async def scenario(service: Any) -> Any:
        await service.create_session(app_name="app", user_id="u", session_id="taken", state={"k": 1})
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name="app", user_id="u", session_id="taken", state={"k": 2})
        return (await service.get_session(app_name="app", user_id="u", session_id="taken")).state

    assert compare(scenario) == {"k": 1}


@needs_adk
def test_a_padded_session_id_reads_and_deletes(compare):
    async def scenario(service: Any) -> Any:
        await service.create_session(app_name="app", user_id="u", session_id=" padded ")
        got = await service.get_session(app_name="app", user_id="u", session_id="padded")
        await service.delete_session(app_name="app", user_id="u", session_id=" padded ")
        return got.id, await service.get_session(app_name="app", user_id="u", session_id="padded")

    assert compare(scenario) == ("padded", None)


def _complete_event(timestamp: float) -> Event:
    return Event(
        id="e1",
        invocation_id="invocation",
        author="user",
        content=types.Content(
            role="user",
            parts=[types.Part(text="test_text"), types.Part.from_bytes(data=b"\x00\xffimage", mime_type="image/png")],
        ),
        turn_complete=True,
        partial=False,
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
        long_running_tool_ids={"tool1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
        grounding_metadata=types.GroundingMetadata(
            web_search_queries=["query1"], search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob")
        ),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1, candidates_token_count=1, total_token_count=2
        ),
        citation_metadata=types.CitationMetadata(),
        custom_metadata={"custom_key": "custom_value", "nested": [1, 2.5, None]},
        timestamp=timestamp,
        input_transcription=types.Transcription(text="input transcription", finished=True),
        output_transcription=types.Transcription(text="output transcription", finished=True),
    )


@needs_adk
def test_an_event_with_every_field_and_bytes_round_trips_equal(compare):
    async def scenario(service: Any) -> Any:
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        event = _complete_event(1700000000.123)
        await service.append_event(session, event)
        calls = types.Content(
            role="model",
            parts=[
                types.Part(function_call=types.FunctionCall(id="c1", name="lookup", args={"q": "x"})),
                types.Part(function_response=types.FunctionResponse(id="c1", name="lookup", response={"r": 1})),
            ],
        )
        await service.append_event(
            session, Event(id="e2", invocation_id="i2", author="agent", content=calls, timestamp=1700000001.5)
        )
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert got == session and got.events[0] == event
        return _view(got)

    compare(scenario)


@needs_adk
def test_last_update_time_follows_the_event(compare):
    async def scenario(service: Any) -> Any:
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        created = session.last_update_time
        await service.append_event(session, Event(invocation_id="inv", author="user", timestamp=created + 10))
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        return session.last_update_time - created, got.last_update_time - created

    assert compare(scenario) == (pytest.approx(10, abs=1e-6), pytest.approx(10, abs=1e-6))


@needs_adk
def test_get_session_config_filters(compare):
    async def scenario(service: Any) -> Any:
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        for i in range(1, 6):
            await service.append_event(session, Event(author="user", timestamp=i))
        configs = [None, {"num_recent_events": 0}, {"num_recent_events": 3}, {"after_timestamp": 4.0}]
        configs += [{"after_timestamp": 50.0}, {"after_timestamp": 4.0, "num_recent_events": 3}]
        out = []
        for config in configs:
            got = await service.get_session(
                app_name="app", user_id="u", session_id="s", config=config and GetSessionConfig(**config)
            )
            out.append([e.timestamp for e in got.events])
        return out

    assert compare(scenario) == [[1, 2, 3, 4, 5], [], [3, 4, 5], [4, 5], [], [4, 5]]


@needs_adk
def test_partial_events_are_not_stored(compare):
    async def scenario(service: Any) -> Any:
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        await service.append_event(session, Event(author="user", partial=True))
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        return len(session.events), len(got.events)

    assert compare(scenario) == (0, 0)


@needs_adk
def test_user_state_without_a_session(compare):
    async def scenario(service: Any) -> Any:
        empty = await service.get_user_state(app_name="app", user_id="u1")
        session = await service.create_session(app_name="app", user_id="u1")
        for counter in (1, 2):
            delta = {"user:profile": {"name": "Alice"}, "user:counter": counter, "session_key": 1}
            await service.append_event(session, Event(author="system", actions=EventActions(state_delta=delta)))
        return (
            empty,
            await service.get_user_state(app_name="app", user_id="u1"),
            await service.get_user_state(app_name="app", user_id="u2"),
            await service.get_user_state(app_name="other", user_id="u1"),
        )

    assert compare(scenario) == ({}, {"profile": {"name": "Alice"}, "counter": 2}, {}, {})


@needs_adk
def test_appending_to_an_unknown_session_raises_not_found(compare):
    async def scenario(service: Any) -> Any:
        ghost = Session(id="ghost", app_name="app", user_id="u")
        with pytest.raises(AdkSessionNotFoundError):
            await service.append_event(ghost, Event(author="user"))
        return await service.get_session(app_name="app", user_id="u", session_id="ghost")

    assert compare(scenario) is None


@needs_adk
def test_an_equal_event_appended_again_is_stored_once(compare):
    async def scenario(service: Any) -> Any:
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        event = Event(invocation_id="inv", author="user", timestamp=5.0, actions=EventActions(state_delta={"n": 1}))
        await service.append_event(session, event)
        stale = await service.get_session(app_name="app", user_id="u", session_id="s")
        stale.events.clear()
        await service.append_event(stale, event.model_copy(deep=True))  # a retried call
        await service.append_event(session, Event(id=event.id, invocation_id="inv", author="user", timestamp=6.0))
        got = await service.get_session(app_name="app", user_id="u", session_id="s")
        return [e.timestamp for e in got.events]

    # ADK's SqliteSessionService refuses the stale copy (StaleSessionError): in-memory only
    assert compare(scenario, references=["in_memory"]) == [5.0, 6.0]


@needs_adk
def test_a_stale_session_object_is_never_refused(make_registry):
    """ADK's persistent services refuse a Session read before another write
    (``StaleSessionError``); ours appends it after what was written meanwhile."""
    from actors.integrations.adk import SessionService

    async def scenario() -> Any:
        service = SessionService(make_registry())
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        one = await service.get_session(app_name="app", user_id="u", session_id="s")
        two = await service.get_session(app_name="app", user_id="u", session_id="s")
        await asyncio.gather(
            service.append_event(one, Event(author="user", timestamp=1.0, actions=EventActions(state_delta={"a": 1}))),
            service.append_event(two, Event(author="user", timestamp=2.0, actions=EventActions(state_delta={"b": 2}))),
        )
        return session, await service.get_session(app_name="app", user_id="u", session_id="s")

    _, got = asyncio.run(scenario())
    assert sorted(e.timestamp for e in got.events) == [1.0, 2.0]
    assert got.state == {"a": 1, "b": 2}


@needs_adk
def test_our_errors_are_transcript_errors_too(make_registry):
    from actors.integrations.adk import SessionService

    async def scenario() -> None:
        service = SessionService(make_registry())
        with pytest.raises(SessionNotFoundError):
            await service.append_event(Session(id="ghost", app_name="app", user_id="u"), Event(author="user"))
        await service.create_session(app_name="app", user_id="u", session_id="taken")
        with pytest.raises(SessionExistsError):
            await service.create_session(app_name="app", user_id="u", session_id="taken")

    asyncio.run(scenario())


@needs_adk
def test_sessions_are_one_conversation_for_every_worker(make_registry):
    from actors.integrations.adk import SessionService

    async def scenario() -> Any:
        first, second = SessionService(make_registry()), SessionService(make_registry())
        session = await first.create_session(app_name="app", user_id="u", session_id="s", state={"user:k": 1})
        await first.append_event(session, _complete_event(10.0))
        return session, await second.get_session(app_name="app", user_id="u", session_id="s")

    session, seen = asyncio.run(scenario())
    assert seen == session


@needs_adk
def test_state_that_is_not_json_is_refused_and_writes_nothing(make_registry):
    from actors.integrations.adk import SessionService
    from protocol import TranscriptError

    async def scenario() -> Any:
        service = SessionService(make_registry())
        with pytest.raises(TranscriptError):
            await service.create_session(app_name="app", user_id="u", session_id="bad", state={"user:k": object()})
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        for delta in ({"k": object()}, {"app:k": {1, 2}}):
            with pytest.raises(TranscriptError):
                await service.append_event(session, Event(author="user", actions=EventActions(state_delta=delta)))
        return (
            await service.get_session(app_name="app", user_id="u", session_id="bad"),
            await service.get_session(app_name="app", user_id="u", session_id="s"),
            await service.get_user_state(app_name="app", user_id="u"),
        )

    bad, stored, user_state = asyncio.run(scenario())
    assert bad is None and stored.events == [] and stored.state == {} and user_state == {}

"""Google ADK ``Event`` values <-> chat `Message` values, and where a session lives.

An event is one message: ``user`` when a user wrote it, ``assistant`` otherwise, its
text parts (and a short line per function call or response) the content a compressor
reads, and the event itself, in ADK's own JSON form, in ``meta["adk"]`` so that it
comes back equal. A message without that entry (a compaction's summary, another
path's note) becomes an event of its own: a summary as a user event, because every
model reads user content where it stands (see `from_message`).

Each message carries a key made from the event's JSON: an equal event appended again
(a retried call) writes nothing, while two different events that share an id are both
kept, as ADK's in-memory service does.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from google.adk.events.event import Event
from google.genai import types

from protocol import SUMMARY_PREFIX, Message, StoredMessage, validate_session_id
from protocol.errors import InvalidArgumentError, InvalidSessionIdError

__all__ = ["META_KEY", "from_message", "from_messages", "store_id", "to_message"]

#: The meta key holding the exact ADK event.
META_KEY = "adk"

_RENDERED_VALUE_CHARS = 2_000  # what a function line shows of its arguments or response


def store_id(app_name: str, user_id: str, session_id: str) -> str:
    """The store's session id of ADK's ``(app_name, user_id, session_id)``: readable when
    the three fit the session-id rules, else a digest (the metadata names them anyway)."""
    for name, value in (("app_name", app_name), ("user_id", user_id), ("session_id", session_id)):
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(f"{name} must be a non-empty str, got {value!r}")
    if "/" not in app_name and "/" not in user_id:
        readable = f"adk:{app_name}/{user_id}/{session_id}"
        try:
            return validate_session_id(readable)
        except InvalidSessionIdError:
            pass  # too long or a refused character: the digest names it
    digest = hashlib.sha256(json.dumps([app_name, user_id, session_id]).encode()).hexdigest()
    return f"adk:{digest}"  # no "/": never equal to a readable id


def event_json(event: Event) -> dict[str, Any]:
    """ADK's JSON form of ``event`` (bytes as base64), which validates back to an equal event."""
    try:
        return json.loads(event.model_dump_json(exclude_none=True))
    except Exception as exc:  # pydantic's serialization error names the value (a state value, ...)
        raise InvalidArgumentError(f"the event is not JSON-able: {exc}") from exc


def to_message(event: Event) -> Message:
    dumped = event_json(event)
    digest = hashlib.sha256(json.dumps(dumped, sort_keys=True).encode()).hexdigest()[:40]
    return Message(
        role="user" if event.author == "user" else "assistant",
        content=_render(event.content),
        meta={META_KEY: dumped},
        key=f"adk-event-{digest}",
    )


def from_messages(messages: list[StoredMessage]) -> list[Event]:
    """The events of stored messages, oldest first."""
    return [event for message in messages for event in _events_of(message)]


def _events_of(message: StoredMessage) -> list[Event]:
    """A compaction merges adjacent user messages into one, keeping each one's meta in
    ``merged_from``: each comes back as the event it was (unless one was not an event,
    whose text only the merged message holds: then the merged message is one event)."""
    sources = message.meta.get("merged_from") if message.meta else None
    if isinstance(sources, list) and sources:
        dumped = [source.get(META_KEY) if isinstance(source, dict) else None for source in sources]
        if all(isinstance(one, dict) for one in dumped):
            return [Event.model_validate(one) for one in dumped]
        return [from_message(message, exact=False)]
    return [from_message(message)]


def from_message(message: StoredMessage, *, exact: bool = True) -> Event:
    dumped = message.meta.get(META_KEY) if message.meta and exact else None
    if isinstance(dumped, dict):
        return Event.model_validate(dumped)
    # Written by the library or another path: a summary reads as user content, and so
    # does anything a user wrote; the rest speaks as whoever wrote it.
    summary = message.text.startswith(SUMMARY_PREFIX) or bool(message.meta.get("compaction"))
    author = (
        "user" if summary or message.role in ("user", "system", "developer") else (message.name or "session-actors")
    )
    role = "user" if author == "user" else "model"
    return Event(
        id=f"session-actors-{message.session_id}-{message.seq}",
        invocation_id=f"session-actors-{message.seq}",
        author=author,
        content=types.Content(role=role, parts=[types.Part(text=message.text)]),
        timestamp=message.created_at,
    )


def _render(content: types.Content | None) -> str:
    """The text a compressor reads for an event."""
    if content is None or not content.parts:
        return ""
    lines: list[str] = []
    for part in content.parts:
        if part.text:
            lines.append(part.text)
        elif part.function_call is not None:
            call = part.function_call
            lines.append(f"[call {call.name}({_short(call.args)})]")
        elif part.function_response is not None:
            answer = part.function_response
            lines.append(f"[{answer.name} returned {_short(answer.response)}]")
        elif part.inline_data is not None:
            lines.append(f"[{part.inline_data.mime_type or 'binary'} data]")
    return "\n".join(lines)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= _RENDERED_VALUE_CHARS else text[:_RENDERED_VALUE_CHARS] + "..."

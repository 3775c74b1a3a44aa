"""Pydantic AI ``ModelMessage`` values <-> chat `Message` values.

Works on Pydantic AI's own JSON form (``ModelMessagesTypeAdapter``), so no part type
is special-cased for the round trip: whatever the adapter dumps comes back. Why this
shape:

- a ``ModelResponse`` is one assistant message: its text parts are the content and
  its client-executed calls (any part with a ``tool_call_id`` that is not a
  ``builtin-*`` part, which the provider runs itself) are ``tool_calls``;
- a ``ModelRequest`` is one message per part a model reads: a system prompt is
  ``system``, a user prompt or retry feedback ``user``, a tool result (any part with a
  ``tool_call_id``) a ``tool`` message answering its call, so the compressors' tool-run
  rules keep a call and its result together; parts a model does not read (instruction
  and settings deltas, ...) ride with their neighbour;
- each message keeps its slice of the exact Pydantic AI message in ``meta`` (the
  message without its parts, the parts, the slice's index), and consecutive slices of
  one message are joined again on the way back, so a message comes back exactly; the
  slices a compaction dropped are simply missing from it;
- a message the library wrote or rewrote (a summary, a merged ask, another path's
  note) no longer matches its slice, so it is rendered from the message itself, a
  summary as a user prompt (see `render`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from protocol import SUMMARY_PREFIX, InvalidMessageError, Message, Usage

__all__ = ["META_KEY", "from_messages", "to_messages"]

#: The meta key holding a message's slice of the exact Pydantic AI message.
META_KEY = "pydantic_ai"

#: Request parts that are a chat message of their own (tool results too: see `_is_result`).
_OWN_MESSAGE = {"system-prompt": "system", "user-prompt": "user", "retry-feedback": "user"}
_COMPARED = ("role", "content", "name", "tool_call_id", "tool_calls")


def to_messages(dumped: Sequence[dict[str, Any]]) -> list[Message]:
    """The chat messages storing ``dumped`` (``ModelMessagesTypeAdapter``'s JSON form)."""
    out: list[Message] = []
    for data in dumped:
        envelope = {k: v for k, v in data.items() if k != "parts"}
        slices = _slices(envelope.get("kind"), list(data.get("parts") or ()))
        for index, parts in enumerate(slices):
            fields = _fields(envelope, parts)
            meta: dict[str, Any] = {META_KEY: {"message": envelope, "parts": parts, "slice": index}}
            if fields["role"] == "user" and not any(p.get("part_kind") == "user-prompt" for p in parts):
                meta["synthetic"] = True  # not the user's ask: compaction must not keep it as one
            out.append(Message(**fields, meta=meta, usage=_usage(envelope) if fields["role"] == "assistant" else None))
    return out


def from_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The Pydantic AI messages (JSON form) ``messages`` stand for, in order."""
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None  # the message the previous slice belonged to
    last: tuple[str | None, int] = (None, -1)  # (its envelope as JSON, the slice's index)
    names: dict[str, str] = {}  # tool_call_id -> tool name, for results rendered from a message
    for message in messages:
        stored = _stored_slice(message)
        if stored is None:
            current = None
            out.append(render(message, names))
            continue
        envelope, parts, index = stored
        key = _compact(envelope)
        if current is not None and last[0] == key and index > last[1]:
            current["parts"].extend(parts)
        else:
            current = {**envelope, "parts": list(parts)}
            out.append(current)
        last = (key, index)
        for part in parts:
            if _is_call(part):
                names[part["tool_call_id"]] = part["tool_name"]
    return out


def render(message: Message, names: dict[str, str]) -> dict[str, Any]:
    """A Pydantic AI message (JSON form) for a message that carries none.

    A summary becomes a user prompt whatever its role: every model reads a user
    prompt as context where it stands, between the kept head and tail. A system
    prompt part would not do: Pydantic AI counts only the leading system prompt as the
    standing one, and providers such as Anthropic and Gemini lift system parts out of
    the conversation, so a summary there would lose its place; as an assistant text
    part the model would read it as something it said itself.
    """
    stamp = _timestamp(message)
    text = message.text
    if message.role == "tool":
        call_id = message.tool_call_id or ""
        part = {"part_kind": "tool-return", "tool_name": names.get(call_id, "tool"), "content": text}
        return {"kind": "request", "parts": [{**part, "tool_call_id": call_id, **stamp}]}
    if message.role in ("system", "developer") and not _is_summary(message):
        return {"kind": "request", "parts": [{"part_kind": "system-prompt", "content": text, **stamp}]}
    if message.role == "user" or _is_summary(message):
        content = message.content if isinstance(message.content, str) else text
        return {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": content, **stamp}]}
    parts: list[dict[str, Any]] = [{"part_kind": "text", "content": text}] if text or not message.tool_calls else []
    for call in message.tool_calls or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            names[str(call.get("id", ""))] = str(function.get("name", ""))
            parts.append(
                {
                    "part_kind": "tool-call",
                    "tool_name": str(function.get("name", "")),
                    "args": str(function.get("arguments", "")),
                    "tool_call_id": str(call.get("id", "")),
                }
            )
    return {"kind": "response", "parts": parts, **stamp}


# -- Pydantic AI message -> chat fields --------------------------------------------------


def _slices(kind: Any, parts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A response is one slice; a request one slice per part a model reads, the other
    parts joining the slice before them (or the first one)."""
    if kind != "request":
        return [parts]
    slices: list[list[dict[str, Any]]] = []
    pending: list[dict[str, Any]] = []  # parts before the first readable one
    for part in parts:
        if part.get("part_kind") in _OWN_MESSAGE or _is_result(part):
            slices.append([*pending, part])
            pending = []
        elif slices:
            slices[-1].append(part)
        else:
            pending.append(part)
    return slices or [pending]  # pending is left only when no part is readable


def _fields(envelope: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    if envelope.get("kind") != "request":
        text = "\n".join(
            p["content"] for p in parts if p.get("part_kind") == "text" and isinstance(p.get("content"), str)
        )
        calls = [_tool_call(p) for p in parts if _is_call(p)]
        return {"role": "assistant", "content": None if calls and not text else text, "tool_calls": calls or None}
    for part in parts:
        if _is_result(part):
            return {"role": "tool", "content": _text(part.get("content")), "tool_call_id": part["tool_call_id"]}
        role = _OWN_MESSAGE.get(part.get("part_kind", ""))
        if role == "user" and part.get("part_kind") == "user-prompt":
            return {"role": role, "content": _user_content(part.get("content"))}
        if role is not None:
            return {"role": role, "content": _text(part.get("content"))}
    return {"role": "user", "content": ""}  # a request of parts no model reads


def _is_call(part: dict[str, Any]) -> bool:
    """A call the application runs (answered in a later request), not the provider."""
    kind = part.get("part_kind")
    return (
        isinstance(kind, str)
        and not kind.startswith("builtin-")
        and isinstance(part.get("tool_call_id"), str)
        and isinstance(part.get("tool_name"), str)
    )


def _is_result(part: dict[str, Any]) -> bool:
    return isinstance(part.get("tool_call_id"), str) and isinstance(part.get("tool_name"), str)


def _tool_call(part: dict[str, Any]) -> dict[str, Any]:
    args = part.get("args")
    arguments = args if isinstance(args, str) else _compact(args if args is not None else {})
    return {
        "id": part["tool_call_id"],
        "type": "function",
        "function": {"name": part["tool_name"], "arguments": arguments},
    }


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    """A user prompt as chat content: text as it is, anything else labelled by its kind
    (the exact value stays in meta; the label is what a compressor reads)."""
    if isinstance(content, str):
        return content
    parts = []
    for item in content if isinstance(content, list) else [content]:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, dict) and isinstance(item.get("content"), str):
            parts.append({"type": "text", "text": item["content"]})
        else:
            kind = item.get("kind") if isinstance(item, dict) else None
            url = item.get("url") if isinstance(item, dict) else None
            parts.append({"type": "text", "text": f"[{kind or 'content'}{': ' + url if isinstance(url, str) else ''}]"})
    return parts


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else _compact(value)


def _usage(envelope: dict[str, Any]) -> Usage | None:
    """The response's token usage as `Usage`, so `Store.usage` counts the model call."""
    usage = envelope.get("usage")
    if not isinstance(usage, dict):
        return None
    inputs, outputs = usage.get("input_tokens"), usage.get("output_tokens")
    if not isinstance(inputs, int) or not isinstance(outputs, int) or not (inputs or outputs):
        return None
    model = envelope.get("model_name")
    try:
        return Usage(inputs, outputs, model if isinstance(model, str) else None)
    except InvalidMessageError:  # a model name we cannot record: the tokens still count
        return Usage(inputs, outputs)


# -- chat message -> Pydantic AI message -------------------------------------------------


def _stored_slice(message: Message) -> tuple[dict[str, Any], list[dict[str, Any]], int] | None:
    """The message's slice while the message still carries exactly what it maps to."""
    stored = message.meta.get(META_KEY)
    if not isinstance(stored, dict) or "merged_from" in message.meta:
        return None
    envelope, parts, index = stored.get("message"), stored.get("parts"), stored.get("slice")
    if not isinstance(envelope, dict) or not isinstance(parts, list) or not isinstance(index, int):
        return None
    try:
        fields = _fields(envelope, parts)
    except (KeyError, TypeError, AttributeError):
        return None
    if all(_same(getattr(message, name), fields.get(name)) for name in _COMPARED):
        return envelope, parts, index
    return None


def _is_summary(message: Message) -> bool:
    return message.text.startswith(SUMMARY_PREFIX) or bool(message.meta.get("compaction"))


def _timestamp(message: Message) -> dict[str, str]:
    created = getattr(message, "created_at", None)  # a StoredMessage's
    if not isinstance(created, float | int):
        return {}
    return {"timestamp": datetime.fromtimestamp(created, UTC).isoformat()}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str | None) or isinstance(b, str | None):
        return a == b
    return _compact(a) == _compact(b)

"""Responses API input items <-> chat `Message` values, one message per item.

Pure functions (no SDK import), so the mapping is testable without the
``openai-agents`` extra. Why this shape:

- the exact item travels in ``meta["agents_item"]`` (JSON, as the SDK's own
  SQLiteSession keeps it), so every item type round-trips exactly; a plain text
  message item (``{"role": ..., "content": "..."}`` and nothing else, what a user's
  input usually is) is its message exactly, so it is stored once, without a copy;
- a client-executed tool call (``function_call``, ``computer_call``, ...) becomes an
  assistant message with one ``tool_calls`` entry and its output a ``tool``
  message, so the actor's valid-result check and the compressors' tool-run rules
  keep a call and its output together;
- a reasoning item is an assistant message with ``meta["keep_with_next"]``: the
  Responses API rejects a reasoning item without the item it led to;
- a message the library rewrote (a rule-9 merge, a compressor's summary) no longer
  matches its stored copy, so it is rendered from the message itself.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from protocol import InvalidMessageError, Message

__all__ = ["ITEM_KEY", "item_to_message", "message_to_items"]

#: The meta key holding the exact original item.
ITEM_KEY = "agents_item"

#: Client-executed calls and the output type that answers each (paired by call_id).
CALL_OUTPUT_TYPES: dict[str, str] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "tool_search_call": "tool_search_output",
    "program": "program_output",
}
OUTPUT_TYPES = frozenset(CALL_OUTPUT_TYPES.values())

# Chat-shape content parts a rewritten message may carry, in Responses input shape.
_TEXT_PART = {"user": "input_text", "system": "input_text", "developer": "input_text", "assistant": "output_text"}


def item_to_message(item: Any) -> Message:
    """The message that stores ``item`` (a detached JSON copy of it rides in ``meta``,
    unless the message renders back as exactly the item: a plain text message)."""
    if not isinstance(item, Mapping):
        raise InvalidMessageError(f"an item must be a dict, got {type(item).__name__}")
    if _is_plain_text(item):
        return Message(item["role"], item["content"])
    item = _json_copy(item)
    fields = _chat_fields(item)
    meta: dict[str, Any] = {ITEM_KEY: item}
    if item.get("type") == "reasoning":
        meta["keep_with_next"] = True
    return Message(**fields, meta=meta)


def message_to_items(message: Message) -> list[dict[str, Any]]:
    """The items ``message`` stands for: its stored item while the message still
    matches it, else a rendering of the message (a summary or merged ask)."""
    stored = message.meta.get(ITEM_KEY)
    if isinstance(stored, dict) and "merged_from" not in message.meta and _matches(message, stored):
        return [copy.deepcopy(stored)]
    return _render(message)


# -- item -> chat fields ----------------------------------------------------------------


def _is_plain_text(item: Mapping[str, Any]) -> bool:
    """``{"role": "user" | "assistant" | "system" | "developer", "content": str}`` and
    no other key: `_render` gives back exactly this item from its message."""
    role = item.get("role")
    return len(item) == 2 and type(item.get("content")) is str and type(role) is str and role in _TEXT_PART


def _chat_fields(item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type")
    if kind == "message" or (kind is None and "role" in item):
        return {"role": item.get("role"), "content": _content(item.get("content"))}
    call_id = item.get("call_id")
    if kind in CALL_OUTPUT_TYPES and isinstance(call_id, str) and call_id:
        return {"role": "assistant", "content": None, "tool_calls": [_tool_call(item, call_id)]}
    if kind in OUTPUT_TYPES and isinstance(call_id, str) and call_id:
        return {"role": "tool", "content": _content(item.get("output", "")), "tool_call_id": call_id}
    if kind == "reasoning":
        return {"role": "assistant", "content": _reasoning_text(item)}
    # Anything else (hosted tool calls, MCP items, compaction items, references):
    # model-side items, stored as opaque assistant messages with a short label.
    return {"role": "assistant", "content": f"[{kind}]" if isinstance(kind, str) else "[item]"}


def _tool_call(item: dict[str, Any], call_id: str) -> dict[str, Any]:
    name = item.get("name") if isinstance(item.get("name"), str) else item["type"]
    for key in ("arguments", "input"):
        if isinstance(item.get(key), str):
            arguments = item[key]
            break
    else:
        arguments = _compact_json(item.get("action", item.get("operation", item.get("arguments", {}))))
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _content(value: Any) -> str | list[dict[str, Any]]:
    """Chat content for an item's content or output: text and part lists as they are."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(part, dict) for part in value):
        return value
    if isinstance(value, dict):
        return [value]
    return "" if value is None else _compact_json(value)


def _reasoning_text(item: dict[str, Any]) -> str:
    parts = [p.get("text") for p in (item.get("summary") or []) if isinstance(p, dict)]
    return "\n".join(t for t in parts if isinstance(t, str))


# -- message -> items --------------------------------------------------------------------


def _matches(message: Message, item: dict[str, Any]) -> bool:
    """True while the message still carries exactly what its item maps to."""
    try:
        fields = _chat_fields(item)
    except (KeyError, TypeError):
        return False
    return all(
        _same(getattr(message, name), fields.get(name))
        for name in ("role", "content", "name", "tool_call_id", "tool_calls")
    )


def _render(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id or "",
                "output": _parts(message.content, "input_text"),
            }
        ]
    items: list[dict[str, Any]] = []
    if message.content not in (None, "", []) or not message.tool_calls:
        items.append(
            {"role": message.role, "content": _parts(message.content, _TEXT_PART.get(message.role, "input_text"))}
        )
    for call in message.tool_calls or ():
        if isinstance(call, dict):
            function = call.get("function")
            if not isinstance(function, dict):
                function = {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": str(call.get("id", "")),
                    "name": str(function.get("name", "")),
                    "arguments": str(function.get("arguments", "")),
                }
            )
    return items


def _parts(content: Any, text_type: str) -> Any:
    """Chat-shape text parts (``{"type": "text"}``) in their Responses input shape."""
    if not isinstance(content, list):
        return "" if content is None else content
    return [{**part, "type": text_type} if part.get("type") == "text" else part for part in content]


# -- JSON helpers ------------------------------------------------------------------------


def _json_copy(item: Mapping[str, Any]) -> dict[str, Any]:
    """A detached copy as the store will give it back (JSON types only)."""
    try:
        return json.loads(_COPY_ENCODER.encode(item))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMessageError(f"item is not JSON-able: {exc}") from exc


#: ``json.dumps(item, allow_nan=False)`` without building an encoder on every call.
_COPY_ENCODER = json.JSONEncoder(allow_nan=False)


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (str, type(None))) or isinstance(b, (str, type(None))):
        return a == b
    return _compact_json(a) == _compact_json(b)

"""The item <-> message mapping on its own (no SDK needed): what each item becomes in
the transcript, and when a message is rendered from itself instead of its stored item."""

from __future__ import annotations

import json

import pytest

from protocol import InvalidMessageError, Message
from protocol._response_items import (
    ITEM_KEY,
    item_to_message,
    message_to_items,
)

from .items_catalog import ITEMS


@pytest.mark.parametrize("item", ITEMS, ids=lambda item: item.get("type") or item["role"])
def test_every_item_type_maps_to_one_message_and_back(item):
    message = item_to_message(item)
    assert message_to_items(message) == [item]
    # what the store gives back: the message through JSON
    reread = Message.from_dict(json.loads(json.dumps(message.to_dict())))
    assert message_to_items(reread) == [item]


def test_message_items_keep_their_role_developer_included():
    roles = [item_to_message(item).role for item in ITEMS if "role" in item]
    assert {"user", "system", "developer", "assistant"} <= set(roles)
    for item in ITEMS:
        if "role" in item:
            assert item_to_message(item).role == item["role"]


def test_calls_become_tool_calls_and_outputs_tool_messages():
    call = item_to_message(
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city":"Oslo"}'}
    )
    assert call.role == "assistant"
    assert call.tool_calls == [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}
    ]
    output = item_to_message({"type": "function_call_output", "call_id": "c1", "output": "12 C"})
    assert (output.role, output.tool_call_id, output.content) == ("tool", "c1", "12 C")
    # every client-executed call type pairs the same way
    shell = item_to_message({"type": "shell_call", "call_id": "c2", "action": {"commands": ["ls"]}})
    shell_out = item_to_message({"type": "shell_call_output", "call_id": "c2", "output": []})
    assert shell.tool_calls[0]["id"] == shell_out.tool_call_id == "c2"


def test_reasoning_is_kept_with_the_next_item_and_text_is_its_summary():
    message = item_to_message(
        {
            "type": "reasoning",
            "id": "rs",
            "summary": [{"type": "summary_text", "text": "step one"}, {"type": "summary_text", "text": "step two"}],
        }
    )
    assert message.meta["keep_with_next"] is True
    assert (message.role, message.content) == ("assistant", "step one\nstep two")


def test_other_items_are_opaque_assistant_messages_never_user_asks():
    for item in ITEMS:
        kind = item.get("type")
        if kind not in (None, "message") and not kind.endswith("_output"):
            message = item_to_message(item)
            assert message.role == "assistant", kind


def test_a_merged_message_renders_from_itself_not_from_its_stale_item():
    ask = item_to_message({"role": "user", "content": "first"})
    later = item_to_message({"role": "user", "content": "second"})
    # what rule 9 writes: the later message's meta plus merged_from, content joined
    merged = Message("user", "first\n\nsecond", meta={**later.meta, "merged_from": [dict(ask.meta), dict(later.meta)]})
    assert message_to_items(merged) == [{"role": "user", "content": "first\n\nsecond"}]


def test_a_message_whose_content_was_rewritten_renders_from_itself():
    stored = item_to_message({"role": "user", "content": "old"})
    rewritten = Message("user", "new", meta=stored.meta)
    assert message_to_items(rewritten) == [{"role": "user", "content": "new"}]


def test_messages_written_without_the_sdk_render_as_items():
    summary = Message("assistant", "[CONTEXT COMPACTION] 4 earlier messages", meta={"synthetic": True})
    assert message_to_items(summary) == [{"role": "assistant", "content": "[CONTEXT COMPACTION] 4 earlier messages"}]
    calls = Message(
        "assistant",
        "checking",
        tool_calls=[
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": '{"x":1}'}},
        ],
    )
    assert message_to_items(calls) == [
        {"role": "assistant", "content": "checking"},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "g", "arguments": '{"x":1}'},
    ]
    result = Message("tool", "42", tool_call_id="a")
    assert message_to_items(result) == [{"type": "function_call_output", "call_id": "a", "output": "42"}]
    # chat-shape text parts (a merge of part lists) become Responses input parts
    parts = Message("user", [{"type": "text", "text": "a"}, {"type": "input_image", "image_url": "u"}])
    assert message_to_items(parts) == [
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "u"}]}
    ]


def test_the_stored_item_is_a_detached_copy():
    item = {"role": "user", "content": [{"type": "input_text", "text": "a"}]}
    message = item_to_message(item)
    item["content"][0]["text"] = "mutated later by the caller"
    out = message_to_items(message)
    assert out == [{"role": "user", "content": [{"type": "input_text", "text": "a"}]}]
    out[0]["content"].append({"type": "input_text", "text": "mutated by the reader"})
    assert message_to_items(message)[0]["content"] == [{"type": "input_text", "text": "a"}]
    assert ITEM_KEY in message.meta


def _deep(levels: int) -> dict:
    item: dict = {"role": "user", "content": "deep"}
    for _ in range(levels):
        item = {"role": "user", "content": "x", "nested": item}
    return item


@pytest.mark.parametrize(
    "bad",
    [
        "not a dict",
        _deep(5000),  # past Python's recursion limit: still a typed error
        {"role": "user", "content": float("nan")},
        {"role": "user", "content": object()},
        {"role": "critic", "content": "unknown role"},
        {"role": ["user"], "content": "an unhashable role"},
    ],
)
def test_bad_items_raise_invalid_message_error(bad):
    with pytest.raises(InvalidMessageError):
        item_to_message(bad)


def test_a_plain_text_item_is_stored_once_as_its_message():
    """``{"role": ..., "content": "..."}`` and nothing else is exactly what its message
    renders back: no copy rides in meta (the text is not stored twice)."""
    for role in ("user", "assistant", "system", "developer"):
        item = {"role": role, "content": f"{role} says hi"}
        message = item_to_message(item)
        assert (message.role, message.content, dict(message.meta)) == (role, item["content"], {})
        assert message_to_items(message) == [item]
        reread = Message.from_dict(json.loads(json.dumps(message.to_dict())))
        assert message_to_items(reread) == [item]
    # anything more than that keeps its exact copy
    for item in (
        {"role": "user", "content": "hi", "type": "message"},
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"role": "tool", "content": "not a message role of the Responses API"},
    ):
        message = item_to_message(item)
        assert message.meta[ITEM_KEY] == item
        assert message_to_items(message) == [item]

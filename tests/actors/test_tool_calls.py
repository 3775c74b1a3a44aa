"""Tool-call transcripts through a registry, on both backends."""

from __future__ import annotations

import asyncio

import pytest

from protocol import InvalidMessageError, Message

pytestmark = pytest.mark.timeout(60)

CALLS = [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]


def test_append_shorthand_with_content_none(make_registry):
    registry = make_registry()
    s = registry.session("tools")
    stored = s.append("assistant", None, tool_calls=CALLS)
    assert stored.content is None and stored.tool_calls == CALLS
    s.append("tool", "12 C", tool_call_id="call_1")
    assert [m.content for m in s.transcript()] == [None, "12 C"]
    assert s.transcript()[0].to_dict()["content"] is None
    assert asyncio.run(s.append_async("assistant", None, tool_calls=CALLS)).content is None
    with pytest.raises(InvalidMessageError, match="content is missing"):
        s.append("user")
    with pytest.raises(InvalidMessageError, match="None only"):
        s.append("user", None)
    assert len(s.transcript()) == 3  # nothing written by the refused ones

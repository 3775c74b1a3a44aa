"""Protocol values: validation at construction, round trips, equality, errors."""

from __future__ import annotations

import json
import math

import pytest

from protocol import (
    DEFAULT_MAX_CONTENT_BYTES,
    CompressionOutcome,
    CompressionStatus,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidSessionIdError,
    LineageForkedError,
    Message,
    SessionEndedError,
    StoredMessage,
    TranscriptError,
    set_content_limit,
    transcripts_equal,
    validate_session_id,
)


@pytest.mark.parametrize("role", ["bot", "", "USER", None, ["user"], {"user": 1}])
def test_wrong_role_is_rejected(role):
    with pytest.raises(InvalidMessageError):
        Message(role, "x")


@pytest.mark.parametrize("content", [object(), 3, {"a": 1}, [1, 2], [{"x": math.nan}], [{"x": object()}]])
def test_non_json_content_is_rejected(content):
    with pytest.raises(InvalidMessageError) as info:
        Message("user", content)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TranscriptError)


def test_a_store_rejects_content_over_its_limit_and_writes_nothing(tmp_path):
    """The limit is the store's (``max_content_bytes``, default 1 MiB, counted in
    UTF-8 bytes): a message over it constructs, and its append raises, writing nothing."""
    from persistence import open_store

    over = Message("user", "a" * (DEFAULT_MAX_CONTENT_BYTES + 1))
    wide = Message("user", "é" * (DEFAULT_MAX_CONTENT_BYTES // 2 + 1))  # 2 bytes a character
    with open_store(str(tmp_path / "limit.db")) as store:
        store.create_session("s")
        store.append("s", [Message("user", "a" * DEFAULT_MAX_CONTENT_BYTES)])
        for message in (over, wide):
            with pytest.raises(InvalidMessageError):
                store.append("s", [message])
        assert len(store.transcript("s")) == 1
    with open_store(str(tmp_path / "wide.db"), max_content_bytes=2 * DEFAULT_MAX_CONTENT_BYTES) as store:
        store.create_session("s")
        assert len(store.append("s", [over, wide])) == 2


def test_set_content_limit_is_a_deprecated_process_wide_limit():
    with pytest.warns(DeprecationWarning, match="max_content_bytes"):
        previous = set_content_limit(10)
    try:
        Message("user", "a" * 10)
        with pytest.raises(InvalidMessageError):
            Message("user", "a" * 11)
    finally:
        with pytest.warns(DeprecationWarning):
            assert set_content_limit(previous) == 10
    # restored: no process-wide limit, so a message up to the largest limit builds
    Message("user", "a" * (DEFAULT_MAX_CONTENT_BYTES + 1))
    with pytest.raises(InvalidArgumentError), pytest.warns(DeprecationWarning):
        set_content_limit(0)


def test_meta_and_tool_calls_must_be_json():
    with pytest.raises(InvalidMessageError):
        Message("assistant", "", tool_calls=[{"f": {1, 2}}])
    with pytest.raises(InvalidMessageError):
        Message("user", "x", meta={1: "a"})
    with pytest.raises(InvalidMessageError):
        Message("user", "x", meta=["not", "a", "mapping"])


def test_openai_shape_round_trips():
    messages = [
        Message("system", "be brief"),
        Message("user", [{"type": "text", "text": "hi"}], name="ann", meta={"k": [1, 2]}),
        Message(
            "assistant", "", tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        ),
        Message("tool", "42", tool_call_id="c1"),
    ]
    for message in messages:
        assert Message.from_dict(message.to_dict()) == message
    assert Message.from_dict({"role": "assistant", "content": None}).content == ""
    assert Message.from_dict({"role": "user", "content": None}).content == ""
    with pytest.raises(InvalidMessageError):
        Message.from_dict({"role": "user", "content": "x", "bogus": 1})
    with pytest.raises(InvalidMessageError):
        Message.from_dict({"content": "x"})


def test_transcript_equality_ignores_store_fields():
    plain = [Message("user", "a"), Message("assistant", "b", meta={"x": 1})]
    stored = [
        StoredMessage("user", "a", session_id="s", seq=7, id=70, created_at=1.0),
        StoredMessage("assistant", "b", meta={"x": 1}, session_id="t", seq=9, id=3, created_at=2.0, state="compacted"),
    ]
    assert transcripts_equal(plain, stored)
    assert not transcripts_equal(plain, stored[:1])
    assert not transcripts_equal(plain, [stored[0], Message("assistant", "b")])
    assert stored[0].as_message() == plain[0]


@pytest.mark.parametrize("bad", ["", "x" * 129, " lead", "trail ", "a\nb", "nul\x00", "tab\tid", 5, None])
def test_invalid_session_ids(bad):
    with pytest.raises(InvalidSessionIdError):
        validate_session_id(bad)


@pytest.mark.parametrize("good", ["a", "x" * 128, "discord:123", "web/ü/42", "a b"])
def test_valid_session_ids(good):
    assert validate_session_id(good) == good


def test_errors_carry_structured_attributes_and_default_messages():
    ended = SessionEndedError("p", successor_id="c", end_reason="compression")
    assert (ended.session_id, ended.successor_id) == ("p", "c") and "c" in str(ended)
    forked = LineageForkedError("p", ["c1", "c2"])
    assert forked.children == ("c1", "c2")
    assert str(TranscriptError()) == "A session-actors operation failed."


def test_outcome_status_committed_flag():
    committed = {s for s in CompressionStatus if s.committed}
    assert committed == {CompressionStatus.COMPACTED, CompressionStatus.ROTATED}
    outcome = CompressionOutcome(CompressionStatus.SKIPPED, "s", reason="cooldown")
    assert outcome.reason == "cooldown" and outcome.record is None


@pytest.mark.parametrize(
    "fields",
    [
        {"content": "lone \ud800 surrogate"},
        {"content": [{"type": "text", "text": "\udfff"}]},
        {"content": "ok", "name": "\ud800"},
        {"content": "ok", "meta": {"k": "\ud800"}},
    ],
)
def test_text_that_cannot_be_stored_as_utf8_is_rejected_at_construction(fields):
    with pytest.raises(InvalidMessageError):
        Message("user", **fields)


def test_from_dict_tolerates_empty_unmodelled_openai_fields_only():
    message = Message.from_dict({"role": "assistant", "content": "hi", "refusal": None})
    assert message == Message("assistant", "hi")
    with pytest.raises(InvalidMessageError):
        Message.from_dict({"role": "assistant", "content": "hi", "refusal": "no"})


CALLS = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]


def test_tool_call_message_content_none_round_trips_as_null():
    message = Message("assistant", None, tool_calls=CALLS)
    assert message.content is None and message.text == ""
    as_dict = message.to_dict()
    assert "content" in as_dict and as_dict["content"] is None
    assert json.loads(json.dumps(as_dict))["content"] is None
    assert Message.from_dict(json.loads(json.dumps(as_dict))) == message
    assert Message.from_dict({"role": "assistant", "content": None, "tool_calls": CALLS}).content is None


@pytest.mark.parametrize(
    "role, tool_calls",
    [
        ("user", None),
        ("assistant", None),
        ("assistant", []),
        ("tool", CALLS),
        ("system", CALLS),
    ],
)
def test_content_none_is_only_for_an_assistant_message_with_tool_calls(role, tool_calls):
    with pytest.raises(InvalidMessageError, match="None only"):
        Message(role, None, tool_calls=tool_calls)


def test_from_dict_with_unknown_keys_of_mixed_types_is_typed():
    from protocol import InvalidMessageError, Message

    with pytest.raises(InvalidMessageError, match="unknown message fields"):
        Message.from_dict({"role": "user", "content": "hi", 1: "x", "other": "y"})

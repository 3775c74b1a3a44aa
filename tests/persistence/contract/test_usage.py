"""Contract: token usage recorded on messages and compactions, summed once per call."""

from __future__ import annotations

import json

import pytest

from persistence import SourceScopedStore
from protocol import (
    InvalidArgumentError,
    InvalidMessageError,
    InvalidSessionIdError,
    Message,
    SessionNotFoundError,
    Usage,
)
from tests.persistence.contract.db import execute, snapshot


def _answer(text, i, o, model="gpt-x"):
    return Message("assistant", text, usage={"input_tokens": i, "output_tokens": o, "model": model})


def test_a_message_keeps_its_usage_through_append_and_reads(store):
    store.create_session("s")
    [ask, answer] = store.append("s", [Message("user", "hi"), _answer("hello", 12, 3)])
    assert ask.usage is None and answer.usage == Usage(12, 3, "gpt-x")
    assert [m.usage for m in store.transcript("s")] == [None, Usage(12, 3, "gpt-x")]
    [again] = store.append("s", Message("assistant", "more", usage=Usage(1, 2)))
    assert store.transcript("s")[-1] == again and again.usage == Usage(1, 2)
    assert store.retract("s").usage == Usage(1, 2)


def test_usage_sums_a_lineage_per_model_with_the_compressors_share(store):
    store.create_session("s", source="web")
    store.append("s", [Message("user", "a"), _answer("b", 10, 2), Message("user", "c"), _answer("d", 20, 4, "small")])
    lease = store.acquire_lease("s", "A", 30)
    summary = Message("user", "[CONTEXT COMPACTION] ab", usage=Usage(999, 999))  # not stored: the commit's is
    record = store.commit_compaction(
        lease, watermark=2, compacted=[summary], mode="rotate", usage=Usage(100, 7, "summarizer")
    )
    assert record.usage == Usage(100, 7, "summarizer") == store.compactions("s")[0].usage
    child = record.child_session_id
    assert [m.usage for m in store.transcript(child)] == [None, None, None]  # the summary and the copies: none
    store.append(child, _answer("e", 1, 1))
    total = store.usage("s")
    assert (total.input_tokens, total.output_tokens) == (131, 14)
    assert store.usage(child) == total  # a lineage, from any of its ids
    assert total.by_model == {
        "gpt-x": Usage(11, 3, "gpt-x"),
        "small": Usage(20, 4, "small"),
        "summarizer": Usage(100, 7, "summarizer"),
    }
    assert total.compactions == Usage(100, 7)
    assert total.to_dict()["compactions"] == {"input_tokens": 100, "output_tokens": 7}
    assert store.usage(source="web") == total
    assert store.usage(source="nobody").total_tokens == 0


def test_a_branch_counts_only_its_own_calls_and_erasure_drops_a_lineage(store):
    store.create_session("s", source="a")
    store.append("s", [Message("user", "q"), _answer("r", 5, 5)])
    store.branch("s", 2, "b")
    assert store.usage("b").total_tokens == 0
    with pytest.raises(InvalidMessageError):
        _answer("r2", 3, 0, "")  # "" is not a model name
    store.append("b", _answer("r2", 3, 0, None))
    assert store.usage("b").total_tokens == 3 and store.usage().total_tokens == 13
    assert store.usage("b").by_model == {"": Usage(3, 0)}
    store.delete_session("s")
    assert store.usage().total_tokens == 3


def test_bad_usage_is_a_typed_error_and_writes_nothing(store, store_url, backend):
    store.create_session("s")
    store.append("s", Message("user", "q"))
    lease = store.acquire_lease("s", "A", 30)
    before = snapshot(backend, store_url)
    for bad in ({"input_tokens": -1}, {"input_tokens": True}, {"tokens": 3}, {"model": "a\nb"}, 5):
        with pytest.raises(InvalidMessageError):
            Message("assistant", "x", usage=bad)
        with pytest.raises(InvalidArgumentError):
            store.commit_compaction(lease, watermark=1, compacted=[Message("user", "s")], mode="in_place", usage=bad)
    with pytest.raises(InvalidMessageError):
        Message("assistant", "x", usage=Usage(1, 1, by_model={"m": Usage(1, 1)}))  # a sum, not a call
    forged = Message("assistant", "x")
    object.__setattr__(forged, "usage", {"input_tokens": 2**60})
    with pytest.raises(InvalidMessageError):
        store.append("s", forged)
    assert snapshot(backend, store_url) == before
    with pytest.raises(SessionNotFoundError):
        store.usage("nope")
    with pytest.raises(InvalidSessionIdError):
        store.usage("")
    with pytest.raises(InvalidArgumentError):
        store.usage(source="a\x00")


def test_usage_is_one_column_of_json_the_database_can_read(store, store_url, backend):
    store.create_session("s")
    store.append("s", _answer("x", 4, 2))
    [(text,)] = execute(backend, store_url, "SELECT usage FROM messages WHERE usage IS NOT NULL")
    assert Usage.coerce(json.loads(text)) == Usage(4, 2, "gpt-x")


def test_a_scoped_view_sums_its_own_source_only(store):
    store.create_session("w", source="web")
    store.append("w", _answer("x", 50, 5))
    store.create_session("d", source="discord")
    store.append("d", _answer("y", 7, 1))
    scoped = SourceScopedStore(store, "discord")
    assert scoped.usage().input_tokens == 7 == scoped.usage("d").input_tokens
    assert store.usage().input_tokens == 57

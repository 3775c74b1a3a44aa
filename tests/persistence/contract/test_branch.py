"""Contract: a branch starts a conversation of its own from a live prefix."""

from __future__ import annotations

import pytest

from protocol import (
    InvalidArgumentError,
    InvalidMetadataError,
    InvalidSessionIdError,
    Message,
    SessionExistsError,
    SessionNotFoundError,
)
from tests.persistence.contract.db import snapshot


def _seed(store):
    store.create_session("s", source="web", metadata={"user": "u1"})
    return store.append(
        "s",
        [
            Message("user", "plan a trip"),
            Message(
                "assistant",
                None,
                tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            ),
            Message("tool", "sunny", tool_call_id="c1"),
            Message("assistant", "It will be sunny.", meta={"k": 1}),
            Message("user", "book it", key="k1"),
        ],
    )


def test_a_branch_copies_the_live_prefix_into_a_conversation_of_its_own(store):
    original = _seed(store)
    info = store.branch("s", 4, "s-alt")
    assert info.branch_of == ("s", 4) and info.parent_session_id is None
    assert info.source == "web" and dict(info.metadata) == {"user": "u1"}
    assert info.incarnation != store.get_session("s").incarnation
    copied = store.transcript("s-alt")
    assert [(m.seq, m.role, m.content, m.tool_call_id, dict(m.meta)) for m in copied] == [
        (o.seq, o.role, o.content, o.tool_call_id, dict(o.meta)) for o in original[:4]
    ]
    assert copied[1].tool_calls == original[1].tool_calls
    assert all(m.origin_id is None and m.key is None for m in copied)
    assert store.transcript("s") == original  # the session branched from is untouched
    assert store.get_session("s").branch_of is None
    assert store.children("s") == [] and store.resolve("s") == "s"  # not a continuation
    # the branch goes on by itself
    assert store.append("s-alt", Message("user", "cancel instead"))[0].seq == 5
    assert [m.content for m in store.transcript("s")][-1] == "book it"
    listed = {i.id: i.branch_of for i in store.sessions()}
    assert listed == {"s": None, "s-alt": ("s", 4)}
    # keys belong to conversations: the original's key is free in the branch
    assert store.append("s-alt", Message("user", "again", key="k1"))[0].seq == 6
    # erasing the original leaves the branch (and where it came from)
    store.delete_session("s")
    assert store.get_session("s-alt").branch_of == ("s", 4)
    assert len(store.transcript("s-alt")) == 6


def test_a_branch_takes_metadata_and_starts_after_a_compaction(store):
    _seed(store)
    lease = store.acquire_lease("s", "A", 30)
    store.commit_compaction(lease, watermark=4, compacted=[Message("user", "summary")], mode="in_place")
    live = store.transcript("s")
    info = store.branch("s", live[0].seq, "b", metadata={"from": "summary"})
    assert dict(info.metadata) == {"from": "summary"}
    assert [m.content for m in store.transcript("b")] == ["summary"]


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        (("s", 2, "b"), {}, InvalidArgumentError),  # cuts the call from its result
        (("s", 99, "b"), {}, InvalidArgumentError),
        (("s", 0, "b"), {}, InvalidArgumentError),
        (("s", "1", "b"), {}, InvalidArgumentError),
        (("s", 1, "s"), {}, InvalidArgumentError),
        (("s", 1, "s2"), {"metadata": {"k": object()}}, InvalidMetadataError),
        (("s", 1, " bad"), {}, InvalidSessionIdError),
        (("nope", 1, "b"), {}, SessionNotFoundError),
        (("s", 1, "other"), {}, SessionExistsError),
    ],
)
def test_bad_branches_are_typed_and_write_nothing(store, store_url, backend, args, kwargs, error):
    _seed(store)
    store.create_session("other")
    before = snapshot(backend, store_url)
    with pytest.raises(error):
        store.branch(*args, **kwargs)
    assert snapshot(backend, store_url) == before


def test_an_archived_prefix_is_not_a_live_one(store):
    first = _seed(store)
    lease = store.acquire_lease("s", "A", 30)
    store.commit_compaction(lease, watermark=first[-1].seq, compacted=[Message("user", "summary")], mode="in_place")
    with pytest.raises(InvalidArgumentError, match="not a live message"):
        store.branch("s", 1, "b")

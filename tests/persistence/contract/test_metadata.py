"""Contract: session metadata, listing filters and keyset paging."""

from __future__ import annotations

import pytest

from protocol import (
    InvalidArgumentError,
    InvalidMessageError,
    InvalidMetadataError,
    Message,
    SessionInfo,
    SessionNotFoundError,
)
from tests.persistence.contract.db import snapshot


def _nested(depth: int) -> dict:
    """A mapping ``depth`` levels deep, counting itself as level 1."""
    value: object = "leaf"
    for _ in range(depth - 1):
        value = [value]
    return {"k": value}


def test_metadata_is_stored_returned_and_merged(store):
    info = store.create_session("s", metadata={"tier": "gold", "n": 1, "tags": ["a", {"b": None}]})
    assert info.metadata == {"tier": "gold", "n": 1, "tags": ["a", {"b": None}]}
    assert store.get_session("s").metadata == info.metadata
    assert store.create_session("plain").metadata == {}
    updated = store.update_metadata("s", {"n": None, "user": "u1", "tier": "silver", "absent": None})
    assert updated.metadata == {"tier": "silver", "tags": ["a", {"b": None}], "user": "u1"}
    assert store.get_session("s").metadata == updated.metadata
    assert store.update_metadata("s", {}).metadata == updated.metadata


def test_a_rotation_child_inherits_metadata(store):
    store.create_session("s", metadata={"user": "u1"})
    store.append("s", [Message("user", "a"), Message("assistant", "b")])
    lease = store.acquire_lease("s", "h", 30)
    record = store.commit_compaction(lease, watermark=2, compacted=[Message("user", "sum")], mode="rotate")
    assert store.get_session(record.child_session_id).metadata == {"user": "u1"}
    store.update_metadata(record.child_session_id, {"user": "u2"})
    assert store.get_session("s").metadata == {"user": "u1"}  # a copy, not a link


@pytest.mark.parametrize(
    "bad",
    [
        ["not", "a", "mapping"],
        "text",
        {1: "non-str key"},
        {"k": object()},
        {"k": float("nan")},
        {"k": {"deep": float("inf")}},
        {"nul\x00key": 1},
        {"k": "nul\x00value"},
        {"k": [{"nested\x00": 1}]},
        {"k": "\ud800"},
        _nested(65),
    ],
)
def test_bad_metadata_is_a_typed_error_and_writes_nothing(store, store_url, backend, bad):
    store.create_session("s", metadata={"keep": True})
    before = snapshot(backend, store_url)
    with pytest.raises(InvalidMetadataError) as caught:
        store.create_session("t", metadata=bad)
    assert isinstance(caught.value, InvalidArgumentError) and isinstance(caught.value, InvalidMessageError)
    with pytest.raises(InvalidMetadataError):
        store.update_metadata("s", bad)
    assert snapshot(backend, store_url) == before


def test_metadata_64_levels_deep_is_accepted(store):
    assert store.create_session("s", metadata=_nested(64)).metadata == _nested(64)
    deep = _nested(100_000)  # far past the recursion limit: still a typed error
    with pytest.raises(InvalidMetadataError):
        store.update_metadata("s", deep)


def test_update_metadata_of_unknown_session(store):
    with pytest.raises(SessionNotFoundError):
        store.update_metadata("missing", {"a": 1})


def _ids(infos: list[SessionInfo]) -> list[str]:
    return [i.id for i in infos]


def test_sessions_filter_by_source_and_metadata_as_json(store):
    store.create_session("int", source="discord", metadata={"n": 1, "tier": "gold"})
    store.create_session("float", source="web", metadata={"n": 1.0, "tier": "Gold"})
    store.create_session("bool", source="discord", metadata={"n": True, "tier": None})
    store.create_session("text", source="web", metadata={"n": "1"})
    store.create_session("none", source="web")
    assert _ids(store.sessions(source="discord")) == ["bool", "int"]
    assert _ids(store.sessions(metadata={"n": 1})) == ["float", "int"]  # numbers by value
    assert _ids(store.sessions(metadata={"n": 1.0})) == ["float", "int"]
    assert _ids(store.sessions(metadata={"n": True})) == ["bool"]  # booleans never equal numbers
    assert _ids(store.sessions(metadata={"n": "1"})) == ["text"]  # strings exact
    assert _ids(store.sessions(metadata={"tier": "gold"})) == ["int"]
    assert _ids(store.sessions(metadata={"tier": None})) == ["none", "text", "bool"]  # missing or null
    assert _ids(store.sessions(metadata={"n": 1, "tier": "gold"})) == ["int"]  # every key
    assert _ids(store.sessions(metadata={"n": 1}, source="web")) == ["float"]
    assert _ids(store.sessions(metadata={"n": 2})) == []
    assert len(store.sessions(metadata={})) == 5
    store.end_session("int", "done")
    assert _ids(store.sessions(live=True, metadata={"n": 1})) == ["float"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"metadata": {"k": [1]}},
        {"metadata": {"k": {"a": 1}}},
        {"metadata": ["k"]},
        {"metadata": {"k": "nul\x00"}},
        {"source": ""},
        {"source": 3},
        {"live": 1},
        {"after": 3},
        {"limit": 0},
    ],
)
def test_sessions_rejects_bad_filters(store, kwargs):
    store.create_session("s")
    with pytest.raises(InvalidArgumentError):
        store.sessions(**kwargs)


def test_keyset_paging_visits_every_session_once_newest_first(store):
    ids = [f"s{i:02d}" for i in range(11)]
    for sid in ids:
        store.create_session(sid)
    everything = store.sessions()
    assert _ids(everything) == ids[::-1]
    pages, after = [], None
    while True:
        page = store.sessions(limit=3, after=after)
        if not page:
            break
        pages.append(_ids(page))
        after = page[-1]
    assert [len(p) for p in pages] == [3, 3, 3, 2]
    assert [i for page in pages for i in page] == _ids(everything)
    assert _ids(store.sessions(limit=3, after="s05")) == ["s04", "s03", "s02"]  # by id too


def test_paging_survives_erasure_of_the_last_session_seen(store):
    for sid in ("a", "b", "c", "d"):
        store.create_session(sid)
    page = store.sessions(limit=2)
    assert _ids(page) == ["d", "c"]
    store.delete_session("c")
    assert _ids(store.sessions(after=page[-1])) == ["b", "a"]  # a SessionInfo still works
    with pytest.raises(SessionNotFoundError):
        store.sessions(after="c")  # an id must still exist


def test_paging_with_equal_created_at_breaks_ties_by_id(store, store_url, backend):
    from tests.persistence.contract.db import execute

    for sid in ("b", "a", "c"):
        store.create_session(sid)
    execute(backend, store_url, "UPDATE sessions SET created_at = 1000")
    assert _ids(store.sessions()) == ["c", "b", "a"]
    first = store.sessions(limit=1)
    assert _ids(store.sessions(after=first[-1])) == ["b", "a"]
    assert _ids(store.sessions(after="b")) == ["a"]

"""Contract: appends are durable, gapless, ordered and atomic; bad input writes nothing."""

from __future__ import annotations

import json
import math
import threading

import pytest

from persistence import open_store
from protocol import (
    InvalidArgumentError,
    InvalidMessageError,
    InvalidSessionIdError,
    Message,
    ReadOnlyStoreError,
    SessionEndedError,
    SessionNotFoundError,
    StoredMessage,
    transcripts_equal,
)
from tests.persistence.contract.db import execute, snapshot


def test_append_is_durable_when_it_returns(store, store_url):
    store.create_session("s1")
    sent = [Message("user", "hello"), Message("assistant", [{"type": "text", "text": "hi"}])]
    stored = store.append("s1", sent)
    # another, independent store instance sees the rows without any close/flush
    with_other = open_store(store_url)
    try:
        assert transcripts_equal(with_other.transcript("s1"), sent)
    finally:
        with_other.close()
    store.close()
    reopened = open_store(store_url)
    try:
        durable = reopened.transcript("s1")
        assert [m.id for m in durable] == [m.id for m in stored]
        assert transcripts_equal(durable, sent)
    finally:
        reopened.close()


def test_stored_fields_round_trip(store):
    store.create_session("s1")
    message = Message(
        "assistant",
        "calling",
        name="bot",
        tool_calls=[{"id": "c1", "type": "function"}],
        meta={"synthetic": True, "n": 3},
    )
    tool = Message("tool", "result", tool_call_id="c1")
    returned = store.append("s1", [message, tool])
    read = store.transcript("s1")
    assert read == returned
    assert all(isinstance(m, StoredMessage) and m.state == "live" and m.origin_id is None for m in read)
    assert read[0].tool_calls == [{"id": "c1", "type": "function"}]
    assert dict(read[0].meta) == {"synthetic": True, "n": 3}
    assert read[1].tool_call_id == "c1"


def test_tool_call_content_none_round_trips_as_null(store, store_url, backend):
    store.create_session("s1")
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    returned = store.append("s1", Message("assistant", None, tool_calls=calls))
    assert returned[0].content is None
    assert store.transcript("s1")[0].content is None
    assert store.transcript("s1")[0].to_dict() == {"role": "assistant", "content": None, "tool_calls": calls}
    rows = execute(backend, store_url, "SELECT content FROM messages WHERE session_id = 's1'")
    assert rows == [("null",)]  # JSON null, not an empty string
    lease = store.acquire_lease("s1", "A", 30)
    store.commit_compaction(
        lease, watermark=returned[0].seq, mode="in_place", compacted=[Message("assistant", None, tool_calls=calls)]
    )
    assert store.transcript("s1")[0].content is None


def test_seqs_gapless_and_ids_increasing_under_threads(store):
    for sid in ("a", "b"):
        store.create_session(sid)
    per_thread, threads = 15, 6
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            for i in range(per_thread):
                store.append("a" if n % 2 else "b", Message("user", f"t{n}-{i}"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert not errors
    for sid in ("a", "b"):
        rows = store.transcript(sid)
        assert [m.seq for m in rows] == list(range(1, len(rows) + 1))
        assert len(rows) == per_thread * threads // 2
        # ids follow commit order, and so do seqs
        assert [m.id for m in rows] == sorted(m.id for m in rows)
        # each thread's own messages keep their order
        for n in range(threads):
            own = [m.content for m in rows if m.content.startswith(f"t{n}-")]
            assert own == sorted(own, key=lambda c: int(c.split("-")[1]))
    all_ids = [m.id for sid in ("a", "b") for m in store.transcript(sid)]
    assert len(set(all_ids)) == len(all_ids)


#: Text contents the store encodes by its fast path (plain ASCII) and by the encoder
#: (anything to escape, or not ASCII).
TRICKY_TEXTS = [
    "",
    "plain ascii text",
    'a "quoted" word',
    "back\\slash",
    "tab\there",
    "new\nline",
    "nul\x00byte",
    "del\x7fchar",
    "\x1f unit separator",
    "café",
    "emoji 👩‍💻 with a joiner",
    "line\u2028separator",
    "x" * 5000,
    *(f"ascii {code} [{chr(code)}]" for code in range(128)),
]


def test_appended_values_are_the_rows_the_database_holds(store, store_url, backend):
    """Every field of what append returns (and transcript reads) is the row's, in place."""
    store.create_session("other")
    store.append("other", [Message("user", "ids and seqs differ from here on")] * 3)
    store.create_session("s1")
    sent = [
        Message("system", "be brief"),
        Message("user", [{"type": "text", "text": "hi"}], name="ann", meta={"k": [1, {"n": None}]}),
        Message("assistant", None, tool_calls=[{"id": "c1", "type": "function"}]),
        Message("tool", "12 C", tool_call_id="c1"),
        *(Message("user", text) for text in TRICKY_TEXTS),
    ]
    returned = store.append("s1", sent[:3]) + store.append("s1", sent[3:])
    columns = (
        "session_id",
        "seq",
        "id",
        "created_at",
        "state",
        "origin_id",
        "role",
        "name",
        "tool_call_id",
        "content",
        "tool_calls",
        "meta",
    )
    rows = execute(
        backend, store_url, f"SELECT {', '.join(columns)} FROM messages WHERE session_id = 's1' ORDER BY seq"
    )
    assert len(rows) == len(sent) == len(returned)
    for message, stored, row in zip(sent, returned, rows):
        in_db = dict(zip(columns, row))
        assert (
            stored.session_id,
            stored.seq,
            stored.id,
            stored.created_at,
            stored.state,
            stored.origin_id,
            stored.role,
            stored.name,
            stored.tool_call_id,
        ) == tuple(in_db[c] for c in columns[:9])
        assert json.loads(in_db["content"]) == stored.content == message.content
        assert (None if in_db["tool_calls"] is None else json.loads(in_db["tool_calls"])) == stored.tool_calls
        assert json.loads(in_db["meta"]) == dict(stored.meta) == dict(message.meta)
    assert store.transcript("s1") == returned
    assert transcripts_equal(returned, sent)


def test_ids_strictly_increase_store_wide(store):
    store.create_session("a")
    store.create_session("b")
    ids = []
    for i in range(6):
        ids += [m.id for m in store.append("ab"[i % 2], [Message("user", str(i)), Message("assistant", "x")])]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_multi_message_append_is_all_or_nothing(store, store_url, backend):
    store.create_session("s1")
    store.append("s1", Message("user", "first"))
    before = snapshot(backend, store_url)
    bad = Message("user", "fine")
    object.__setattr__(bad, "role", "wizard")  # fault injection: bypass construction checks
    with pytest.raises(InvalidMessageError):
        store.append("s1", [Message("user", "ok"), bad])
    with pytest.raises(InvalidMessageError):
        store.append("s1", [Message("user", "ok"), {"role": "user", "content": "dict"}])  # type: ignore[list-item]
    assert snapshot(backend, store_url) == before
    assert [m.seq for m in store.append("s1", Message("assistant", "next"))] == [2]


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda m: object.__setattr__(m, "role", "robot"), id="wrong-role"),
        pytest.param(lambda m: object.__setattr__(m, "content", {"not": "a list"}), id="content-dict"),
        pytest.param(lambda m: object.__setattr__(m, "content", [{"x": math.nan}]), id="content-nan"),
        pytest.param(lambda m: object.__setattr__(m, "content", [{"x": object()}]), id="content-object"),
        pytest.param(lambda m: object.__setattr__(m, "meta", {"k": {1, 2}}), id="meta-set"),
        pytest.param(lambda m: object.__setattr__(m, "content", "\ud800"), id="lone-surrogate"),
    ],
)
def test_invalid_message_writes_nothing(store, store_url, backend, mutate):
    store.create_session("s1")
    before = snapshot(backend, store_url)
    message = Message("user", "valid")
    mutate(message)
    with pytest.raises(InvalidMessageError):
        store.append("s1", message)
    assert snapshot(backend, store_url) == before


def test_constructor_rejects_wrong_role_and_non_json():
    with pytest.raises(InvalidMessageError):
        Message("wizard", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        Message("user", [{"x": object()}])


def test_oversized_content_rejected_by_store_limit(store_url, backend):
    small = open_store(store_url, max_content_bytes=64)
    try:
        small.create_session("s1")
        before = snapshot(backend, store_url)
        with pytest.raises(InvalidMessageError):
            small.append("s1", [Message("user", "ok"), Message("user", "é" * 33)])  # 66 bytes
        with pytest.raises(InvalidMessageError):
            small.append("s1", Message("user", [{"type": "text", "text": "y" * 64}]))
        with pytest.raises(InvalidMessageError):
            small.append("s1", [Message("user", "ok"), Message("user", "y" * 65)])  # ASCII: 65 bytes
        assert snapshot(backend, store_url) == before
        assert [m.seq for m in small.append("s1", Message("user", "é" * 32))] == [1]  # exactly 64 bytes
        assert [m.seq for m in small.append("s1", Message("user", "y" * 64))] == [2]
    finally:
        small.close()


BAD_IDS = ["", "x" * 129, "bad\x00id", "tab\tid", "new\nline", " lead", "trail ", None, 42]


@pytest.mark.parametrize("bad_id", BAD_IDS, ids=repr)
def test_invalid_session_ids_rejected_everywhere(store, store_url, backend, bad_id):
    store.create_session("ok")
    before = snapshot(backend, store_url)
    calls = [
        lambda: store.create_session(bad_id),
        lambda: store.create_session("ok2", parent_session_id=bad_id if bad_id is not None else ""),
        lambda: store.get_session(bad_id),
        lambda: store.append(bad_id, Message("user", "x")),
        lambda: store.transcript(bad_id),
        lambda: store.archive(bad_id),
        lambda: store.end_session(bad_id, "done"),
        lambda: store.acquire_lease(bad_id, "h", 10),
        lambda: store.arm_cooldown(bad_id, 10, "e"),
        lambda: store.resolve(bad_id),
    ]
    for call in calls:
        with pytest.raises(InvalidSessionIdError):
            call()
    assert snapshot(backend, store_url) == before


def test_boundary_session_ids_accepted(store):
    for sid in ("x", "y" * 128, "discord:123/äöü", "inner space"):
        assert store.create_session(sid).id == sid
        assert store.append(sid, Message("user", "hi"))[0].session_id == sid


def test_unknown_session_is_not_found_everywhere(store, store_url, backend):
    before = snapshot(backend, store_url)
    calls = [
        lambda: store.append("nope", Message("user", "x")),
        lambda: store.transcript("nope"),
        lambda: store.archive("nope"),
        lambda: store.children("nope"),
        lambda: store.resolve("nope"),
        lambda: store.end_session("nope", "done"),
        lambda: store.acquire_lease("nope", "h", 5),
        lambda: store.current_lease("nope"),
        lambda: store.cooldown("nope"),
        lambda: store.arm_cooldown("nope", 5, None),
        lambda: store.clear_cooldown("nope"),
        lambda: store.restore_cooldown("nope", None),
        lambda: store.compactions("nope"),
        lambda: store.create_session("child", parent_session_id="nope"),
    ]
    for call in calls:
        with pytest.raises(SessionNotFoundError):
            call()
    assert store.get_session("nope") is None
    assert snapshot(backend, store_url) == before


def test_empty_append_writes_nothing(store, store_url, backend):
    store.create_session("s1")
    before = snapshot(backend, store_url)
    assert store.append("s1", []) == []
    assert snapshot(backend, store_url) == before
    with pytest.raises((InvalidMessageError, InvalidArgumentError)):
        store.append("s1", "just a string")  # type: ignore[arg-type]


def test_an_empty_append_has_one_answer_on_every_backend(store, store_url, backend):
    """It writes nothing, so nothing holds it back: [] for a live session, under another
    holder's turn too; the error of any append for an unknown, re-created or ended one;
    ``append_nowait`` of nothing queues nothing (False: call ``append``); a read-only
    store refuses it."""
    store.create_session("s")
    store.open_turn("s", "another holder", 30)
    store.create_session("ended")
    store.end_session("ended", "done")
    before = snapshot(backend, store_url)
    assert store.append("s", []) == []
    assert store.append_nowait("s", [], lambda *_: None) is False
    with pytest.raises(SessionNotFoundError):
        store.append("nope", [])
    with pytest.raises(SessionNotFoundError):
        store.append("s", [], incarnation="another conversation")
    with pytest.raises(SessionEndedError):
        store.append("ended", ())
    assert snapshot(backend, store_url) == before
    readonly = open_store(store_url, readonly=True)
    try:
        with pytest.raises(ReadOnlyStoreError):
            readonly.append("s", [])
    finally:
        readonly.close()


def test_transcript_limit_is_the_latest_live_messages_in_seq_order(store):
    store.create_session("s")
    store.append("s", [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(12)])
    lease = store.acquire_lease("s", "h", 30)
    store.commit_compaction(lease, watermark=6, compacted=[Message("user", "summary")], mode="in_place")
    store.release_lease(lease)
    store.retract("s")  # the newest row leaves the live transcript: a limit skips it
    whole = store.transcript("s")
    assert [m.content for m in whole] == ["summary", *(f"m{i}" for i in range(6, 11))]
    for limit in (1, 3, len(whole), len(whole) + 5):
        latest = store.transcript("s", limit=limit)
        assert [m.seq for m in latest] == [m.seq for m in whole][-limit:]
    info = store.get_session("s")
    assert store.transcript("s", incarnation=info.incarnation, limit=2) == whole[-2:]


@pytest.mark.parametrize("limit", [0, -1, True, 2.0, "3"])
def test_transcript_limit_must_be_a_positive_int(store, limit):
    store.create_session("s")
    with pytest.raises(InvalidArgumentError):
        store.transcript("s", limit=limit)

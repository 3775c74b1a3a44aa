"""Contract: idempotency keys. A key is stored once per conversation (every session
of a lineage, live or archived rows), whichever process appends it, however often."""

from __future__ import annotations

import threading

import pytest

from protocol import InvalidMessageError, Message
from tests.persistence.contract.db import execute, snapshot


def _contents(store, sid="s"):
    return [m.content for m in store.transcript(sid)]


def test_a_retried_append_returns_the_stored_message_and_writes_nothing(store, store_url, backend):
    store.create_session("s")
    first = store.append("s", Message("user", "hello", key="discord:1"))[0]
    assert first.key == "discord:1"
    before = snapshot(backend, store_url)
    again = store.append("s", Message("user", "hello (redelivered)", key="discord:1"))[0]
    assert again == first  # same id, seq, content: the stored one
    assert snapshot(backend, store_url) == before
    assert [m.key for m in store.transcript("s")] == ["discord:1"]


def test_a_batch_stores_each_key_once_and_answers_in_order(store):
    store.create_session("s")
    store.append("s", Message("user", "old", key="a"))
    out = store.append(
        "s",
        [
            Message("user", "a again", key="a"),
            Message("user", "b", key="b"),
            Message("user", "b twice", key="b"),
            Message("assistant", "no key"),
        ],
    )
    assert [m.content for m in out] == ["old", "b", "b", "no key"]
    assert out[1].id == out[2].id
    assert _contents(store) == ["old", "b", "no key"]


def test_keys_survive_rotation_retract_and_compaction(store):
    store.create_session("s")
    store.append("s", [Message("user", "q1", key="k1"), Message("assistant", "a1"), Message("user", "q2", key="k2")])
    lease = store.acquire_lease("s", "C", 30)
    record = store.commit_compaction(lease, watermark=2, compacted=[Message("user", "summary")], mode="rotate")
    child = record.child_session_id
    compacted = store.append(child, Message("user", "q1 retried", key="k1"))[0]
    assert (compacted.session_id, compacted.content, compacted.state) == ("s", "q1", "compacted")
    carried = store.append(child, Message("user", "q2 retried", key="k2"))[0]
    assert (carried.session_id, carried.content, carried.state, carried.key) == (child, "q2", "live", "k2")
    assert _contents(store, child) == ["summary", "q2"]
    store.append(child, Message("user", "q3", key="k3"))
    assert store.retract(child).key == "k3"
    retracted = store.append(child, Message("user", "q3 retried", key="k3"))[0]
    assert retracted.state == "retracted"  # stored (archived): not appended again
    assert _contents(store, child) == ["summary", "q2"]


def test_keys_are_per_conversation_and_erasure_frees_them(store, store_url, backend):
    for sid in ("s", "t"):
        store.create_session(sid)
    store.append("s", Message("user", "in s", key="same"))
    assert store.append("t", Message("user", "in t", key="same"))[0].session_id == "t"
    store.delete_session("s")
    assert execute(backend, store_url, "SELECT count(*) FROM message_keys")[0][0] == 1
    store.create_session("s")
    assert store.append("s", Message("user", "new conversation", key="same"))[0].content == "new conversation"


def test_concurrent_appends_of_one_key_store_it_once(store_url):
    from persistence import open_store

    stores = [open_store(store_url) for _ in range(4)]  # separate connections and writers
    try:
        stores[0].create_session("s")
        start = threading.Barrier(8)
        answers: list[int] = []
        lock = threading.Lock()

        def append(st, i):
            start.wait(10)
            for n in range(10):
                got = st.append("s", Message("user", f"try {i}", key=f"msg-{n}"))[0]
                with lock:
                    answers.append((n, got.id))

        threads = [threading.Thread(target=append, args=(stores[i % 4], i)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        transcript = stores[0].transcript("s")
        assert sorted(m.key for m in transcript) == sorted(f"msg-{n}" for n in range(10))
        by_key = {m.key: m.id for m in transcript}
        assert all(by_key[f"msg-{n}"] == got for n, got in answers)  # every caller got the stored one
    finally:
        for st in stores:
            st.close()


@pytest.mark.parametrize("key", ["", " padded", "x" * 201, "bad\x00nul", "line\nbreak", 7])
def test_bad_keys_are_typed(key):
    with pytest.raises(InvalidMessageError):
        Message("user", "hi", key=key)


def test_keys_round_trip_through_dicts():
    m = Message("user", "hi", key="telegram:42")
    assert m.to_dict()["key"] == "telegram:42"
    assert Message.from_dict(m.to_dict()) == m
    assert "key" not in Message("user", "hi").to_dict()

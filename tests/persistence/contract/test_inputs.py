"""Contract: every bad input is a typed error, alike on both backends, and writes nothing.

Session ids that spoof logs and terminals, NUL in any text the store keeps, JSON
nested past 64 levels (100k deep included: never `RecursionError`), durations and
counts outside their documented range; and ids the store derives are always valid.
"""

from __future__ import annotations

import dataclasses

import pytest

from persistence._integrity import check_store
from protocol import (
    Cooldown,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidSessionIdError,
    Message,
    validate_session_id,
)
from protocol._checks import MAX_DURATION_S, MAX_JSON_DEPTH
from tests.persistence.contract.db import snapshot

SPOOFING = {
    "NUL": "a\x00b",
    "escape": "a\x1b[2Jb",
    "DEL": "a\x7fb",
    "C1 control": "a\x85b",
    "line separator": "a\u2028b",
    "paragraph separator": "a\u2029b",
    "arabic letter mark": "a\u061cb",
    "LRM": "a\u200eb",
    "RLM": "a\u200fb",
    "LRE": "a\u202ab",
    "RLO": "a\u202eb",
    "LRI": "a\u2066b",
    "PDI": "a\u2069b",
    "zero-width space": "a\u200bb",
    "BOM": "\ufeffab",
    "lone surrogate": "a\ud800b",
    "leading space": " ab",
    "trailing newline": "ab\n",
    "trailing ideographic space": "ab\u3000",
    "empty": "",
    "129 characters": "x" * 129,
}


def nested(depth: int) -> object:
    """A value ``depth`` levels deep (the top list is level 1), built without recursion."""
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("bad", SPOOFING.values(), ids=SPOOFING.keys())
def test_spoofing_session_ids_are_refused_everywhere(store, store_url, backend, bad):
    store.create_session("ok")
    before = snapshot(backend, store_url)
    calls = [
        lambda: store.create_session(bad),
        lambda: store.create_session("child", parent_session_id=bad),
        lambda: store.append(bad, Message("user", "x")),
        lambda: store.get_session(bad),
        lambda: store.transcript(bad),
        lambda: store.acquire_lease(bad, "h", 30),
        lambda: store.arm_cooldown(bad, 10, None),
    ]
    for call in calls:
        with pytest.raises(InvalidSessionIdError):
            call()
    assert snapshot(backend, store_url) == before


def test_zero_width_joiner_ids_are_allowed(store):
    family = "chat:\U0001f468\u200d\U0001f469\u200d\U0001f467"
    store.create_session(family)
    store.append(family, Message("user", "hi"))
    assert [s.id for s in store.sessions()] == [family]
    assert store.transcript(family)[0].session_id == family


@pytest.mark.parametrize(
    "parent",
    [
        "p" * 128,
        "a" * 111 + " " + "b" * 16,  # the cut for the suffix lands right after a space
        "x" * 100 + "~g7-0123456789ab" + "y" * 12,  # looks like a derived id, but is not one
        "\U0001f468\u200d\U0001f469" * 42 + "zz",
    ],
    ids=["128 chars", "space at the cut", "suffix-like", "emoji"],
)
def test_rotation_children_of_any_valid_parent_are_valid(store, parent):
    validate_session_id(parent)
    store.create_session(parent)
    store.append(parent, [Message("user", "one"), Message("assistant", "two")])
    current = parent
    for _ in range(3):  # a lineage: each child is itself rotated
        lease = store.acquire_lease(current, "h", 30)
        record = store.commit_compaction(
            lease, watermark=store.transcript(current)[-1].seq, compacted=[Message("user", "sum")], mode="rotate"
        )
        child = record.child_session_id
        assert validate_session_id(child) == child and len(child) <= 128
        store.append(child, Message("assistant", "after"))
        current = child
    assert store.resolve(parent) == current
    assert len(store.sessions()) == 4
    assert check_store(store).ok


NUL_ARGUMENTS = {
    "source": lambda s: s.create_session("new", source="web\x00"),
    "end reason": lambda s: s.end_session("s", "done\x00"),
    "holder": lambda s: s.acquire_lease("s", "host\x00", 30),
    "cooldown error": lambda s: s.arm_cooldown("s", 10, "boom\x00"),
    "snapshot error": lambda s: s.restore_cooldown("s", Cooldown("s", 1.0, "x\x00")),
    "compressor": lambda s: s.commit_compaction(
        s.acquire_lease("s", "h", 30),
        watermark=1,
        compacted=[Message("user", "x")],
        mode="in_place",
        compressor="llm\x00",
    ),
}


@pytest.mark.parametrize("call", NUL_ARGUMENTS.values(), ids=NUL_ARGUMENTS.keys())
def test_nul_in_stored_text_is_an_invalid_argument(store, store_url, backend, call):
    store.create_session("s")
    store.append("s", Message("user", "hi"))
    before = snapshot(backend, store_url)
    with pytest.raises(InvalidArgumentError, match="NUL"):
        call(store)
    after = snapshot(backend, store_url)
    after["leases"] = before["leases"]  # the compressor case takes a lease first, by design
    assert after == before


@pytest.mark.parametrize("field", ["name", "tool_call_id"])
def test_nul_in_message_fields_is_an_invalid_message(field):
    with pytest.raises(InvalidMessageError, match="NUL"):
        Message("tool", "x", **{field: "call\x00"})


def test_nul_in_content_and_meta_round_trips_alike(store):
    store.create_session("s")  # JSON text escapes it: both backends keep it exactly
    sent = Message("user", "a\x00b", meta={"k\x00": "v\x00"})
    store.append("s", sent)
    got = store.transcript("s")[0]
    assert (got.content, dict(got.meta)) == ("a\x00b", {"k\x00": "v\x00"})


@pytest.mark.parametrize("field", ["content", "tool_calls", "meta"])
def test_json_nests_at_most_64_levels(store, field):
    def message(depth: int) -> Message:  # the field's value is exactly ``depth`` levels deep
        if field == "content":  # a list (1) of dicts (2), then the rest
            return Message("user", [{"type": "text", "text": "t", "deep": nested(depth - 2)}])
        if field == "tool_calls":
            return Message("assistant", "", tool_calls=nested(depth))
        return Message("user", "x", meta={"deep": nested(depth - 1)})

    store.create_session("s")
    deepest = message(MAX_JSON_DEPTH)
    store.append("s", deepest)
    assert store.transcript("s")[0].as_message() == deepest
    for depth in (MAX_JSON_DEPTH + 1, 100_000):
        with pytest.raises(InvalidMessageError, match="64 levels"):
            message(depth)


@pytest.mark.parametrize("field", ["content", "meta"])
def test_wide_shallow_json_with_brackets_in_its_strings_is_stored(store, field):
    """Far more opening brackets than 64 (sibling containers, and brackets inside
    strings) but only four levels deep: the bound is on nesting, not on how many
    containers or brackets a value holds."""
    parts = [{"type": "text", "text": "[{" * 100, "extra": [[]]} for _ in range(70)]
    message = Message("user", parts) if field == "content" else Message("user", "x", meta={"parts": parts})
    store.create_session("s")
    store.append("s", message)
    assert store.transcript("s")[0].as_message() == message


def test_a_content_list_deepened_after_construction_is_refused_by_the_store(store, store_url, backend):
    store.create_session("s")
    parts = [{"type": "text", "text": "t"}]
    message = Message("user", parts)
    parts[0]["deep"] = nested(100_000)  # the list is the caller's: mutable after the check
    before = snapshot(backend, store_url)
    with pytest.raises(InvalidMessageError, match="64 levels"):
        store.append("s", message)
    assert snapshot(backend, store_url) == before


BAD_SECONDS = [0, -1, float("inf"), float("nan"), 1e300, 10**400, MAX_DURATION_S + 1, True, "5"]


@pytest.mark.parametrize("bad", BAD_SECONDS, ids=repr)
def test_lease_ttls_are_durations(store, bad):
    store.create_session("s")
    with pytest.raises(InvalidArgumentError):
        store.acquire_lease("s", "h", bad)
    lease = store.acquire_lease("s", "h", MAX_DURATION_S)  # 30 days is the longest
    with pytest.raises(InvalidArgumentError):
        store.renew_lease(lease, bad)


@pytest.mark.parametrize("bad", [-1, float("inf"), 1e300, MAX_DURATION_S + 1, True], ids=repr)
def test_cooldown_lengths_are_durations_or_zero(store, bad):
    store.create_session("s")
    with pytest.raises(InvalidArgumentError):
        store.arm_cooldown("s", bad, None)
    assert store.cooldown("s") is None
    store.arm_cooldown("s", 0, None)  # 0 is documented: no cooldown


def test_counts_out_of_range_are_invalid_arguments(store, store_url, backend):
    store.create_session("s")
    store.append("s", Message("user", "hi"))
    lease = store.acquire_lease("s", "h", 30)
    before = snapshot(backend, store_url)
    for watermark in (2**63, 2**70, -1, True):
        with pytest.raises(InvalidArgumentError):
            store.commit_compaction(lease, watermark=watermark, compacted=[Message("user", "x")], mode="in_place")
    forged = dataclasses.replace(lease, token=2**70)
    for call in (lambda: store.renew_lease(forged, 30), lambda: store.release_lease(forged)):
        with pytest.raises(InvalidArgumentError):
            call()
    assert snapshot(backend, store_url) == before

"""Contract: search over live and archived text, and what each compaction did."""

from __future__ import annotations

import threading

import pytest

from actors.compressors import HeadTailCompressor
from protocol import (
    CompactionNotFoundError,
    InvalidArgumentError,
    InvalidSessionIdError,
    Message,
    SessionNotFoundError,
)
from tests.persistence.contract.db import snapshot

SUMMARY = Message("user", "[CONTEXT COMPACTION] the user planned a trip to Lisbon")


def _hits(store, query, **kw):
    return [(h.session_id, h.seq, h.role, h.archived) for h in store.search(query, **kw)]


def test_search_finds_string_and_multipart_text_with_a_marked_snippet(store):
    store.create_session("s")
    store.append(
        "s",
        [
            Message("user", "Which ferry goes to Tangier tomorrow morning?"),
            Message("assistant", [{"type": "output_text", "text": "The FERRY leaves at nine."}, {"type": "x"}]),
            Message("assistant", None, tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f"}}]),
            Message("tool", "ferry timetable: 09:00", tool_call_id="c1"),
            Message("user", "thanks"),
        ],
    )
    hits = store.search("ferry")
    assert [(h.seq, h.role) for h in hits] == [(4, "tool"), (2, "assistant"), (1, "user")]  # live: newest first
    assert all(h.session_id == "s" and not h.archived for h in hits)
    by_seq = {h.seq: h.snippet for h in hits}
    assert "[ferry]" in by_seq[1] and "Tangier" in by_seq[1]
    assert "[FERRY]" in by_seq[2]
    assert _hits(store, "ferry tangier") == [("s", 1, "user", False)]  # every word required
    assert store.search("lisbon") == []


def test_query_text_is_matched_never_parsed(store):
    store.create_session("s")
    store.append("s", [Message("user", 'compile with -O2 and "quotes" OR NEAR(x) a*b'), Message("user", "plain")])
    for query in ['"quotes"', "-O2", "OR NEAR(x)", "a*b", 'with "', "NOT plain"]:
        hits = _hits(store, query)
        assert hits == ([("s", 1, "user", False)] if query != "NOT plain" else []), query


def test_search_covers_the_lineage_and_finds_a_carried_message_once(store):
    store.create_session("trip", source="web")
    early = store.append("trip", [Message("user", "I want to visit Lisbon"), Message("assistant", "Lisbon is lovely")])
    lease = store.acquire_lease("trip", "A", 30)
    store.append("trip", Message("user", "book the Lisbon hotel"))  # the tail, carried into the child
    record = store.commit_compaction(lease, watermark=early[-1].seq, compacted=[SUMMARY], mode="rotate")
    child = record.child_session_id
    store.create_session("other", source="discord")
    store.append("other", Message("user", "Lisbon again, elsewhere"))

    lineage = _hits(store, "lisbon", session_id="trip")
    summary, carried = (child, 1, "user", False), (child, 2, "user", False)
    assert sorted(lineage) == sorted([summary, carried, ("trip", 1, "user", True), ("trip", 2, "assistant", True)])
    assert sorted(lineage) == sorted(_hits(store, "lisbon", session_id=child))  # from either end
    assert sorted(_hits(store, "lisbon", session_id="trip", archived=False)) == [summary, carried]
    assert _hits(store, "hotel") == [(child, 2, "user", False)]  # the tail: once, at its copy
    assert _hits(store, "lisbon", source="discord") == [("other", 1, "user", False)]
    assert len(store.search("lisbon")) == 5
    assert len(store.search("lisbon", limit=2)) == 2


def test_erased_retracted_and_pruned_text_is_not_found(store):
    store.create_session("s")
    store.append("s", [Message("user", "keep apricot"), Message("user", "secret banana")])
    store.retract("s")
    assert _hits(store, "banana") == []
    store.create_session("e")
    store.append("e", Message("user", "erased apricot"))
    assert len(store.search("apricot")) == 2
    store.delete_session("e")
    assert _hits(store, "apricot") == [("s", 1, "user", False)]
    lease = store.acquire_lease("s", "A", 30)
    store.commit_compaction(lease, watermark=1, compacted=[Message("user", "summary")], mode="in_place")
    assert _hits(store, "apricot") == [("s", 1, "user", True)]
    store.prune_archive(older_than_s=0)
    assert store.search("apricot") == []
    assert _hits(store, "summary") == [("s", 3, "user", False)]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"query": ""}, InvalidArgumentError),
        ({"query": "   "}, InvalidArgumentError),
        ({"query": "!!! ** --"}, InvalidArgumentError),
        ({"query": "x" * 1001}, InvalidArgumentError),
        ({"query": "a\x00b"}, InvalidArgumentError),
        ({"query": 7}, InvalidArgumentError),
        ({"query": "a", "limit": 0}, InvalidArgumentError),
        ({"query": "a", "limit": 1001}, InvalidArgumentError),
        ({"query": "a", "limit": True}, InvalidArgumentError),
        ({"query": "a", "archived": 1}, InvalidArgumentError),
        ({"query": "a", "source": ""}, InvalidArgumentError),
        ({"query": "a", "session_id": " bad "}, InvalidSessionIdError),
        ({"query": "a", "session_id": "missing"}, SessionNotFoundError),
    ],
)
def test_bad_search_arguments_are_typed_errors_and_write_nothing(store, store_url, backend, kwargs, error):
    store.create_session("s")
    store.append("s", Message("user", "a"))
    before = snapshot(backend, store_url)
    kwargs = dict(kwargs)
    query = kwargs.pop("query")
    with pytest.raises(error):
        store.search(query, **kwargs)
    assert snapshot(backend, store_url) == before


def test_compaction_detail_in_place(store):
    store.create_session("s")
    first = store.append("s", [Message("user", "u1"), Message("assistant", "a1")])
    lease = store.acquire_lease("s", "A", 30)
    tail = store.append("s", Message("user", "late"))
    record = store.commit_compaction(
        lease, watermark=first[-1].seq, compacted=[SUMMARY, Message("assistant", "ok")], mode="in_place"
    )
    detail = store.compaction_detail(record.id)
    assert detail.record == record and detail.complete
    assert [m.id for m in detail.replaced] == [m.id for m in first]
    assert all(m.state == "compacted" for m in detail.replaced)
    assert [m.content for m in detail.summary] == [SUMMARY.content, "ok"]
    assert [m.origin_id for m in detail.carried] == [tail[0].id]
    live = store.transcript("s")
    assert [m.id for m in (*detail.summary, *detail.carried)] == [m.id for m in live]
    # the next compaction replaces the summary and the carried row
    lease = store.acquire_lease("s", "A", 30)
    second = store.commit_compaction(lease, watermark=live[-1].seq, compacted=[Message("user", "s2")], mode="in_place")
    again = store.compaction_detail(second.id)
    assert [m.id for m in again.replaced] == [m.id for m in live]
    assert again.carried == () and [m.content for m in again.summary] == ["s2"]
    store.prune_archive(older_than_s=0)
    pruned = store.compaction_detail(record.id)
    assert [(m.id, m.state, m.content) for m in pruned.replaced] == [(m.id, "pruned", "") for m in first]


def test_compaction_detail_rotate(store):
    store.create_session("r")
    first = store.append("r", [Message("user", "u1"), Message("assistant", "a1")])
    lease = store.acquire_lease("r", "A", 30)
    tail = store.append("r", [Message("user", "t1"), Message("assistant", "t2")])
    record = store.commit_compaction(lease, watermark=first[-1].seq, compacted=[SUMMARY], mode="rotate")
    detail = store.compaction_detail(record.id)
    assert [m.id for m in detail.replaced] == [m.id for m in first]
    assert [(m.session_id, m.seq, m.content) for m in detail.summary] == [(record.child_session_id, 1, SUMMARY.content)]
    assert [(m.session_id, m.origin_id) for m in detail.carried] == [(record.child_session_id, t.id) for t in tail]


def test_compaction_detail_of_unknown_or_erased_records(store):
    store.create_session("s")
    store.append("s", Message("user", "u"))
    record = store.commit_compaction(
        store.acquire_lease("s", "A", 30), watermark=1, compacted=[SUMMARY], mode="in_place"
    )
    with pytest.raises(CompactionNotFoundError) as info:
        store.compaction_detail(record.id + 1000)
    assert info.value.compaction_id == record.id + 1000
    for bad in (0, -1, "1", 1.0, True, None):
        with pytest.raises(InvalidArgumentError):
            store.compaction_detail(bad)
    store.delete_session("s")
    with pytest.raises(CompactionNotFoundError):
        store.compaction_detail(record.id)


def test_escaped_text_is_found_by_its_words_and_never_fails_an_append(store):
    store.create_session("s")
    store.append(
        "s",
        [
            Message("user", 'first line\nsecond\tline "quoted" back\\slash'),
            Message("user", "nul\x00inside and a literal \\u0000 too"),
            Message("user", [{"type": "text", "text": "part with nul\x00here"}]),
            Message("user", [{"type": "text", "text": "plain part"}, {"type": "image_url", "image_url": "x"}]),
        ],
    )
    assert [h.seq for h in store.search("second")] == [1]
    assert [h.seq for h in store.search("quoted")] == [1]
    assert [h.seq for h in store.search("inside")] == [2]
    assert [h.seq for h in store.search("plain part")] == [4]
    assert [h.seq for h in store.search("here")] == [3]
    assert [h.seq for h in store.search("image_url")] == []  # a part's keys are not its text


TRICKY = [
    "Don't re-run the build_step, it's 2x slower",
    "ÄRGER über Straße and CAFÉ au lait",
    "e-mail: bob@example.com (urgent!!)",
    "tab\tseparated\nlines and   spaces",
    "numbers 42 and 4.2 and v1.2.3",
]
QUERIES = [
    "don",
    "t",
    "run",
    "build",
    "step",
    "2x",
    "ärger",
    "ÄRGER",
    "straße",
    "café",
    "cafe",
    "email",
    "mail",
    "bob",
    "example com",
    "urgent",
    "separated",
    "lines",
    "42",
    "v1",
    "3",
    "zzz",
]


def test_live_and_archived_rows_match_the_same_words(store):
    """The live rows are matched outside the index: the same queries find the same
    messages before and after they are compacted away."""
    store.create_session("s")
    store.append("s", [Message("user", text) for text in TRICKY])
    live = {q: sorted(h.seq for h in store.search(q, limit=100)) for q in QUERIES}
    assert live["zzz"] == [] and live["ärger"] == live["ÄRGER"] == [2] and live["cafe"] == []
    lease = store.acquire_lease("s", "A", 30)
    store.commit_compaction(lease, watermark=len(TRICKY), compacted=[Message("user", "summary")], mode="in_place")
    archived = {q: sorted(h.seq for h in store.search(q, limit=100)) for q in QUERIES}
    assert archived == live
    assert all(h.archived for q in QUERIES for h in store.search(q))


def test_archived_hits_come_first_best_first_then_live_newest_first(store):
    store.create_session("s")
    store.append("s", [Message("user", "kiwi"), Message("user", "kiwi kiwi kiwi and more")])
    lease = store.acquire_lease("s", "A", 30)
    store.commit_compaction(lease, watermark=2, compacted=[Message("user", "summary")], mode="in_place")
    store.append("s", [Message("user", "a kiwi"), Message("user", "another kiwi")])
    hits = store.search("kiwi")
    assert [(h.seq, h.archived) for h in hits] == [(1, True), (2, True), (5, False), (4, False)] or [
        (h.seq, h.archived) for h in hits
    ] == [(2, True), (1, True), (5, False), (4, False)]
    archived = [h.rank for h in hits if h.archived]
    assert archived == sorted(archived)
    assert [(h.seq, h.archived) for h in store.search("kiwi", limit=3)][2] == (5, False)
    assert [h.seq for h in store.search("kiwi", archived=False)] == [5, 4]


def test_a_filtered_search_finds_old_matches_behind_many_newer_ones(store):
    """Archived matches are ranked among the newest 2,000; filters apply before that cut."""
    for sid, source, count in (("old", "b", 1), ("busy", "a", 2050)):
        store.create_session(sid, source=source)
        store.append(sid, [Message("user", f"needle {n}") for n in range(count)])
        lease = store.acquire_lease(sid, "A", 30)
        store.commit_compaction(lease, watermark=count, compacted=[Message("user", "summary")], mode="in_place")
    assert [(h.session_id, h.seq) for h in store.search("needle", source="b")] == [("old", 1)]
    assert [(h.session_id, h.seq) for h in store.search("needle", session_id="old")] == [("old", 1)]
    assert len(store.search("needle", limit=1000)) == 1000


def _compact_head_tail(store, session_id, mode):
    """One head-tail compaction of the whole live transcript (the compressor keeps
    the system prompt, the first ask and the last message verbatim)."""
    live = store.transcript(session_id)
    kept = HeadTailCompressor(keep_last=1).compress(live, target_tokens=200, cancel=threading.Event())
    lease = store.acquire_lease(session_id, "A", 30)
    return store.commit_compaction(lease, watermark=live[-1].seq, compacted=kept, mode=mode)


@pytest.mark.parametrize("mode", ["in_place", "rotate"])
def test_a_message_a_head_tail_compressor_kept_twice_is_found_once(store, mode):
    store.create_session("s")
    first = store.append("s", [Message("system", "be brief"), Message("user", "plan a walk in Sintra")])
    store.append("s", [Message("assistant", f"step {n}") for n in range(4)])
    tip = _compact_head_tail(store, "s", mode).child_session_id or "s"
    store.append(tip, [Message("assistant", f"more {n}") for n in range(4)])
    tip = _compact_head_tail(store, tip, mode).child_session_id or tip

    hits = store.search("sintra")
    assert [(h.session_id, h.archived) for h in hits] == [(tip, False)]  # the newest copy, once
    live = store.transcript(tip)
    ask = next(m for m in live if m.text == "plan a walk in Sintra")
    assert hits[0].seq == ask.seq
    sessions = ["s", *(k.id for k in store.children("s"))]
    sessions += [k.id for k in store.children(sessions[-1])] if mode == "rotate" else []
    archived = {m.id: m for sid in sessions for m in store.archive(sid)}
    original, depth = ask, 0  # each copy names the row it repeats, down to the appended one
    while original.origin_id is not None:
        original, depth = archived[original.origin_id], depth + 1
    assert (original.id, original.state, depth) == (first[1].id, "compacted", 2)
    assert [m.content for m in store.archive("s")[:2]] == ["be brief", "plan a walk in Sintra"]


def test_only_a_verbatim_repeat_of_an_archived_row_is_its_copy(store):
    store.create_session("s")
    rows = store.append("s", [Message("user", "same"), Message("user", "same"), Message("user", "gone")])
    store.retract("s")  # "gone" is retracted, never compacted
    (last,) = store.append("s", Message("user", "last"))
    lease = store.acquire_lease("s", "A", 30)
    compacted = [
        Message("user", "same"),
        Message("user", "same"),
        Message("user", "same"),  # a third: two originals only
        Message("assistant", "same"),  # another role
        Message("user", "same", meta={"k": 1}),  # other meta
        Message("user", "gone"),
    ]
    store.commit_compaction(lease, watermark=last.seq, compacted=compacted, mode="in_place")
    origins = [m.origin_id for m in store.transcript("s")]
    assert origins == [rows[0].id, rows[1].id, None, None, None, None]

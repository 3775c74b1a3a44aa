"""Contract: search finds identifiers whole and by their parts, on every backend.

Order and ticket numbers, e-mail addresses and paths are found by the whole token
and by each of its runs of letters and digits; a version by the whole token. A term
of several words (``ZX-4417``: ``zx 4417``) is found where its words stand next to
each other, in order. One corpus, one set of hits per query, archived and live.
"""

from __future__ import annotations

from persistence import open_store
from persistence._migrations import load_migrations
from protocol import Message
from tests.persistence.contract.db import execute, plant_schema

#: Messages of the session "past", compacted away before the archived searches.
PAST = {
    "parcel": "my parcel number is ZX-4417",
    "apart": "the zx team closed 4417 tickets",
    "jira": "ticket JIRA-123 is blocked",
    "jira_other": "JIRA-1234 was closed yesterday",
    "email": "write to ana@example.com about the refund",
    "path": "the error is in /var/log/app.log, not in src/main.py",
    "version": "we shipped v2.1.3 on friday",
    "version_other": "v2.3.1 comes out next week",
    "plain": "a parcel arrived for the team",
    # where a tsvector's positions stop: past its 16,383rd word, and a word's 257th time
    "long": "filler " * 17_000 + "the order QA-7781 shipped",
    "repeated": "qa and " * 300 + "the order QA-9902 shipped",
}
#: Messages of the session "now", left live.
NOW = {
    "live_parcel": "the ZX-4417 label is printed",
    "live_email": "bob@example.org forwarded it to ana@example.com",
    "live_path": "edit src/main.py (line 12) after JIRA-123",
    "live_version": "pin v2.1.3, not v2",
}
#: Each query and the messages it finds.
EXPECTED = {
    "ZX-4417": {"parcel", "live_parcel"},
    "zx-4417": {"parcel", "live_parcel"},
    "4417": {"parcel", "apart", "live_parcel"},
    "zx": {"parcel", "apart", "live_parcel"},
    "4417-ZX": set(),
    "ZX-4417 parcel": {"parcel"},
    "parcel": {"parcel", "plain"},
    "JIRA-123": {"jira", "live_path"},
    "123": {"jira", "live_path"},
    "JIRA-1234": {"jira_other"},
    "jira": {"jira", "jira_other", "live_path"},
    "ana@example.com": {"email", "live_email"},
    "ana": {"email", "live_email"},
    "example": {"email", "live_email"},
    "example.com": {"email", "live_email"},
    "com": {"email", "live_email"},
    "bob@example.org": {"live_email"},
    "ana@example.org": set(),
    "/var/log/app.log": {"path"},
    "var/log/app.log": {"path"},
    "app.log": {"path"},
    "app": {"path"},
    "log": {"path"},
    "src/main.py": {"path", "live_path"},
    "main": {"path", "live_path"},
    "py": {"path", "live_path"},
    "v2.1.3": {"version", "live_version"},
    "v2.3.1": {"version_other"},
    "v2": {"version", "version_other", "live_version"},
    "QA-7781": {"long"},
    "QA-9902": {"repeated"},
    "9999": set(),
    "ZX-9999": set(),
}
SUMMARY = Message("user", "[CONTEXT COMPACTION] summary")


def _corpus(store) -> dict[tuple[str, int], str]:
    """The corpus appended: each message's key by (session, seq)."""
    keys = {}
    for sid, texts in (("past", PAST), ("now", NOW)):
        store.create_session(sid)
        stored = store.append(sid, [Message("user", text) for text in texts.values()])
        keys |= {(sid, m.seq): key for m, key in zip(stored, texts, strict=True)}
    return keys


def _found(store, keys, query):
    """(key, archived) of every hit of query."""
    hits = store.search(query, limit=100)
    found = {(keys[(h.session_id, h.seq)], h.archived) for h in hits}
    assert len(found) == len(hits), query  # no message twice
    return found


def test_identifiers_are_found_whole_and_by_their_parts_live_and_archived(store):
    keys = _corpus(store)
    live = {query: _found(store, keys, query) for query in EXPECTED}
    assert live == {query: {(key, False) for key in expected} for query, expected in EXPECTED.items()}
    lease = store.acquire_lease("past", "A", 30)
    store.commit_compaction(lease, watermark=len(PAST), compacted=[SUMMARY], mode="in_place")
    archived = {query: _found(store, keys, query) for query in EXPECTED}
    assert archived == {query: {(key, key in PAST) for key in expected} for query, expected in EXPECTED.items()}


def test_a_snippet_marks_the_whole_identifier_or_the_part(store):
    keys = _corpus(store)
    lease = store.acquire_lease("past", "A", 30)
    store.commit_compaction(lease, watermark=len(PAST), compacted=[SUMMARY], mode="in_place")
    snippets = {(keys[(h.session_id, h.seq)], q): h.snippet for q in ("ZX-4417", "4417") for h in store.search(q)}
    assert snippets[("parcel", "ZX-4417")] == "my parcel number is [ZX-4417]"  # archived
    assert snippets[("live_parcel", "ZX-4417")] == "the [ZX-4417] label is printed"  # live
    assert snippets[("parcel", "4417")] == "my parcel number is ZX-[4417]"
    assert snippets[("live_parcel", "4417")] == "the ZX-[4417] label is printed"


def test_an_archive_written_before_the_words_were_indexed_is_found_by_identifiers(store_url, backend):
    """Migrating indexes the archive already there by its words: from the schema before
    the identifiers migration (a backend without one: before its search index)."""
    versions = {m.name: m.version for m in load_migrations("sqlite" if backend == "sqlite" else "postgres")}
    plant_schema(backend, store_url, versions.get("identifiers", versions["search"]) - 1)
    for sql in (
        "INSERT INTO sessions (id, source, created_at, next_seq, live_from) VALUES ('old', 'api', 1, 3, 3)",
        "INSERT INTO messages (session_id, seq, role, content, created_at)"
        """ VALUES ('old', 1, 'user', '"my parcel number is ZX-4417"', 1),"""
        """        ('old', 2, 'user', '"mail ana@example.com"', 1)""",
        "UPDATE messages SET state = 'compacted', archived_at = 2",
    ):
        execute(backend, store_url, sql)
    store = open_store(store_url)
    try:
        for query, seqs in (("ZX-4417", [1]), ("4417", [1]), ("ana@example.com", [2]), ("example", [2])):
            assert [(h.seq, h.archived) for h in store.search(query)] == [(s, True) for s in seqs], query
    finally:
        store.close()

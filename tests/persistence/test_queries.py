"""One name per query meaning: a statement both backends run is named alike in both
dialects' .sql files, so a reader (or a change) finds its twin by name. Each dialect's
own statements are listed here with the reason the other has none. Every named block
opens with a one-line description."""

from __future__ import annotations

from importlib import resources

import pytest

from persistence._queries import block_descriptions, load_queries

#: Statements only SQLite runs, and why PostgreSQL has no twin.
SQLITE_ONLY = {
    "advance_live_next_seq": "a lone append reserves its seqs, checks included (PostgreSQL: append_batch)",
    "live_next_seqs": "group commit on remembered counters (PostgreSQL: append_batch)",
    "insert_messages_head": "a group-commit INSERT built of repeated rows (PostgreSQL: append_batch)",
    "insert_messages_row": "a group-commit INSERT built of repeated rows (PostgreSQL: append_batch)",
    "insert_checked_messages_head": "a group-commit INSERT built of repeated rows (PostgreSQL: append_batch)",
    "insert_checked_messages_tail": "a group-commit INSERT built of repeated rows (PostgreSQL: append_batch)",
    "insert_message": "rows inserted one at a time (PostgreSQL: insert_messages, set-based)",
    "first_taken": "create_sessions names the first id taken (PostgreSQL: create_sessions answers per row)",
    "sessions_by_id": "create_sessions reads back the rows it made (PostgreSQL: RETURNING)",
    "carry_turn": "a rotation copies the turn lease after inserting the child (PostgreSQL: insert_child)",
    "checksummed_rows": "fsck recomputes checksums in Python (PostgreSQL: damaged_rows, in the database)",
    "mark_branch": "a branch records its origin after its insert (PostgreSQL: insert_branch)",
    "next_turn_token": "turn tokens from the counters table (PostgreSQL: the turn_tokens sequence)",
    "fence_turn_tokens": "a store's unsynced turn opens draw above it (PostgreSQL: opens stay durable)",
    "search_archive_in": "FTS5 searched within a JSON id list (PostgreSQL: search_archive takes an id array)",
}

#: Statements only PostgreSQL runs, and why SQLite has no twin.
POSTGRES_ONLY = {
    "append_batch": "a whole batch in one set-based statement, locked rows skipped",
    "insert_messages": "set-based inserts (SQLite: insert_message)",
    "copy_tail": "a set-based tail copy (SQLite: insert_message, a row at a time)",
    "insert_child": "a rotation's child row with its parent's turn lease (SQLite: carry_turn)",
    "insert_branch": "a branch row with its origin (SQLite: mark_branch)",
    "create_sessions": "plain creates group-committed, one row each",
    "damaged_rows": "checksums compared by the database (SQLite: checksummed_rows)",
    "clock": "the server's clock decides leases (SQLite: the process's)",
    "current_schema": "a store is a schema (SQLite: a file)",
    "migration_lock": "an advisory lock serializes migrations (SQLite: the write lock)",
    "lock_session": "row locks (SQLite: the file's one write lock)",
    "lock_lineage_sessions": "row locks (SQLite: the file's one write lock)",
    "lock_lineage_leases": "row locks (SQLite: the file's one write lock)",
    "listen_compactions": "LISTEN/NOTIFY across hosts (SQLite: one host, polled)",
    "listen_turns": "LISTEN/NOTIFY across hosts (SQLite: one host, polled)",
    "notify_compaction": "LISTEN/NOTIFY across hosts (SQLite: one host, polled)",
    "notify_turn_closed": "LISTEN/NOTIFY across hosts (SQLite: one host, polled)",
    "holder_keepalives": "a holder's session lock across hosts (SQLite: one host, /proc)",
    "lock_holder": "a holder's session lock across hosts (SQLite: one host, /proc)",
    "record_holder": "a holder's session lock across hosts (SQLite: one host, /proc)",
    "forget_holder": "a holder's session lock across hosts (SQLite: one host, /proc)",
    "holder_alive": "a holder's session lock across hosts (SQLite: one host, /proc)",
}


@pytest.fixture(scope="module")
def names() -> dict[str, set[str]]:
    return {dialect: set(load_queries(dialect)) for dialect in ("sqlite", "postgres")}


def test_both_dialects_name_each_shared_statement_alike(names):
    sqlite, postgres = names["sqlite"], names["postgres"]
    assert sqlite - set(SQLITE_ONLY) == postgres - set(POSTGRES_ONLY), (
        "a statement both backends run must have one name in both .sql files "
        f"(only in SQLite: {sorted(sqlite - postgres - set(SQLITE_ONLY))}, "
        f"only in PostgreSQL: {sorted(postgres - sqlite - set(POSTGRES_ONLY))})"
    )


@pytest.mark.parametrize("file", ["queries.sql", "recall.sql"])
def test_the_shared_files_name_the_same_statements_in_both_dialects(file):
    """A dialect's own statements live in files of their own (own.sql, holders.sql, ...):
    the shared files define the same names, so each has its twin beside it."""
    defined = {
        dialect: set(block_descriptions(resources.files("persistence").joinpath(dialect, file).read_text("utf-8")))
        for dialect in ("sqlite", "postgres")
    }
    assert defined["sqlite"] == defined["postgres"], sorted(defined["sqlite"] ^ defined["postgres"])


def test_the_dialect_only_lists_name_statements_that_exist(names):
    assert set(SQLITE_ONLY) <= names["sqlite"] - names["postgres"]
    assert set(POSTGRES_ONLY) <= names["postgres"] - names["sqlite"]
    assert all(SQLITE_ONLY.values()) and all(POSTGRES_ONLY.values())


def test_every_named_block_opens_with_a_description():
    undescribed = [
        f"{dialect}/{entry.name}: {name}"
        for dialect in ("sqlite", "postgres")
        for entry in resources.files("persistence").joinpath(dialect).iterdir()
        if entry.name.endswith(".sql")
        for name, description in block_descriptions(entry.read_text("utf-8")).items()
        if not description
    ]
    assert undescribed == [], "each -- name: line is followed by a one-line -- description"


def test_a_description_is_not_sent_with_its_statement():
    text = "-- name: one\n-- Says what it does.\n-- More on why.\nSELECT 1\n-- a comment stays\n"
    assert block_descriptions(text) == {"one": "Says what it does."}
    assert load_queries("sqlite")["get_session"].startswith("SELECT")

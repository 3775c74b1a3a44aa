"""Shared persistence helpers: derived child ids, named SQL blocks, migrations, statements."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persistence._migrations import latest_version, load_migrations, pending_migrations
from persistence._queries import load_queries, parse_named_blocks
from persistence._rows import derive_child_id, message_params
from persistence.sqlite._schema import split_statements
from protocol import (
    ConfigurationError,
    InvalidMessageError,
    InvalidSessionIdError,
    Message,
    SchemaVersionError,
    validate_session_id,
)


def _valid(s: str) -> bool:
    try:
        validate_session_id(s)
    except InvalidSessionIdError:
        return False
    return True


session_ids = st.text(min_size=1, max_size=128).filter(_valid)


@settings(max_examples=200, deadline=None)
@given(parent=session_ids, epoch=st.integers(min_value=1, max_value=10**9))
def test_derived_child_ids_are_valid_deterministic_and_distinct(parent, epoch):
    child = derive_child_id(parent, epoch)
    assert validate_session_id(child) == child and len(child) <= 128
    assert child == derive_child_id(parent, epoch)
    assert child != parent
    assert child != derive_child_id(parent, epoch + 1)


def test_derived_child_ids_of_long_parents_differ_by_parent():
    a, b = "x" * 127 + "a", "x" * 127 + "b"
    assert derive_child_id(a, 1) != derive_child_id(b, 1)


def test_derived_child_ids_do_not_grow_along_a_lineage():
    session_id = "discord:123"
    for generation in range(1, 60):
        session_id = derive_child_id(session_id, 2)
        assert session_id.startswith(f"discord:123~g{generation}-")
        assert len(session_id) <= len("discord:123") + 20


def test_named_blocks_parse_and_reject_duplicates():
    text = "ignored preamble\n-- name: one\nSELECT 1\n-- a comment stays\n\n-- name: two\nSELECT 2;\n"
    assert parse_named_blocks(text) == {"one": "SELECT 1\n-- a comment stays", "two": "SELECT 2;"}
    with pytest.raises(ConfigurationError):
        parse_named_blocks("-- name: a\nSELECT 1\n-- name: a\nSELECT 2")
    with pytest.raises(ConfigurationError):
        parse_named_blocks("-- name: empty\n\n-- name: b\nSELECT 1")


def test_dialect_queries_load():
    queries = load_queries("sqlite")
    for name in ("insert_message", "fence_lease", "acquire_lease", "arm_cooldown", "live_messages"):
        assert queries[name].strip()
    with pytest.raises(ConfigurationError):
        load_queries("no-such-dialect")


def test_migrations_are_numbered_and_versions_checked():
    migrations = load_migrations("sqlite")
    assert [m.version for m in migrations] == list(range(1, latest_version("sqlite") + 1))
    assert pending_migrations("sqlite", 0) == list(migrations)
    assert pending_migrations("sqlite", latest_version("sqlite")) == []
    with pytest.raises(SchemaVersionError):
        pending_migrations("sqlite", latest_version("sqlite") + 1)


def test_split_statements_keeps_triggers_whole():
    script = (
        "-- comment\nCREATE TABLE t (x);\n"
        "CREATE TRIGGER tr AFTER INSERT ON t BEGIN\n  UPDATE t SET x = 1;\n  SELECT 1;\nEND;\n"
        "-- trailing comment\n"
    )
    statements = split_statements(script)
    assert len(statements) == 2 and statements[1].startswith("CREATE TRIGGER") and statements[1].endswith("END;")
    with pytest.raises(ConfigurationError):
        split_statements("CREATE TABLE t (x")


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(st.text(), st.text(st.characters(max_codepoint=127))).filter(_storable))
def test_text_content_column_is_the_encoders_json(text):
    """Text content is stored as exactly the JSON the encoder writes (ASCII or not,
    escapes or not), and its size is counted in UTF-8 bytes."""
    expected = json.dumps(text, ensure_ascii=False, separators=(",", ":"))
    assert message_params(Message("user", text), None)["content"] == expected
    size = len(text.encode("utf-8"))
    assert message_params(Message("user", text), max(1, size))["content"] == expected
    if size:
        with pytest.raises(InvalidMessageError):
            message_params(Message("user", text), size - 1)  # one byte short


def test_derived_child_ids_stay_valid_whatever_the_parents_generation_counter():
    for width in range(1, 115):  # every counter width a valid parent id can hold
        suffix = f"~g{'9' * width}-0123456789ab"
        for parent in (suffix, ("r" * 128 + suffix)[-128:]):
            child = derive_child_id(parent, 1)
            assert validate_session_id(child) == child and len(child) <= 128 and child != parent, (width, parent)

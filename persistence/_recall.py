"""Search and compaction detail, shared by every backend: argument checks, the
FTS5 query text, and rows made into protocol values."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from protocol import CompactionDetail, CompactionRecord, InvalidArgumentError, SearchHit, StoredMessage
from protocol._checks import check_count, check_text

from ._rows import RowLike, checked_session_id, stored_message_from_row

__all__ = ["MAX_QUERY_CHARS", "SearchArgs", "check_search", "detail_from_rows", "fts5_query", "hit_from_row"]

#: The longest query `Store.search` takes, in characters.
MAX_QUERY_CHARS = 1000
MAX_HITS = 1000


class SearchArgs(NamedTuple):
    query: str
    session_id: str | None
    source: str | None
    archived: bool
    limit: int


def check_search(query: object, session_id: object, source: object, archived: object, limit: object) -> SearchArgs:
    """`Store.search`'s arguments, checked (`InvalidArgumentError` otherwise)."""
    text = check_text(query, "query")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidArgumentError(f"query must be at most {MAX_QUERY_CHARS} characters, got {len(text)}")
    if not any(ch.isalnum() for ch in text):
        raise InvalidArgumentError(f"query must hold at least one letter or digit, got {query!r}")
    sid = None if session_id is None else checked_session_id(session_id)
    if source is not None:
        check_text(source, "source")
    if not isinstance(archived, bool):
        raise InvalidArgumentError(f"archived must be a bool, got {archived!r}")
    count = check_count(limit, "limit", minimum=1, maximum=MAX_HITS)
    return SearchArgs(text, sid, source, archived, count)  # type: ignore[arg-type]


def fts5_query(query: str) -> str:
    """Every word of ``query`` as a quoted FTS5 string, all of them required: a user's
    text is matched, never parsed as FTS5 syntax (``"``, ``*``, ``NEAR``, ``-``)."""
    words = [w.replace('"', '""') for w in query.split()]
    return " ".join(f'"{w}"' for w in words if any(ch.isalnum() for ch in w))


def hit_from_row(row: RowLike) -> SearchHit:
    return SearchHit(
        session_id=row["session_id"],
        seq=row["seq"],
        role=row["role"],
        archived=row["state"] != "live",
        snippet=row["snippet"] or "",
        rank=float(row["rank"]),
    )


def detail_from_rows(
    record: CompactionRecord,
    row: RowLike,
    rows_in: Callable[[str, int, int], Sequence[Any]],
    legacy_replaced: Callable[[], Sequence[Any]],
) -> CompactionDetail:
    """A `CompactionDetail` from its compactions ``row``. ``rows_in(session, first,
    last)`` reads a seq range; a record from before the store kept its ranges
    (``written_from`` NULL) reads its replaced rows with ``legacy_replaced``."""
    if row["written_from"] is None:
        replaced = _messages(legacy_replaced())
        return CompactionDetail(record, replaced, (), (), complete=False)
    archived = [r for r in rows_in(record.session_id, row["replaced_from"], record.watermark)]
    replaced = _messages(r for r in archived if r["state"] in ("compacted", "pruned"))
    target = record.child_session_id or record.session_id
    first, count = row["written_from"], row["summary_count"]
    written = _messages(rows_in(target, first, first + count + record.tail_count - 1))
    return CompactionDetail(record, replaced, written[:count], written[count:])


def _messages(rows: Any) -> tuple[StoredMessage, ...]:
    return tuple(stored_message_from_row(r) for r in rows)

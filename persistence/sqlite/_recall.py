"""Reading the archive back on SQLite: full-text search (FTS5) and what one
compaction did. The store methods (`RecallMethods`, mixed into `SqliteStore`)
run read transactions only: the archive's index is kept by triggers in the schema,
and the live rows, which no index holds, are read and matched here."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from protocol import CompactionDetail, CompactionNotFoundError, SearchHit, Usage
from protocol._checks import check_count

from .._recall import (
    SearchArgs,
    check_search,
    detail_from_rows,
    fts5_query,
    hit_from_row,
    live_hit,
    prefilter_words,
)
from .._rows import compaction_from_row
from .._usage import check_usage_scope, usage_from_rows
from ._lifecycle import lineage_ids

__all__ = ["RecallMethods"]

Queries = Mapping[str, str]
T = TypeVar("T")


def search(conn: sqlite3.Connection, q: Queries, args: SearchArgs) -> list[SearchHit]:
    """The archive's hits (ranked by the index, each term a phrase) first, then the
    live rows' (newest first, matched by `live_hit`), ``args.limit`` in all."""
    ids = None if args.session_id is None else json.dumps(lineage_ids(conn, q, args.session_id))
    params = {
        "query": fts5_query(args.terms),
        "source": args.source,
        "ids": ids,
        "limit": args.limit,
    }
    hits = []
    if args.archived:
        archive = q["search_archive"] if ids is None else q["search_archive_in"]
        hits = [hit_from_row(r) for r in conn.execute(archive, params)]
    if len(hits) >= args.limit:  # the archive filled the page: no live row is read
        return hits
    params["words"] = prefilter_words(args.words)
    live = q["search_live"] if ids is None else q["search_live_in"]
    for row in conn.execute(live, params):
        hit = live_hit(row, args.terms)
        if hit is not None:
            hits.append(hit)
            if len(hits) >= args.limit:
                break
    return hits


def compaction_detail(conn: sqlite3.Connection, q: Queries, compaction_id: int) -> CompactionDetail | None:
    row = conn.execute(q["get_compaction"], {"id": compaction_id}).fetchone()
    if row is None:
        return None
    record = compaction_from_row(row)

    def rows_in(session_id: str, first: int, last: int) -> list[Any]:
        return conn.execute(q["rows_in_range"], {"session_id": session_id, "first": first, "last": last}).fetchall()

    def legacy() -> list[Any]:
        params = {"session_id": record.session_id, "last": record.watermark, "id": record.id}
        return conn.execute(q["legacy_replaced_rows"], params).fetchall()

    return detail_from_rows(record, row, rows_in, legacy)


def usage(conn: sqlite3.Connection, q: Queries, session_id: str | None, source: str | None) -> Usage:
    ids = None if session_id is None else json.dumps(lineage_ids(conn, q, session_id))
    return usage_from_rows(conn.execute(q["usage"], {"ids": ids, "source": source}))


class RecallMethods:
    """The search and compaction-detail methods of `SqliteStore` (see `Store.search`)."""

    if TYPE_CHECKING:
        _q: Queries

        def _read(self, fn: Callable[[sqlite3.Connection], T], session_id: str = "?") -> T: ...

    def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        source: str | None = None,
        archived: bool = True,
        limit: int = 20,
    ) -> list[SearchHit]:
        args = check_search(query, session_id, source, archived, limit)
        return self._read(lambda c: search(c, self._q, args), args.session_id or "?")

    def compaction_detail(self, compaction_id: int) -> CompactionDetail:
        check_count(compaction_id, "compaction_id", minimum=1, maximum=2**63 - 1)
        detail = self._read(lambda c: compaction_detail(c, self._q, compaction_id))
        if detail is None:
            raise CompactionNotFoundError(compaction_id)
        return detail

    def usage(self, session_id: str | None = None, source: str | None = None) -> Usage:
        sid, src = check_usage_scope(session_id, source)
        return self._read(lambda c: usage(c, self._q, sid, src), sid or "?")

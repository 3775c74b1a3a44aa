"""Reading the archive back on PostgreSQL: full-text search and what one compaction
did. The store methods (`RecallMethods`, mixed into `PostgresStore`) run read
transactions only: the archive's index is kept by the database (messages_search_idx,
over search_vector: migration 11); the live rows, which no index holds, are matched
by their query. Snippets are made here, from each hit's text, as `live_hit` makes
them: the parser's own headline would mark no part of an identifier."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from protocol import CompactionDetail, CompactionNotFoundError, SearchHit, Usage
from protocol._checks import check_count

from .._recall import RANKED_CANDIDATES, SearchArgs, check_search, detail_from_rows, hit_from_text, prefilter_words
from .._rows import compaction_from_row
from .._usage import check_usage_scope, usage_from_rows
from ._lifecycle import lineage_ids

__all__ = ["RecallMethods"]

Queries = Mapping[str, str]


def search(cur: Any, q: Queries, args: SearchArgs) -> list[SearchHit]:
    """The archive's hits (ranked by the index) first, then the live rows' (newest
    first), ``args.limit`` in all. Every word is looked up in the index; a term of
    several words is then found whole by holds_phrases."""
    ids = None if args.session_id is None else lineage_ids(cur, q, args.session_id)
    params = {
        "query": " ".join(args.words),
        "phrases": [" ".join(term) for term in args.terms if len(term) > 1],
        "source": args.source,
        "ids": ids,
        "limit": args.limit,
        "candidates": RANKED_CANDIDATES,
    }
    hits = []
    if args.archived:
        # planned for each query's own words and filters: a prepared statement's generic
        # plan cannot tell a rare word from a common one and scans every row instead
        cur.execute(q["search_archive"], params, prepare=False)
        hits = [hit_from_text(r, args.terms) for r in cur.fetchall()]
    if len(hits) < args.limit:
        params |= {"limit": args.limit - len(hits), "words": prefilter_words(args.words)}
        cur.execute(q["search_live" if ids is None else "search_live_in"], params, prepare=False)
        hits += [hit_from_text(r, args.terms) for r in cur.fetchall()]
    return hits


def compaction_detail(cur: Any, q: Queries, compaction_id: int) -> CompactionDetail | None:
    cur.execute(q["get_compaction"], {"id": compaction_id})
    row = cur.fetchone()
    if row is None:
        return None
    record = compaction_from_row(row)

    def rows_in(session_id: str, first: int, last: int) -> list[Any]:
        cur.execute(q["rows_in_range"], {"session_id": session_id, "first": first, "last": last})
        return list(cur.fetchall())

    def legacy() -> list[Any]:
        cur.execute(
            q["legacy_replaced_rows"], {"session_id": record.session_id, "last": record.watermark, "id": record.id}
        )
        return list(cur.fetchall())

    return detail_from_rows(record, row, rows_in, legacy)


def usage(cur: Any, q: Queries, session_id: str | None, source: str | None) -> Usage:
    ids = None if session_id is None else lineage_ids(cur, q, session_id)
    cur.execute(q["usage"], {"ids": ids, "source": source})
    return usage_from_rows(cur.fetchall())


class RecallMethods:
    """The search and compaction-detail methods of `PostgresStore` (see `Store.search`)."""

    if TYPE_CHECKING:
        _q: Queries

        def _read(self, what: str, work: Any) -> Any: ...

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
        hits: list[SearchHit] = self._read("search", lambda cur: search(cur, self._q, args))
        return hits

    def compaction_detail(self, compaction_id: int) -> CompactionDetail:
        check_count(compaction_id, "compaction_id", minimum=1, maximum=2**63 - 1)
        detail = self._read("compaction_detail", lambda cur: compaction_detail(cur, self._q, compaction_id))
        if detail is None:
            raise CompactionNotFoundError(compaction_id)
        return detail

    def usage(self, session_id: str | None = None, source: str | None = None) -> Usage:
        sid, src = check_usage_scope(session_id, source)
        total: Usage = self._read("usage", lambda cur: usage(cur, self._q, sid, src))
        return total

"""Full-text search on PostgreSQL: the archive's index is kept by the database
(messages_search_idx, over search_vector: migration 11); the live rows, which no index
holds, are matched by their query. Snippets are made here, from each hit's text, as
`live_hit` makes them: the parser's own headline would mark no part of an identifier.
`PgDialect.search_hits`, in the read `SqlStore.search` runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol import SearchHit

from .._recall import RANKED_CANDIDATES, SearchArgs, hit_from_text, prefilter_words
from ..sql._lifecycle import lineage_ids

__all__ = ["search"]

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

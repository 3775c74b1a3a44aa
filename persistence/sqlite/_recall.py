"""Full-text search on SQLite (FTS5): the archive's index is kept by triggers in the
schema; the live rows, which no index holds, are read and matched here. `SqliteDialect.search_hits`, in the
read `SqlStore.search` runs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import TypeVar

from protocol import SearchHit

from .._recall import (
    SearchArgs,
    fts5_query,
    hit_from_row,
    live_hit,
    prefilter_words,
)
from ..sql._lifecycle import lineage_ids

__all__ = ["search"]

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

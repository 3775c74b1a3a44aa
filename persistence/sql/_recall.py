"""Reading back what a store recorded, every dialect's: one compaction's detail and
token usage sums (search, whose index each database keeps its own way, is each
backend's `_recall.py`)."""

from __future__ import annotations

from typing import Any

from protocol import CompactionDetail, Usage

from .._recall import detail_from_rows
from .._rows import compaction_from_row
from .._usage import usage_from_rows
from ._dialect import Cursor, Dialect
from ._lifecycle import lineage_ids

__all__ = ["compaction_detail", "usage"]


def compaction_detail(c: Cursor, dialect: Dialect, compaction_id: int) -> CompactionDetail | None:
    """What compaction ``compaction_id`` replaced and wrote (None: no such compaction)."""
    q = dialect.queries
    row = c.execute(q["get_compaction"], {"id": compaction_id}).fetchone()
    if row is None:
        return None
    record = compaction_from_row(row)

    def rows_in(session_id: str, first: int, last: int) -> list[Any]:
        params = {"session_id": session_id, "first": first, "last": last}
        return list(c.execute(q["rows_in_range"], params).fetchall())

    def legacy() -> list[Any]:
        params = {"session_id": record.session_id, "last": record.watermark, "id": record.id}
        return list(c.execute(q["legacy_replaced_rows"], params).fetchall())

    return detail_from_rows(record, row, rows_in, legacy)


def usage(c: Cursor, dialect: Dialect, session_id: str | None, source: str | None) -> Usage:
    """The usage summed over a lineage, a source, or everything (one grouped query)."""
    q = dialect.queries
    ids = None if session_id is None else dialect.id_list(lineage_ids(c, q, session_id))
    return usage_from_rows(c.execute(q["usage"], {"ids": ids, "source": source}).fetchall())

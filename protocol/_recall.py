"""What the archive gives back: search hits and what one compaction did."""

from __future__ import annotations

from dataclasses import dataclass

from ._messages import StoredMessage
from ._records import CompactionRecord

__all__ = ["CompactionDetail", "SearchHit"]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One message matching a `Store.search` query.

    ``session_id`` and ``seq`` name the row that holds the text now: a message
    carried across compactions is found once, at its newest copy. ``archived`` is
    True when that row is no longer in the live transcript. ``snippet`` is a short
    excerpt with each matched term in ``[`` and ``]``. ``rank`` orders hits, best
    first (lower is better; its scale is the backend's own).
    """

    session_id: str
    seq: int
    role: str
    archived: bool
    snippet: str
    rank: float


@dataclass(frozen=True, slots=True)
class CompactionDetail:
    """What one compaction did (`Store.compaction_detail`).

    ``replaced``: the live rows it archived, in seq order (pruned rows keep their
    place with empty content). ``summary``: the rows its compressor wrote.
    ``carried``: the copies of the tail it carried after the summary, into the same
    session (in place) or its child (rotate). A compaction committed before the
    store recorded where its rows went has empty ``summary`` and ``carried``, and
    ``complete`` is False.
    """

    record: CompactionRecord
    replaced: tuple[StoredMessage, ...]
    summary: tuple[StoredMessage, ...]
    carried: tuple[StoredMessage, ...]
    complete: bool = True

"""`Store.usage`, shared by the backends: its argument checks and the sum it returns.

Each backend's ``usage`` query (in its ``recall.sql``) groups the recorded usage
of messages and of compactions by kind and model; `usage_from_rows` folds those
groups into one `Usage`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from protocol import Usage
from protocol._checks import check_text

from ._rows import checked_session_id

__all__ = ["check_usage_scope", "usage_from_rows"]


def check_usage_scope(session_id: object, source: object) -> tuple[str | None, str | None]:
    """``session_id`` (None: every lineage) and ``source`` (None: every source), checked."""
    sid = None if session_id is None else checked_session_id(session_id)
    if source is not None:
        check_text(source, "source")
    return sid, source  # type: ignore[return-value]  # checked above


def usage_from_rows(rows: Iterable[Mapping[str, Any]]) -> Usage:
    """The sum of the groups ``(kind, model, input_tokens, output_tokens)``: a kind
    is ``message`` or ``compaction``; a call without a model is grouped under ``""``."""
    by_model: dict[str, list[int]] = {}
    compactions = [0, 0]
    for row in rows:
        tokens = (int(row["input_tokens"]), int(row["output_tokens"]))
        totals = by_model.setdefault(row["model"] or "", [0, 0])
        totals[0] += tokens[0]
        totals[1] += tokens[1]
        if row["kind"] == "compaction":
            compactions[0] += tokens[0]
            compactions[1] += tokens[1]
    return Usage(
        sum(t[0] for t in by_model.values()),
        sum(t[1] for t in by_model.values()),
        by_model={name: Usage(i, o, name or None) for name, (i, o) in sorted(by_model.items())},
        compactions=Usage(compactions[0], compactions[1]),
    )

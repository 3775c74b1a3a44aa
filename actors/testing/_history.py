"""The checks that need a schedule's history, not only its final live transcript,
and `HarnessView`, what a user's ``check`` sees of that history.

Every row keeps when it was written (``created_at``) and, once archived, when
(``archived_at``); under the harness the store's clock is the virtual clock plus a
tick per reading, so those stamps order every write of a schedule. From them:

- ``double_compaction``: two in-place compactions of one snapshot (one watermark),
  or one message carried twice into the live transcript (two live rows with one
  original);
- ``retracted_in_summary``: a message retracted (a retract, a rollback) before a
  compaction wrote its output, and found in that output (kept, or listed in a
  head-tail summary);
- ``rollback_middle``: a rollback or retract took a row while a later row of the same
  session, written before it, stayed live: it took rows that were not at the end;
- ``dangling_tool_call``: a live tool call without its results, every path ended
  (a result taken back by a retract or a rollback excuses it: that was asked for).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from persistence import Store
from protocol import CompressionOutcome, StoredMessage
from protocol._transcript import call_ids

__all__ = ["HarnessView", "history_problems", "wants_view"]


@dataclass(frozen=True, slots=True)
class HarnessView:
    """A schedule's outcome, for a ``check`` whose first parameter is annotated with it.

    ``transcript``: the live messages a gateway reads next. ``archive``: every other
    row of the lineage (compacted, superseded, retracted, in every session of it).
    ``ledger``: each path's acknowledged messages, in acknowledgement order (a
    retracted one included). ``outcomes``: each path's `CompressionOutcome` values.
    """

    transcript: list[StoredMessage]
    archive: list[StoredMessage] = field(default_factory=list)
    ledger: Mapping[str, list[StoredMessage]] = field(default_factory=dict)
    outcomes: Mapping[str, list[CompressionOutcome]] = field(default_factory=dict)


def wants_view(check: Callable[..., object]) -> bool:
    """Is ``check``'s first parameter annotated `HarnessView`?"""
    try:
        first = next(iter(inspect.signature(check).parameters.values()))
    except (StopIteration, TypeError, ValueError):
        return False
    annotation = first.annotation
    if isinstance(annotation, str):  # postponed annotations: resolve, or read the name
        try:
            annotation = typing.get_type_hints(check).get(first.name, annotation)
        except Exception:  # a name only the check's module knows: the text is enough
            pass
    if isinstance(annotation, str):
        return annotation.rsplit(".", 1)[-1] == "HarnessView"
    return annotation is HarnessView


@dataclass(slots=True)
class Lineage:
    """Every row of a session's lineage, and when each was archived."""

    live: list[StoredMessage]
    rows: list[StoredMessage]
    archived_at: Mapping[int, float]

    @staticmethod
    def read(store: Store, session_id: str, archived_at: Mapping[int, float]) -> Lineage:
        rows: dict[int, StoredMessage] = {}
        pending, seen = [session_id], set()
        while pending:
            sid = pending.pop()
            if sid in seen:
                continue
            seen.add(sid)
            for row in [*store.transcript(sid), *store.archive(sid)]:
                rows[row.id] = row
            pending += [child.id for child in store.children(sid)]
        try:
            live = list(store.transcript(store.resolve(session_id)))
        except Exception:  # a fork has no one tip: `fork` says so
            live = []
        return Lineage(live, sorted(rows.values(), key=lambda r: r.id), archived_at)


def history_problems(store: Store, session_id: str, lineage: Lineage, acked_ids: set[int]) -> list[tuple[str, str]]:
    """The (invariant, detail) pairs of the four history checks."""
    found = [
        ("double_compaction", _double_compaction(store, lineage)),
        ("retracted_in_summary", _retracted_in_summary(lineage, acked_ids)),
        ("rollback_middle", _rollback_middle(lineage)),
        ("dangling_tool_call", _dangling_tool_calls(lineage)),
    ]
    return [(name, detail) for name, detail in found if detail]


def _double_compaction(store: Store, lineage: Lineage) -> str:
    problems = []
    for sid in sorted({row.session_id for row in lineage.rows}):
        marks: dict[int, int] = {}
        for record in store.compactions(sid):
            if record.mode == "in_place":
                marks[record.watermark] = marks.get(record.watermark, 0) + 1
        problems += [
            f"{n} in-place summaries of the snapshot up to seq {w} of {sid!r}" for w, n in marks.items() if n > 1
        ]
    by_id = {row.id: row for row in lineage.rows}
    originals: dict[int, list[int]] = {}
    for row in lineage.live:
        originals.setdefault(_original(row, by_id), []).append(row.id)
    problems += [f"message {o} carried twice: live as {ids}" for o, ids in originals.items() if len(ids) > 1]
    return "; ".join(problems)


def _original(row: StoredMessage, by_id: Mapping[int, StoredMessage]) -> int:
    seen = set()
    while row.origin_id is not None and row.origin_id in by_id and row.id not in seen:
        seen.add(row.id)
        row = by_id[row.origin_id]
    return row.origin_id if row.origin_id is not None else row.id


def _retracted_in_summary(lineage: Lineage, acked_ids: set[int]) -> str:
    retracted = [r for r in lineage.rows if r.state == "retracted" and r.text and r.id in lineage.archived_at]
    written = [r for r in lineage.rows if r.id not in acked_ids and r.origin_id is None]  # what compactions wrote
    problems = []
    for gone in retracted:
        when = lineage.archived_at[gone.id]
        for row in written:
            if row.created_at > when and _contains(row.text, gone.text):
                problems.append(
                    f"message {gone.id} ({gone.text!r}) retracted, then written by a compaction as {row.id}"
                )
    return "; ".join(problems)


def _contains(text: str, wanted: str) -> bool:
    """``wanted`` kept as ``text``, or listed on a line of a head-tail summary."""
    if text == wanted:
        return True
    return any(line.startswith("- ") and line.endswith(f": {wanted}") for line in text.splitlines())


def _rollback_middle(lineage: Lineage) -> str:
    problems = []
    live_by_session: dict[str, list[StoredMessage]] = {}
    for row in lineage.rows:
        if row.state == "live":
            live_by_session.setdefault(row.session_id, []).append(row)
    for gone in lineage.rows:
        when = lineage.archived_at.get(gone.id)
        if gone.state != "retracted" or when is None:
            continue
        after = [r.id for r in live_by_session.get(gone.session_id, []) if r.seq > gone.seq and r.created_at < when]
        if after:
            problems.append(f"message {gone.id} taken back while {after} after it stayed live")
    return "; ".join(problems)


def _dangling_tool_calls(lineage: Lineage) -> str:
    """A live call answered nowhere live; a result a path retracted on purpose excuses it."""
    answered = {m.tool_call_id for m in lineage.live if m.role == "tool"}
    answered |= {m.tool_call_id for m in lineage.rows if m.role == "tool" and m.state == "retracted"}
    dangling = [(m.id, c) for m in lineage.live for c in call_ids(m) if c not in answered]
    return "; ".join(f"message {i} calls {c!r} and no result follows" for i, c in dangling)

"""The integrity report of a ``simulate`` run: every acknowledged message accounted for.

A message the store acknowledged (an append returned it) is *accounted for* when its
row still exists with the same content and it is one of:

- live in the session a gateway follows (from the root, through each
  compression-ended session to its oldest child);
- ``compacted``: replaced by a committed summary, kept in the archive;
- ``superseded`` with a copy (a row whose ``origin_id`` is its id) that is itself
  accounted for: a tail message carried across a compaction;
- live in a compression-ended session on the followed path, at or below the
  watermark the naive path wrote into its child's summary (naive mode only).

Anything else was lost: never carried, or written into an orphan child. A message
carried by more than one copy is a duplicate. Turns split by another path and tool
results separated from their call are counted from the rows too (`conversation`). The
structural checks (forks, seq gaps, cycles, orphan writes) come from `check_store`.
After every registry closed, any lease still held in the run's scope is leaked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from persistence import Store
from persistence.internal import check_store
from protocol import END_REASON_COMPRESSION, StoredMessage

from ._conversation import separated_tool_results, split_turns

__all__ = ["NAIVE_WATERMARK_KEY", "Ack", "IntegrityReport", "check_run"]

log = logging.getLogger("session_actors.simulate.check")

#: ``meta`` key of the naive path's summary message: the snapshot's last seq.
NAIVE_WATERMARK_KEY = "naive_watermark"
#: Examples of each violation kept for the report.
_EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class Ack:
    """One acknowledged message: which lineage (root id), its row id, its content."""

    root: str
    id: int
    content: str


@dataclass(slots=True)
class IntegrityReport:
    forks: int = 0
    lost_messages: int = 0
    leaked_leases: int = 0
    seq_gaps: int = 0
    orphan_writes: int = 0
    lineage_cycles: int = 0
    duplicated_copies: int = 0
    turns_split: int = 0
    tool_results_separated: int = 0
    sessions: int = 0
    messages: int = 0
    compactions: int = 0
    compactions_by_mode: dict[str, int] = field(default_factory=dict)
    tail_messages_carried: int = 0
    examples: list[str] = field(default_factory=list)

    def violations(self) -> dict[str, int]:
        return {
            "forks": self.forks,
            "lost_messages": self.lost_messages,
            "leaked_leases": self.leaked_leases,
            "seq_gaps": self.seq_gaps,
            "orphan_writes": self.orphan_writes,
            "lineage_cycles": self.lineage_cycles,
            "duplicated_copies": self.duplicated_copies,
            "turns_split": self.turns_split,
            "tool_results_separated": self.tool_results_separated,
        }


def check_run(store: Store, prefix: str, roots: Iterable[str], acks: Iterable[Ack]) -> IntegrityReport:
    """Check the sessions whose ids start with ``prefix`` (one simulate run)."""
    in_scope = lambda sid: sid.startswith(prefix)  # noqa: E731 - a one-line predicate
    fsck = check_store(store, scope=in_scope)
    report = IntegrityReport(
        forks=fsck.count("fork"),
        seq_gaps=fsck.count("seq_gap"),
        orphan_writes=fsck.count("orphan_write"),
        lineage_cycles=fsck.count("lineage_cycle") + fsck.count("missing_parent"),
        # every registry is closed now: a lease still held, live or not, was leaked
        leaked_leases=sum(1 for lease in store.leases() if in_scope(lease.session_id)),
        sessions=fsck.sessions_checked,
        messages=fsck.messages_checked,
    )
    report.examples += [f"{p.kind}: {p.session_id}: {p.detail}" for p in fsck.problems[:_EXAMPLES]]
    acks_by_root: dict[str, list[Ack]] = {root: [] for root in roots}
    for ack in acks:
        acks_by_root.setdefault(ack.root, []).append(ack)
    for root, root_acks in sorted(acks_by_root.items()):
        _check_lineage(store, root, root_acks, report)
    return report


@dataclass(slots=True)
class _Lineage:
    rows: dict[int, StoredMessage] = field(default_factory=dict)
    copies: dict[int, list[StoredMessage]] = field(default_factory=dict)
    followed: list[str] = field(default_factory=list)  # root ... tip, oldest child each step
    naive_watermarks: dict[str, int] = field(default_factory=dict)  # ended parent -> seq
    ended_by_compression: set[str] = field(default_factory=set)


def _load_lineage(store: Store, root: str, report: IntegrityReport) -> _Lineage:
    lineage = _Lineage(followed=_followed_path(store, root))
    for parent, child in zip(lineage.followed, lineage.followed[1:]):
        lineage.naive_watermarks.update(_naive_watermark(store, parent, child))
    pending, seen = [root], set()
    while pending:  # every descendant, followed or not
        sid = pending.pop()
        if sid in seen:
            continue
        seen.add(sid)
        info = store.get_session(sid)
        if info is not None and info.end_reason == END_REASON_COMPRESSION:
            lineage.ended_by_compression.add(sid)
        for row in [*store.transcript(sid), *store.archive(sid)]:
            lineage.rows[row.id] = row
            if row.origin_id is not None:
                lineage.copies.setdefault(row.origin_id, []).append(row)
        _count_compactions(store, sid, report)
        pending += [k.id for k in store.children(sid)]
    return lineage


def _followed_path(store: Store, root: str) -> list[str]:
    """Root to tip, taking the oldest continuation at each step (what a gateway follows)."""
    path, seen = [root], {root}
    while True:
        kids = store.children(path[-1])
        if not kids or kids[0].id in seen:
            return path
        path.append(kids[0].id)
        seen.add(kids[0].id)


def _count_compactions(store: Store, sid: str, report: IntegrityReport) -> None:
    for record in store.compactions(sid):
        report.compactions += 1
        report.compactions_by_mode[record.mode] = report.compactions_by_mode.get(record.mode, 0) + 1
        report.tail_messages_carried += record.tail_count


def _naive_watermark(store: Store, parent: str, child: str) -> dict[str, int]:
    for row in store.transcript(child)[:3]:
        mark = row.meta.get(NAIVE_WATERMARK_KEY)
        if isinstance(mark, int):
            return {parent: mark}
    return {}


def _check_lineage(store: Store, root: str, acks: list[Ack], report: IntegrityReport) -> None:
    lineage = _load_lineage(store, root, report)
    for origin, copies in lineage.copies.items():  # a carried message is copied exactly once
        if len(copies) > 1:
            report.duplicated_copies += 1
            if len(report.examples) < 3 * _EXAMPLES:
                report.examples.append(f"duplicated: message {origin} of {root} copied {len(copies)} times")
    _check_keys(lineage, root, report)
    _check_conversation(lineage, root, acks, report)
    followed = set(lineage.followed)
    for ack in acks:
        problem = _unaccounted(lineage, followed, ack.id, ack.content, depth=0)
        if problem:
            report.lost_messages += 1
            if len(report.examples) < 3 * _EXAMPLES:
                report.examples.append(f"lost: message {ack.id} of {root}: {problem}")


def _check_keys(lineage: _Lineage, root: str, report: IntegrityReport) -> None:
    """An idempotency key is stored once per lineage: the rows carrying it are one
    original and its copies."""
    originals: dict[str, list[int]] = {}
    for row in lineage.rows.values():
        if row.key is not None and row.origin_id is None:
            originals.setdefault(row.key, []).append(row.id)
    for key, ids in originals.items():
        if len(ids) > 1:
            report.duplicated_copies += 1
            if len(report.examples) < 3 * _EXAMPLES:
                report.examples.append(f"duplicated: key {key!r} of {root} stored as messages {sorted(ids)}")


def _check_conversation(lineage: _Lineage, root: str, acks: list[Ack], report: IntegrityReport) -> None:
    """Turns kept whole and tool results next to their calls, as the database has them."""
    acked = list({a.id: lineage.rows[a.id] for a in acks if a.id in lineage.rows}.values())  # a retry acks twice
    split = split_turns(acked)
    report.turns_split += len(split)
    report.examples += [f"turn split: {turn!r} of {root}" for turn in split[:_EXAMPLES]]
    # every row of a session in seq order (what was appended, and what each compaction
    # wrote where it wrote it), and the live transcript alone (what the model reads next)
    rows = list(lineage.rows.values())
    orders = [sorted(group, key=lambda m: m.seq) for group in _by_session(rows).values()]
    orders += [
        sorted(group, key=lambda m: m.seq) for group in _by_session([r for r in rows if r.state == "live"]).values()
    ]
    separated = {order[i].id for order in orders for i in separated_tool_results(order)}
    report.tool_results_separated += len(separated)
    report.examples += [
        f"tool result separated from its call: message {i} of {root}" for i in sorted(separated)[:_EXAMPLES]
    ]


def _by_session(rows: list[StoredMessage]) -> dict[str, list[StoredMessage]]:
    grouped: dict[str, list[StoredMessage]] = {}
    for row in rows:
        grouped.setdefault(row.session_id, []).append(row)
    return grouped


def _unaccounted(lineage: _Lineage, followed: set[str], row_id: int, content: str | None, depth: int) -> str | None:
    """None if the row is accounted for, else why not."""
    row = lineage.rows.get(row_id)
    if row is None:
        return "row not found in the lineage"
    if content is not None and row.text != content:
        return "content changed"
    if row.state in ("compacted", "retracted"):  # archived: a retract (or a dead turn's seal) keeps it
        return None
    if row.state == "superseded":
        copies = lineage.copies.get(row.id, [])
        if not copies:
            return "superseded without a carried copy"
        if depth > 10_000 or all(_unaccounted(lineage, followed, c.id, None, depth + 1) for c in copies):
            return "its carried copy is not accounted for"
        return None
    if row.session_id not in followed:
        return f"live in {row.session_id!r}, which the gateway does not follow (orphan)"
    if row.session_id in lineage.ended_by_compression:
        mark = lineage.naive_watermarks.get(row.session_id)
        if mark is None or row.seq > mark:
            return f"left live in compression-ended {row.session_id!r}, never carried"
    return None

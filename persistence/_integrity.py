"""Integrity check of a store: the damage the upstream incidents leave behind.

Only the `Store` protocol is used (``sessions``, ``transcript``, ``archive``,
``leases``, ``now``), so the check runs on every backend. Problem kinds:

- ``fork``: a compression-ended session with more than one child.
- ``orphan_write``: messages in a child of a forked parent other than the oldest;
  live messages created after their session ended (whatever the end reason).
- ``seq_gap``: a session's seqs over all states are not exactly 1..N.
- ``lineage_cycle``: following parents comes back to where it started.
- ``missing_parent``: a parent id that names no session.
- ``corrupt``: the file's pages fail SQLite's own check, or a message row's bytes
  no longer match the checksum written with it (the row is named, its text never
  printed).

Warnings are listed, not counted (the exit status stays 0):

- ``stranded_live_rows``: live messages left in a session ended by compression,
  written before it ended. The public API reaches this state (append, end the
  session for compression, create a child), so it is not damage; the rows are
  simply not part of the live continuation.
- ``expired_lease``: a lease that expired and was never released: garbage a
  crash (or a release that failed) left. It blocks nobody (an expired lease is
  taken over) and `Store.reap_leases` (``session-actors locks --reap``, and every
  registry once per ``lease_ttl_s``) releases it.

A live lease is reported too, not counted (a compaction may be running right now).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from protocol import END_REASON_COMPRESSION, Lease, SessionInfo, StoredMessage

from ._store import Store, features_of

__all__ = ["PROBLEM_KINDS", "WARNING_KINDS", "FsckReport", "FsckWarning", "Problem", "check_store"]

log = logging.getLogger("session_actors.fsck")

PROBLEM_KINDS: tuple[str, ...] = (
    "fork",
    "orphan_write",
    "seq_gap",
    "lineage_cycle",
    "missing_parent",
    "corrupt",
)
WARNING_KINDS: tuple[str, ...] = ("stranded_live_rows", "expired_lease")
#: Most seqs listed in one detail (a seq gap, stranded live rows).
_MAX_LISTED = 10


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str
    session_id: str
    detail: str


@dataclass(frozen=True, slots=True)
class FsckWarning:
    """A state worth knowing about that is not damage: listed, never counted."""

    kind: str
    session_id: str
    detail: str


@dataclass(slots=True)
class FsckReport:
    sessions_checked: int = 0
    messages_checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    warnings: list[FsckWarning] = field(default_factory=list)
    live_leases: list[Lease] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def count(self, kind: str) -> int:
        return sum(1 for p in self.problems if p.kind == kind)

    def counts(self) -> dict[str, int]:
        return {kind: self.count(kind) for kind in PROBLEM_KINDS}


def check_store(
    store: Store,
    *,
    scope: Callable[[str], bool] | None = None,
) -> FsckReport:
    """Check every session (or those ``scope(id)`` accepts) and every lease."""
    in_scope = scope or (lambda _sid: True)
    infos = {info.id: info for info in store.sessions()}
    children = _children_by_parent(infos.values())
    report = FsckReport()
    if features_of(store).checks_pages:  # SQLite: the pages before the rows on them
        report.problems += [Problem("corrupt", "", detail) for detail in store._physical_check()]  # type: ignore[attr-defined]
        if report.problems:  # the logical checks would read the damaged pages: stop here
            return report
    report.problems += _damaged_row_problems(store, in_scope)
    checked = [info for sid, info in sorted(infos.items()) if in_scope(sid)]
    for info in checked:
        messages = [*store.transcript(info.id), *store.archive(info.id)]
        report.sessions_checked += 1
        report.messages_checked += len(messages)
        report.problems += _seq_problems(info, messages)
        report.problems += _ended_session_problems(info, messages)
        report.warnings += _ended_session_warnings(info, messages)
        report.problems += _fork_problems(store, info, children.get(info.id, []))
    report.problems += _lineage_problems(infos, [info.id for info in checked])
    _check_leases(store, in_scope, report)
    return report


def _damaged_row_problems(store: Store, in_scope: Callable[[str], bool]) -> list[Problem]:
    """Rows whose bytes changed since they were written: their stored checksum
    disagrees with their text (named by seq; the text is never printed)."""
    if not features_of(store).checksums_rows:
        return []
    by_session: dict[str, list[int]] = defaultdict(list)
    for session_id, seq in store._damaged_rows():  # type: ignore[attr-defined]
        if in_scope(session_id):
            by_session[session_id].append(seq)
    return [
        Problem(
            "corrupt",
            sid,
            f"{len(seqs)} message(s) changed since written: checksum mismatch at seqs {_listed(sorted(seqs))}",
        )
        for sid, seqs in sorted(by_session.items())
    ]


def _children_by_parent(infos: Iterable[SessionInfo]) -> dict[str, list[SessionInfo]]:
    """Children of each parent, oldest first (ties broken by id for stable output)."""
    children: dict[str, list[SessionInfo]] = defaultdict(list)
    for info in infos:
        if info.parent_session_id is not None:
            children[info.parent_session_id].append(info)
    for kids in children.values():
        kids.sort(key=lambda k: (k.created_at, k.id))
    return children


def _seq_problems(info: SessionInfo, messages: list[StoredMessage]) -> list[Problem]:
    seqs = sorted(m.seq for m in messages)
    if seqs == list(range(1, len(seqs) + 1)):
        return []
    present = set(seqs)
    missing = [s for s in range(1, (seqs[-1] if seqs else 0) + 1) if s not in present]
    duplicated = sorted(s for s, n in Counter(seqs).items() if n > 1)
    parts = []
    if missing:
        parts.append(f"missing seqs {_listed(missing)}")
    if duplicated:
        parts.append(f"duplicated seqs {_listed(duplicated)}")
    if seqs and seqs[0] < 1:
        parts.append(f"seqs start at {seqs[0]}")
    return [Problem("seq_gap", info.id, "; ".join(parts) or "seqs are not 1..N")]


def _ended_session_problems(info: SessionInfo, messages: list[StoredMessage]) -> list[Problem]:
    """Live rows created after the session ended, whatever the end reason."""
    if info.ended_at is None:
        return []
    # Only live rows: a row a compaction archived was handled by that commit, even
    # when its created_at (a transaction start time on PostgreSQL) is a hair later.
    late = [m for m in messages if m.state == "live" and m.created_at > info.ended_at]
    if late:
        return [
            Problem(
                "orphan_write",
                info.id,
                f"{len(late)} message(s) written after the session ended (first seq {late[0].seq})",
            )
        ]
    return []


def _ended_session_warnings(info: SessionInfo, messages: list[StoredMessage]) -> list[FsckWarning]:
    """Live rows a compression-ended session kept from before it ended."""
    if info.ended_at is None or info.end_reason != END_REASON_COMPRESSION:
        return []
    stranded = [m for m in messages if m.state == "live" and m.created_at <= info.ended_at]
    if not stranded:
        return []
    seqs = _listed(sorted(m.seq for m in stranded))
    return [
        FsckWarning(
            "stranded_live_rows",
            info.id,
            f"{len(stranded)} live message(s) left in the session, written before it was "
            f"ended by compression (seqs {seqs})",
        )
    ]


def _fork_problems(store: Store, info: SessionInfo, kids: list[SessionInfo]) -> list[Problem]:
    if len(kids) < 2:
        return []
    names = ", ".join(k.id for k in kids)
    problems = [Problem("fork", info.id, f"{len(kids)} children: {names}")]
    for orphan in kids[1:]:  # the oldest child is the one a gateway would have followed
        written = len(store.transcript(orphan.id)) + len(store.archive(orphan.id))
        if written:
            problems.append(
                Problem(
                    "orphan_write",
                    orphan.id,
                    f"{written} message(s) in a non-oldest child of forked parent {info.id}",
                )
            )
    return problems


def _lineage_problems(infos: dict[str, SessionInfo], checked: Collection[str]) -> list[Problem]:
    """Walk each checked session's parent chain once; report each cycle once."""
    problems: list[Problem] = []
    seen_cycles: set[frozenset[str]] = set()
    for start in checked:
        path: list[str] = []
        on_path: set[str] = set()
        current: str | None = start
        while current is not None and current not in on_path:
            info = infos.get(current)
            if info is None:
                problems.append(Problem("missing_parent", path[-1], f"parent {current!r} does not exist"))
                break
            path.append(current)
            on_path.add(current)
            current = info.parent_session_id
        if current is not None and current in on_path:
            cycle = path[path.index(current) :]
            key = frozenset(cycle)
            if key not in seen_cycles:
                seen_cycles.add(key)
                problems.append(Problem("lineage_cycle", min(cycle), " -> ".join([*cycle, current])))
    return _dedupe(problems)


def _check_leases(store: Store, in_scope: Callable[[str], bool], report: FsckReport) -> None:
    now = store.now()
    for lease in store.leases():
        if not in_scope(lease.session_id):
            continue
        if lease.expires_at > now:
            report.live_leases.append(lease)
        else:
            report.warnings.append(
                FsckWarning(
                    "expired_lease",
                    lease.session_id,
                    f"lease of {lease.holder!r} (token {lease.token}) expired "
                    f"{now - lease.expires_at:.1f}s ago and was never released "
                    "(garbage a crash left; `session-actors locks --reap` releases it)",
                )
            )


def _listed(values: list[int]) -> str:
    shown = ", ".join(str(v) for v in values[:_MAX_LISTED])
    return shown + (f" (+{len(values) - _MAX_LISTED} more)" if len(values) > _MAX_LISTED else "")


def _dedupe(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))

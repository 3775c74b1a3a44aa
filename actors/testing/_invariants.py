"""What the harness checks after every schedule: the invariants ``simulate`` checks,
read from the database against the run's ledger, the checks of the schedule's
history (`_history`), and the user's own ``check`` (given the live transcript, or a
`HarnessView` when its first parameter is annotated so)."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from persistence import Store

from ..simulate._check import Ack, IntegrityReport, check_run
from ..simulate._conversation import split_turns
from ._history import HarnessView, Lineage, history_problems, wants_view
from ._paths import Ledger

__all__ = ["INVARIANTS", "Failure", "check_schedule"]

#: Every `Failure.invariant` name.
INVARIANTS: tuple[str, ...] = (
    "fork",
    "lost",
    "duplicate",
    "turn_split",
    "tool_pair",
    "seq_gap",
    "leaked_lease",
    "fsck",
    "double_compaction",
    "retracted_in_summary",
    "rollback_middle",
    "dangling_tool_call",
    "path_error",
    "deadlock",
    "check",
)

#: Invariant name -> (the report's counters, the prefix of its examples).
_COUNTED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "fork": (("forks",), ("fork",)),
    "lost": (("lost_messages",), ("lost",)),
    "duplicate": (("duplicated_copies",), ("duplicated",)),
    "tool_pair": (("tool_results_separated",), ("tool result",)),
    "seq_gap": (("seq_gaps",), ("seq_gap",)),
    "leaked_lease": (("leaked_leases",), ()),
    "fsck": (("orphan_writes", "lineage_cycles"), ("orphan_write", "lineage_cycle", "missing_parent")),
}


@dataclass(frozen=True, slots=True)
class Failure:
    """One broken invariant of one schedule; `Harness.replay` runs ``schedule`` again."""

    schedule: str  # shrunk: no longer than ``original``, failing the same way
    invariant: str
    detail: str  # as ``original`` broke it
    original: str = ""  # the schedule first found to fail
    seed: int | None = None  # explore()'s seed when a random schedule found it


def check_schedule(
    store: Store,
    session_id: str,
    ledger: Ledger,
    turns: Mapping[int, object],
    archived_at: Mapping[int, float],
    check: Callable[..., object] | None,
    dead_holders: Collection[str] = (),
) -> list[tuple[str, str]]:
    """The (invariant, detail) pairs this run broke, in `INVARIANTS` order. ``turns``:
    the turn each acknowledged row was appended in, as the database recorded it (a
    turn closed for running past ``max_turn_s`` ends there, whatever its holder thinks).
    ``archived_at``: when each archived row left the live transcript. ``dead_holders``:
    the holders of crashed processes (their leases lapse, they are not leaked)."""
    acks = [Ack(session_id, row.id, row.text) for row in ledger.rows.values()]
    report = check_run(store, session_id, [session_id], acks)
    if report.leaked_leases and dead_holders:  # a crashed process never released: its leases lapse
        report.leaked_leases = sum(
            1
            for lease in store.leases()
            if lease.session_id.startswith(session_id) and lease.holder not in dead_holders
        )
    broken = [(name, _detail(report, name)) for name, (counters, _) in _COUNTED.items() if _count(report, counters)]
    split = split_turns(ledger.rows.values(), turn_of=lambda row: turns.get(row.id))
    if split:
        broken.append(("turn_split", f"another path wrote inside the turn(s) with token(s) {', '.join(split)}"))
    lineage = Lineage.read(store, session_id, archived_at)
    broken += history_problems(store, session_id, lineage, ledger.ever)
    if check is not None and not any(name == "fork" for name, _ in broken):  # a fork has no one transcript
        try:
            check(_view(lineage, ledger) if wants_view(check) else store.transcript(store.resolve(session_id)))
        except Exception as exc:
            broken.append(("check", "".join(traceback.format_exception_only(exc)).strip()))
    return sorted(broken, key=lambda b: INVARIANTS.index(b[0]))


def _view(lineage: Lineage, ledger: Ledger) -> HarnessView:
    live = {row.id for row in lineage.live}
    archive = [row for row in lineage.rows if row.id not in live and row.state != "live"]
    ledger_copy = {path: list(rows) for path, rows in sorted(ledger.by_path.items())}
    outcomes = {path: list(found) for path, found in sorted(ledger.outcomes.items())}
    return HarnessView(list(lineage.live), archive, ledger_copy, outcomes)


def _count(report: IntegrityReport, counters: tuple[str, ...]) -> int:
    return sum(getattr(report, name) for name in counters)


def _detail(report: IntegrityReport, name: str) -> str:
    counters, prefixes = _COUNTED[name]
    examples = [e for e in report.examples if prefixes and e.startswith(prefixes)]
    return "; ".join(examples) or f"{_count(report, counters)} found"

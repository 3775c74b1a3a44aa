"""The result of a compress request."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._records import CompactionRecord

__all__ = [
    "CANCEL_REASONS",
    "SKIP_REASONS",
    "CompressionOutcome",
    "CompressionStatus",
]

#: ``reason`` values of a `SKIPPED` outcome.
SKIP_REASONS: frozenset[str] = frozenset(
    {"cooldown", "lease_held", "lease_error", "disabled", "nothing_to_do", "empty_result"}
)
#: ``reason`` values of a `CANCELLED` outcome.
CANCEL_REASONS: frozenset[str] = frozenset({"interrupted", "timeout", "retracted"})


class CompressionStatus(enum.Enum):
    """What a compress request did."""

    COMPACTED = "compacted"  #: committed in place
    ROTATED = "rotated"  #: committed into a new child session
    ADOPTED = "adopted"  #: another path had compacted; the handle follows its result
    UNCHANGED = "unchanged"  #: the compressor returned an equal transcript; nothing written
    SKIPPED = "skipped"  #: not attempted; ``reason`` says why
    CANCELLED = "cancelled"  #: interrupted or timed out before commit; nothing written
    FAILED = "failed"  #: compressor or commit error; nothing written, cooldown armed
    LEASE_LOST = "lease_lost"  #: fencing rejected the commit; nothing written

    @property
    def committed(self) -> bool:
        return self in (CompressionStatus.COMPACTED, CompressionStatus.ROTATED)


@dataclass(frozen=True, slots=True)
class CompressionOutcome:
    """The outcome every caller joined to one compaction attempt receives.

    ``session_id`` is the live id afterwards; ``messages_before`` / ``messages_after``
    count the live messages of the compressed snapshot and of the committed result.
    """

    status: CompressionStatus
    session_id: str
    previous_session_id: str | None = None
    reason: str | None = None
    record: CompactionRecord | None = None
    messages_before: int = 0
    messages_after: int = 0
    error: str | None = None

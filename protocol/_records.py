"""Store records: sessions, leases, cooldowns and compaction records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._usage import Usage

__all__ = [
    "END_REASON_COMPRESSION",
    "MODES",
    "CompactionMode",
    "CompactionRecord",
    "Cooldown",
    "Lease",
    "SessionInfo",
    "TurnLease",
]

CompactionMode = Literal["in_place", "rotate"]
MODES: tuple[str, ...] = ("in_place", "rotate")
#: ``end_reason`` of a session whose transcript continues in a child session.
END_REASON_COMPRESSION = "compression"


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session row. Times are epoch seconds on the store's clock. ``metadata`` is
    the application's JSON-able mapping (a continuation starts with its parent's)."""

    id: str
    source: str
    parent_session_id: str | None
    created_at: float
    ended_at: float | None
    end_reason: str | None
    epoch: int
    cooldown_until: float | None = None
    cooldown_error: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: Names the conversation, not the row: a random token set when the session is
    #: created and inherited by its continuations, so a lineage erased and then
    #: started again under the same id is told apart from the one it replaced
    #: ("" for sessions created before schema version 3).
    incarnation: str = ""
    #: ``(session_id, seq)`` for a branch (`Store.branch`): the session and the last
    #: seq of the live prefix it started from. None for every other session.
    branch_of: tuple[str, int] | None = None

    @property
    def live(self) -> bool:
        return self.ended_at is None


@dataclass(frozen=True, slots=True)
class Lease:
    """A compaction lease. ``token`` strictly increases per session and is never reset."""

    session_id: str
    holder: str
    token: int
    acquired_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class TurnLease:
    """A turn lease: the right to append to a session's live transcript while other
    holders' appends wait. ``token`` comes from one counter of the whole store, so it
    only grows (erasure and re-creation included) and names this turn alone;
    ``session_id`` is the live session it was last seen on (a rotation carries the
    lease to the continuation). ``interrupted`` is set by `interrupt_turn`: another
    caller asks the holder to end its turn."""

    session_id: str
    holder: str
    token: int
    expires_at: float
    interrupted: bool = False
    #: messages of the turn it replaced that `open_turn(rollback=...)` retracted
    rolled_back: int = 0
    #: the seq of the turn's first live message (`current_turn`; None before it appended)
    first_seq: int | None = None
    #: the turn's idempotency key (`current_turn`; None: an unkeyed turn, or not read)
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Cooldown:
    """A compaction cooldown; live iff ``until > now`` on the store's clock."""

    session_id: str
    until: float
    error: str | None

    def is_live(self, now: float) -> bool:
        return self.until > now


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """The audit row every committed compaction leaves behind."""

    id: int
    session_id: str
    child_session_id: str | None
    mode: CompactionMode
    token: int
    holder: str
    watermark: int
    archived_count: int
    tail_count: int
    compressor: str
    started_at: float
    committed_at: float
    #: what the compressor's model calls used, when it reported it
    usage: Usage | None = None

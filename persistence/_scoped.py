"""`SourceScopedStore`: a `Store` that reaches the sessions of one source only.

Every method that names a session (by id, lease or turn) first reads the session's
source and refuses another one with `AccessDeniedError`, before anything is
written; listing, search and expiry are confined to the source; leases and turns
lists hold only its sessions; a new session gets the source. A source never changes
over a session's life (continuations inherit it, and an erased id re-created under
another source is another conversation, which incarnation-checked writes refuse), so
the read before a write answers for the write. It is what ``session-actors serve``
gives a token limited to one source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from protocol import (
    AccessDeniedError,
    CompactionDetail,
    CompactionRecord,
    Cooldown,
    Lease,
    Message,
    SearchHit,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    TurnLease,
    Usage,
)
from protocol._checks import check_text
from protocol._turns import SealMode

from ._store import NO_FEATURES, Store

__all__ = ["SourceScopedStore"]


class SourceScopedStore:
    """``store`` seen through one ``source`` (see the module docstring). Closing the
    view leaves the store open: it belongs to whoever made it."""

    features = NO_FEATURES  # used through the Store protocol alone (checked per call)

    def __init__(self, store: Store, source: str) -> None:
        self.store = store
        self.source = check_text(source, "source")

    def __repr__(self) -> str:
        return f"SourceScopedStore({self.store!r}, source={self.source!r})"

    # -- the checks ---------------------------------------------------------------------

    def _mine(self, session_id: str) -> SessionInfo:
        info = self.store.get_session(session_id)
        if info is None:
            raise SessionNotFoundError(session_id)
        if info.source != self.source:
            raise AccessDeniedError(session_id, self.source)
        return info

    def _own(self, infos: Sequence[Any], session_of: Any = lambda x: x.session_id) -> list[Any]:
        sources: dict[str, str | None] = {}
        for item in infos:
            sid = session_of(item)
            if sid not in sources:
                info = self.store.get_session(sid)
                sources[sid] = None if info is None else info.source
        return [item for item in infos if sources[session_of(item)] == self.source]

    def _source(self, source: str | None) -> str:
        if source is not None and source != self.source:
            raise AccessDeniedError(None, self.source, f"this view reaches source {self.source!r} only, not {source!r}")
        return self.source

    # -- sessions ------------------------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        *,
        source: str | None = None,
        parent_session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        if parent_session_id is not None:
            self._mine(parent_session_id)
        return self.store.create_session(
            session_id, source=self._source(source), parent_session_id=parent_session_id, metadata=metadata
        )

    def create_sessions(
        self, session_ids: Sequence[str], *, source: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> list[SessionInfo]:
        return self.store.create_sessions(session_ids, source=self._source(source), metadata=metadata)

    def get_session(self, session_id: str) -> SessionInfo | None:
        info = self.store.get_session(session_id)
        if info is not None and info.source != self.source:
            raise AccessDeniedError(session_id, self.source)
        return info

    def end_session(self, session_id: str, reason: str) -> SessionInfo:
        self._mine(session_id)
        return self.store.end_session(session_id, reason)

    def sessions(self, *, source: str | None = None, **filters: Any) -> list[SessionInfo]:
        return self.store.sessions(source=self._source(source), **filters)

    def update_metadata(self, session_id: str, patch: Mapping[str, Any]) -> SessionInfo:
        self._mine(session_id)
        return self.store.update_metadata(session_id, patch)

    def delete_session(self, session_id: str) -> int:
        self._mine(session_id)
        return self.store.delete_session(session_id)

    def retract(self, session_id: str, **kwargs: Any) -> StoredMessage | None:
        self._mine(session_id)
        return self.store.retract(session_id, **kwargs)

    def prune_archive(self, *, older_than_s: float, session_id: str | None = None) -> int:
        if session_id is None:
            raise AccessDeniedError(None, self.source, "prune_archive of every source: name a session_id")
        self._mine(session_id)
        return self.store.prune_archive(older_than_s=older_than_s, session_id=session_id)

    def expire(self, idle_for_s: float, *, source: str | None = None, **kwargs: Any) -> list[str]:
        return self.store.expire(idle_for_s, source=self._source(source), **kwargs)

    def branch(self, session_id: str, at_seq: int, new_id: str, **kwargs: Any) -> SessionInfo:
        self._mine(session_id)
        return self.store.branch(session_id, at_seq, new_id, **kwargs)

    def children(self, session_id: str) -> list[SessionInfo]:
        self._mine(session_id)
        return self.store.children(session_id)

    def resolve(self, session_id: str) -> str:
        self._mine(session_id)
        return self.store.resolve(session_id)

    # -- messages ------------------------------------------------------------------------

    def append(self, session_id: str, messages: Message | Sequence[Message], **kwargs: Any) -> list[StoredMessage]:
        self._mine(session_id)
        return self.store.append(session_id, messages, **kwargs)

    def transcript(
        self, session_id: str, *, incarnation: str | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        self._mine(session_id)
        return self.store.transcript(session_id, incarnation=incarnation, limit=limit)

    def archive(self, session_id: str, *, incarnation: str | None = None) -> list[StoredMessage]:
        self._mine(session_id)
        return self.store.archive(session_id, incarnation=incarnation)

    def search(self, query: str, *, source: str | None = None, **kwargs: Any) -> list[SearchHit]:
        session_id = kwargs.get("session_id")
        if session_id is not None:
            self._mine(session_id)
        return self.store.search(query, source=self._source(source), **kwargs)

    def usage(self, session_id: str | None = None, source: str | None = None) -> Usage:
        if session_id is not None:
            self._mine(session_id)
        return self.store.usage(session_id, self._source(source))

    def compaction_detail(self, compaction_id: int) -> CompactionDetail:
        detail = self.store.compaction_detail(compaction_id)
        self._mine(detail.record.session_id)
        return detail

    def compactions(self, session_id: str) -> list[CompactionRecord]:
        self._mine(session_id)
        return self.store.compactions(session_id)

    # -- leases, turns, cooldowns -----------------------------------------------------------

    def acquire_lease(self, session_id: str, holder: str, ttl_s: float) -> Lease | None:
        self._mine(session_id)
        return self.store.acquire_lease(session_id, holder, ttl_s)

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease | None:
        self._mine(lease.session_id)
        return self.store.renew_lease(lease, ttl_s)

    def release_lease(self, lease: Lease) -> bool:
        self._mine(lease.session_id)
        return self.store.release_lease(lease)

    def reap_leases(self) -> int:
        raise AccessDeniedError(None, self.source, "reap_leases reaches every source")

    def current_lease(self, session_id: str) -> Lease | None:
        self._mine(session_id)
        return self.store.current_lease(session_id)

    def leases(self) -> list[Lease]:
        return self._own(self.store.leases())

    def commit_compaction(self, lease: Lease, **kwargs: Any) -> CompactionRecord:
        self._mine(lease.session_id)
        return self.store.commit_compaction(lease, **kwargs)

    def open_turn(self, session_id: str, holder: str, ttl_s: float, **kwargs: Any) -> TurnLease:
        self._mine(session_id)
        return self.store.open_turn(session_id, holder, ttl_s, **kwargs)

    def renew_turn(self, lease: TurnLease, ttl_s: float) -> TurnLease | None:
        self._mine(lease.session_id)
        return self.store.renew_turn(lease, ttl_s)

    def close_turn(self, lease: TurnLease) -> bool:
        self._mine(lease.session_id)
        return self.store.close_turn(lease)

    def seal_turn(self, session_id: str, *, mode: SealMode = "seal", lease: TurnLease | None = None) -> int | None:
        self._mine(session_id)
        if isinstance(lease, TurnLease):  # sealed where it lives now, a session of its lineage
            self._mine(lease.session_id)
        return self.store.seal_turn(session_id, mode=mode, lease=lease)

    def interrupt_turn(self, session_id: str) -> bool:
        self._mine(session_id)
        return self.store.interrupt_turn(session_id)

    def current_turn(self, session_id: str) -> TurnLease | None:
        self._mine(session_id)
        return self.store.current_turn(session_id)

    def turns(self, *, holder: str | None = None) -> list[TurnLease]:
        return self._own(self.store.turns(holder=holder))

    def interrupted_turns(self, holder: str) -> list[TurnLease]:
        return self._own(self.store.interrupted_turns(holder))

    def cooldown(self, session_id: str) -> Cooldown | None:
        self._mine(session_id)
        return self.store.cooldown(session_id)

    def arm_cooldown(self, session_id: str, seconds: float, error: str | None = None, **kwargs: Any) -> Cooldown:
        self._mine(session_id)
        return self.store.arm_cooldown(session_id, seconds, error, **kwargs)

    def clear_cooldown(self, session_id: str) -> None:
        self._mine(session_id)
        self.store.clear_cooldown(session_id)

    def restore_cooldown(self, session_id: str, snapshot: Cooldown | None) -> None:
        self._mine(session_id)
        self.store.restore_cooldown(session_id, snapshot)

    def now(self) -> float:
        return self.store.now()

    def close(self) -> None:
        """The view's own: nothing to close (the store stays open)."""

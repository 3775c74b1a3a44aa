"""The error hierarchy: every failure the library reports is a `TranscriptError`.

Each class's docstring is its default message; structured attributes carry the
details a caller needs to act (which session, which successor, who holds a lease).
Driver errors are re-raised as one of these with ``raise ... from exc``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # messages import these errors: a runtime import would be circular
    from ._messages import StoredMessage

__all__ = [
    "AccessDeniedError",
    "AskTimeoutError",
    "CompactionNotFoundError",
    "CompressionDisabledError",
    "CompressorLoopClosedError",
    "ConfigurationError",
    "DeadTurnError",
    "InvalidArgumentError",
    "InvalidLineageError",
    "InvalidMessageError",
    "InvalidMetadataError",
    "InvalidSessionIdError",
    "InvalidSessionSettingsError",
    "LLMCancelledError",
    "LLMCompressorError",
    "LLMTimeoutError",
    "LeaseHeldError",
    "LeaseLostError",
    "LineageForkedError",
    "ReadOnlyStoreError",
    "RegistryClosedError",
    "SchemaVersionError",
    "SessionBusyError",
    "SessionEndedError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SnapshotRetractedError",
    "StorageFullError",
    "StoreBusyError",
    "StoreReplacedError",
    "TranscriptError",
    "TurnHeldError",
    "TurnLostError",
    "TurnReplayedError",
]


class TranscriptError(Exception):
    """A session-actors operation failed."""

    def __init__(self, message: str | None = None) -> None:
        default = (type(self).__doc__ or "").strip().splitlines()[0] if type(self).__doc__ else ""
        super().__init__(message or default)


class InvalidMessageError(TranscriptError, ValueError):
    """The message is invalid (role, content type, JSON-ability or size)."""


class InvalidSessionIdError(TranscriptError, ValueError):
    """Session ids are 1-128 characters, without control characters or surrounding whitespace."""

    def __init__(self, session_id: object, message: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(message or f"invalid session id {session_id!r}: {self.__doc__}")


class InvalidArgumentError(TranscriptError, ValueError):
    """An argument is out of its documented range."""


class InvalidMetadataError(InvalidArgumentError, InvalidMessageError):
    """Session metadata must be a JSON-able mapping with str keys, at most 64 levels deep, without NUL."""


class InvalidLineageError(TranscriptError, ValueError):
    """A continuation needs a parent that ended with reason 'compression'."""

    def __init__(self, session_id: str, parent_session_id: str, message: str | None = None) -> None:
        self.session_id = session_id
        self.parent_session_id = parent_session_id
        super().__init__(message or f"cannot continue {parent_session_id!r} as {session_id!r}: {self.__doc__}")


class SessionNotFoundError(TranscriptError, LookupError):
    """No session has this id."""

    def __init__(self, session_id: str, message: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(message or f"session {session_id!r} not found")


class AccessDeniedError(TranscriptError, PermissionError):
    """The session belongs to another source than this store view reaches."""

    def __init__(self, session_id: str | None, source: str, message: str | None = None) -> None:
        self.session_id = session_id
        self.source = source
        super().__init__(
            message or f"session {session_id!r} is not of source {source!r}, the only one this view reaches"
        )


class CompactionNotFoundError(TranscriptError, LookupError):
    """No compaction record has this id."""

    def __init__(self, compaction_id: int, message: str | None = None) -> None:
        self.compaction_id = compaction_id
        super().__init__(message or f"compaction {compaction_id!r} not found")


class SessionExistsError(TranscriptError):
    """A session with this id already exists."""

    def __init__(self, session_id: str, message: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(message or f"session {session_id!r} already exists")


class SessionEndedError(TranscriptError):
    """The session has ended; write to its live successor instead."""

    def __init__(
        self,
        session_id: str,
        successor_id: str | None = None,
        end_reason: str | None = None,
        message: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.successor_id = successor_id
        self.end_reason = end_reason
        hint = f"; live successor is {successor_id!r}" if successor_id else ""
        super().__init__(message or f"session {session_id!r} has ended (reason {end_reason!r}){hint}")


class LineageForkedError(TranscriptError):
    """A compression-ended session has more than one continuation: the lineage forked."""

    def __init__(self, session_id: str, children: Sequence[str], message: str | None = None) -> None:
        self.session_id = session_id
        self.children = tuple(children)
        super().__init__(message or f"lineage of {session_id!r} forked into {list(self.children)!r}")


class LeaseHeldError(TranscriptError):
    """Another holder has a live compaction lease on this session."""

    def __init__(self, holder: str | None, expires_at: float | None, message: str | None = None) -> None:
        self.holder = holder
        self.expires_at = expires_at
        super().__init__(message or f"lease held by {holder!r} until {expires_at!r}")


class LeaseLostError(TranscriptError):
    """The lease was lost (expired, taken over or released): the commit was fenced off."""

    def __init__(
        self,
        session_id: str | None = None,
        holder: str | None = None,
        token: int | None = None,
        message: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.holder = holder
        self.token = token
        super().__init__(message or f"lease on {session_id!r} (holder {holder!r}, token {token!r}) is no longer held")


class SessionBusyError(TranscriptError):
    """Another holder's turn is open on this session (``on_busy="reject"``, or a held
    call that waited past its deadline). ``holder`` names it and ``expires_at`` (store
    clock, epoch seconds) is when its lease lapses unless renewed."""

    def __init__(
        self,
        session_id: str | None = None,
        holder: str | None = None,
        expires_at: float | None = None,
        token: int | None = None,
        message: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.holder = holder
        self.expires_at = expires_at
        self.token = token
        super().__init__(
            message or f"session {session_id!r} is busy: a turn of {holder!r} is open (lease until {expires_at!r})"
        )


class TurnHeldError(SessionBusyError):
    """The store refused a write: another holder's turn lease on the session is live
    (``open_turn`` of another holder, or an append not carrying its token). ``key`` is
    set when ``open_turn(key=K)`` met turn K itself still open (a redelivery while the
    first delivery runs): wait for it, then replay."""

    key: str | None = None


class DeadTurnError(TurnHeldError):
    """The store refused a write: the session holds a dead turn, one whose lease lapsed
    before its holder closed it. Every append, retract and ``open_turn`` is refused (its
    holder's own included, nothing written) until ``seal_turn`` seals it: the turn may
    have ended mid-way (a tool call without its result), so the transcript is not
    written to before someone decides what becomes of its messages. ``holder``,
    ``expires_at`` and ``token`` name the dead turn."""

    def __init__(
        self,
        session_id: str | None = None,
        holder: str | None = None,
        expires_at: float | None = None,
        token: int | None = None,
        message: str | None = None,
    ) -> None:
        super().__init__(
            session_id,
            holder,
            expires_at,
            token,
            message
            or (
                f"session {session_id!r} holds a dead turn (token {token!r} of {holder!r}, lease lapsed at "
                f"{expires_at!r}): seal it (seal_turn) before writing"
            ),
        )


class TurnReplayedError(TranscriptError):
    """A turn with this key was completed already: nothing was opened. ``messages`` are
    the messages that turn stored, in order (each as it lives now: its live copy where a
    compaction carried it, else the archived original), for the caller to answer with
    instead of running the turn again."""

    def __init__(
        self, session_id: str, key: str, messages: Sequence[StoredMessage] = (), message: str | None = None
    ) -> None:
        self.session_id = session_id
        self.key = key
        self.messages: tuple[StoredMessage, ...] = tuple(messages)
        super().__init__(
            message
            or f"the turn with key {key!r} on {session_id!r} was completed already ({len(self.messages)} message(s))"
        )


class TurnLostError(SessionBusyError):
    """This turn's lease lapsed before its holder renewed it (the process was paused
    past ``lease_ttl_s``, or the store was unreachable that long), so another path
    may have written since: the turn is no longer whole, and the rest of it is
    refused (nothing written). Leave the turn and open a new one."""


class StoreBusyError(TranscriptError):
    """The store stayed busy (locked) past the patience budget."""


class StoreReplacedError(TranscriptError):
    """The SQLite file the store opened was deleted or replaced under it: its writes
    would land in a file nobody reads any more, so each is refused (nothing written)."""


class StorageFullError(TranscriptError):
    """The disk (or the database's storage) is full: nothing was written; free space and retry."""


class ReadOnlyStoreError(TranscriptError):
    """The store was opened read-only (``readonly=True``): it never writes."""

    def __init__(self, operation: str | None = None, message: str | None = None) -> None:
        self.operation = operation
        super().__init__(message or (f"{operation}: the store was opened read-only" if operation else None))


class SnapshotRetractedError(TranscriptError):
    """The message at the compaction's watermark was retracted: the snapshot is stale."""

    def __init__(self, session_id: str, watermark: int, message: str | None = None) -> None:
        self.session_id = session_id
        self.watermark = watermark
        super().__init__(
            message or f"the message at seq {watermark} of {session_id!r} was retracted after the snapshot"
        )


class CompressionDisabledError(TranscriptError):
    """Compression is disabled for this handle (review handles never compact)."""

    def __init__(self, session_id: str | None = None, message: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(message)


class ConfigurationError(TranscriptError):
    """The configuration is invalid or a required optional dependency is missing."""


class SchemaVersionError(TranscriptError):
    """The database schema version is not the one this code runs on."""

    def __init__(self, found: int, supported: int, message: str | None = None) -> None:
        self.found = found
        self.supported = supported
        if message is None and found > supported:
            message = (
                f"database schema version {found} is newer than supported version {supported}; upgrade session-actors"
            )
        elif message is None:
            message = (
                f"database schema version {found} is older than version {supported} of"
                " this code; run `session-actors migrate` to upgrade it"
            )
        super().__init__(message)


# -- raised by the runtime (actors) ---------------------------------------------------


class AskTimeoutError(TranscriptError, TimeoutError):
    """The session actor did not answer within the ask timeout."""


class RegistryClosedError(TranscriptError):
    """The registry is closed; open a new one."""


class CompressorLoopClosedError(TranscriptError, RuntimeError):
    """The registry closed its compressor loop; no more async compressors run on it."""


class InvalidSessionSettingsError(InvalidArgumentError, TypeError):
    """``session_settings`` must be a ``SessionSettings`` or a dict of its fields."""


# -- raised by LLMCompressor ------------------------------------------------------------


class LLMCompressorError(TranscriptError):
    """The summary request failed (HTTP error, unreachable endpoint or malformed reply)."""

    def __init__(self, message: str | None = None, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class LLMTimeoutError(LLMCompressorError, TimeoutError):
    """The summary request took longer than its timeout."""


class LLMCancelledError(LLMCompressorError):
    """The summary request was cancelled while in flight."""

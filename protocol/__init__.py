"""Pure values of session-actors: messages, records, outcomes and errors.

The mailbox commands (`protocol._commands`) and the snapshot rules
(`protocol._turns`) are the runtime's own: import them from their modules.

No I/O, no threads, no drivers: everything here is safe to share between threads.
"""

from ._messages import (
    DEFAULT_MAX_CONTENT_BYTES,
    SUMMARY_PREFIX,
    Message,
    StoredMessage,
    set_content_limit,
    transcripts_equal,
    validate_session_id,
)
from ._outcomes import (
    CANCEL_REASONS,
    SKIP_REASONS,
    CompressionOutcome,
    CompressionStatus,
)
from ._records import (
    END_REASON_COMPRESSION,
    MODES,
    CompactionRecord,
    Cooldown,
    Lease,
    SessionInfo,
    TurnLease,
)
from .errors import (
    CompressionDisabledError,
    ConfigurationError,
    InvalidArgumentError,
    InvalidLineageError,
    InvalidMessageError,
    InvalidMetadataError,
    InvalidSessionIdError,
    LeaseHeldError,
    LeaseLostError,
    LineageForkedError,
    ReadOnlyStoreError,
    SchemaVersionError,
    SessionBusyError,
    SessionEndedError,
    SessionExistsError,
    SessionNotFoundError,
    SnapshotRetractedError,
    StorageFullError,
    StoreBusyError,
    TranscriptError,
    TurnHeldError,
    TurnLostError,
)

__all__ = [
    "CANCEL_REASONS",
    "DEFAULT_MAX_CONTENT_BYTES",
    "END_REASON_COMPRESSION",
    "MODES",
    "SKIP_REASONS",
    "SUMMARY_PREFIX",
    "CompactionRecord",
    "CompressionDisabledError",
    "CompressionOutcome",
    "CompressionStatus",
    "ConfigurationError",
    "Cooldown",
    "InvalidArgumentError",
    "InvalidLineageError",
    "InvalidMessageError",
    "InvalidMetadataError",
    "InvalidSessionIdError",
    "Lease",
    "LeaseHeldError",
    "LeaseLostError",
    "LineageForkedError",
    "Message",
    "ReadOnlyStoreError",
    "SchemaVersionError",
    "SessionBusyError",
    "SessionEndedError",
    "SessionExistsError",
    "SessionInfo",
    "SessionNotFoundError",
    "SnapshotRetractedError",
    "StorageFullError",
    "StoreBusyError",
    "StoredMessage",
    "TranscriptError",
    "TurnHeldError",
    "TurnLease",
    "TurnLostError",
    "set_content_limit",
    "transcripts_equal",
    "validate_session_id",
]

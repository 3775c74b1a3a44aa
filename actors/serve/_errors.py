"""Every error the service answers, as one JSON shape: ``{"error": TypeName,
"message": str}`` with the status that fits the `TranscriptError` type.

An exception that is not a `TranscriptError` is a bug of ours: it is logged with its
traceback and answered as ``InternalError`` with a fixed message, so neither a
traceback nor whatever it held (a database URL, a token) reaches a client.
"""

from __future__ import annotations

import logging
from typing import Any

from protocol import errors

__all__ = ["ServiceError", "error_body", "status_of"]

logger = logging.getLogger("session_actors.serve")

#: The first entry a `TranscriptError`'s class is an instance of decides its status,
#: so a subclass is listed before its base.
_STATUSES: tuple[tuple[type[errors.TranscriptError], int], ...] = (
    (errors.AccessDeniedError, 403),
    (errors.SessionNotFoundError, 404),
    (errors.CompactionNotFoundError, 404),
    (errors.InvalidArgumentError, 400),
    (errors.InvalidMessageError, 400),
    (errors.InvalidSessionIdError, 400),
    (errors.InvalidLineageError, 400),
    (errors.SessionExistsError, 409),
    (errors.SessionEndedError, 409),
    (errors.LineageForkedError, 409),
    (errors.SessionBusyError, 409),
    (errors.LeaseHeldError, 409),
    (errors.LeaseLostError, 409),
    (errors.SnapshotRetractedError, 409),
    (errors.CompressionDisabledError, 409),
    (errors.TurnReplayedError, 409),
    (errors.StoreBusyError, 503),
    (errors.StorageFullError, 503),
    (errors.ReadOnlyStoreError, 503),
    (errors.StoreReplacedError, 503),
    (errors.SchemaVersionError, 503),
    (errors.AskTimeoutError, 503),
    (errors.RegistryClosedError, 503),
)


class ServiceError(Exception):
    """An answer of the service's own that no store call raised: a missing or wrong
    token (401), a scope or source the token lacks (403), an unparseable or oversized
    body (422, 413), too many requests in flight (503)."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def status_of(exc: BaseException) -> int:
    if isinstance(exc, ServiceError):
        return exc.status
    for kind, status in _STATUSES:
        if isinstance(exc, kind):
            return status
    return 500


def error_body(exc: BaseException) -> dict[str, Any]:
    """The JSON body for ``exc`` (logged first when it is a bug of ours)."""
    if isinstance(exc, ServiceError):
        return {"error": exc.kind, "message": exc.message}
    if isinstance(exc, errors.TranscriptError):
        return {"error": type(exc).__name__, "message": str(exc)}
    logger.error("internal error answering a request", exc_info=exc)
    return {"error": "InternalError", "message": "internal error (logged by the server)"}

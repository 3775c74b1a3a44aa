"""What every route shares: the store and the registry of this process, who a request
is, which sessions its token may reach, and the turns clients opened by id.

The service is one process with one `SessionRegistry`; several services on one
database are several processes, whose guarantees are the library's (turn leases,
fencing, idempotency keys in the store).
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from persistence import SourceScopedStore, Store
from protocol import AccessDeniedError, SessionInfo, SessionNotFoundError, StoredMessage
from protocol._jsonable import message_dict, session_dict

from .. import SessionHandle, SessionRegistry, Turn
from ._errors import ServiceError
from ._events import EventHub
from ._tokens import Token, TokenFile

__all__ = ["LOCAL", "OpenTurn", "Service"]

#: Who every request is when the service runs with ``--insecure-local`` (no tokens).
LOCAL = Token("local", frozenset({"admin"}), None, "")
#: Session handles kept (a handle is a few dozen bytes; its actor is what costs, and
#: the registry evicts those on its own).
_HANDLES_KEPT = 100_000


@dataclass(slots=True)
class OpenTurn:
    """A turn a client opened with ``POST .../turns`` and closes by its id."""

    session_id: str
    owner: str  # the digest of the token that opened it: only that token may use or close it
    source: str  # the session's source, checked against the token's on every use
    handle: SessionHandle
    turn: Turn
    opened: float


class Service:
    def __init__(self, store: Store, registry: SessionRegistry, tokens: TokenFile | None, hub: EventHub) -> None:
        self.store, self.registry, self.tokens, self.hub = store, registry, tokens, hub
        self._handles: OrderedDict[str, tuple[SessionHandle, str]] = OrderedDict()
        self._turns: dict[str, OpenTurn] = {}
        #: requests in flight now (set by the application to its `RequestLimits`' count)
        self.requests_in_flight: Callable[[], int] = lambda: 0

    # -- who -------------------------------------------------------------------------

    def identify(self, authorization: str | None) -> Token:
        if self.tokens is None:
            return LOCAL
        scheme, _, secret = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise ServiceError(401, "Unauthorized", "send 'Authorization: Bearer TOKEN'")
        token = self.tokens.identify(secret.strip())
        if token is None:
            raise ServiceError(401, "Unauthorized", "unknown token")
        return token

    @staticmethod
    def require(token: Token, scope: str) -> None:
        if not token.allows(scope):
            raise ServiceError(403, "Forbidden", f"the token {token.name!r} lacks the {scope!r} scope")

    @staticmethod
    def check_source(token: Token, source: str | None) -> None:
        if token.source is not None and source != token.source:
            raise AccessDeniedError(
                None, token.source, f"the token {token.name!r} reaches only source {token.source!r}"
            )

    @staticmethod
    def messages_view(token: Token, messages: list[StoredMessage]) -> list[dict[str, Any]]:
        """Stored messages as ``token`` may see them: a token without the ``read`` scope
        gets only where each one is (``id``, ``session_id``, ``seq``, ``state``,
        ``key``), never what another client wrote."""
        if token.allows("read"):
            return [message_dict(m) for m in messages]
        return [
            {"id": m.id, "session_id": m.session_id, "seq": m.seq, "state": m.state, "key": m.key} for m in messages
        ]

    @staticmethod
    def session_view(token: Token, info: SessionInfo) -> dict[str, Any]:
        """A session row as ``token`` may see it: without ``read``, its ``id`` and
        ``live`` alone (no source, metadata or timestamps)."""
        if token.allows("read"):
            return session_dict(info)
        return {"id": info.id, "live": info.live}

    def store_for(self, token: Token) -> Store:
        """The store as ``token`` may see it: a token limited to one source gets a
        `SourceScopedStore`, which refuses every read and write of another source."""
        if token.source is None:
            return self.store
        return SourceScopedStore(self.store, token.source)

    # -- sessions ----------------------------------------------------------------------

    async def info(self, token: Token, session_id: str) -> SessionInfo:
        """The session row, if the token may reach it (404 unknown, 403 other source)."""
        info = await asyncio.to_thread(self.store_for(token).get_session, session_id)
        if info is None:
            raise SessionNotFoundError(session_id)
        return info

    async def handle(self, token: Token, session_id: str) -> SessionHandle:
        """A handle on an existing session the token may reach. Never creates one:
        ``PUT /sessions/{id}`` does."""
        kept = self._handles.get(session_id)
        if kept is None:
            info = await self.info(token, session_id)
            handle = await self.registry.session_async(session_id, source=info.source)
            kept = self._handles[session_id] = (handle, info.source)
            if len(self._handles) > _HANDLES_KEPT:
                self._handles.popitem(last=False)
        else:
            self._handles.move_to_end(session_id)
        self.check_source(token, kept[1])
        return kept[0]

    def forget(self, session_id: str) -> None:
        """Drop what is kept of a session that was erased or found gone."""
        self._handles.pop(session_id, None)

    # -- turns -------------------------------------------------------------------------

    def keep_turn(self, session_id: str, token: Token, source: str, handle: SessionHandle, turn: Turn) -> str:
        self._prune_turns()
        turn_id = secrets.token_urlsafe(12)
        self._turns[turn_id] = OpenTurn(session_id, token.digest, source, handle, turn, time.monotonic())
        return turn_id

    def turn(self, token: Token, session_id: str, turn_id: str, scope: str) -> OpenTurn:
        """The open turn ``turn_id`` of ``session_id``, for the token that opened it
        alone (its digest, not its name, is compared), checked against the token's
        ``scope`` and source as any other use of the session is."""
        self.require(token, scope)
        kept = self._turns.get(turn_id)
        if kept is None or kept.session_id != session_id:
            raise ServiceError(404, "TurnNotFound", f"no open turn {turn_id!r} on {session_id!r}")
        if not hmac.compare_digest(kept.owner, token.digest):
            raise ServiceError(403, "Forbidden", f"turn {turn_id!r} was opened by another token")
        self.check_source(token, kept.source)
        return kept

    def drop_turn(self, turn_id: str) -> None:
        self._turns.pop(turn_id, None)

    def _prune_turns(self) -> None:
        """Forget turns left open past ``max_turn_s``: the actor closed them already
        (a client that never closes its turn holds the others that long, no longer)."""
        limit = self.registry.policy.max_turn_s + self.registry.policy.ask_timeout_s
        now = time.monotonic()
        for turn_id, kept in list(self._turns.items()):
            if now - kept.opened > limit:
                del self._turns[turn_id]

    def stats(self) -> dict[str, Any]:
        return {
            "open_http_turns": len(self._turns),
            "event_subscribers": self.hub.subscribers(),
            "http_requests_in_flight": self.requests_in_flight(),
        }

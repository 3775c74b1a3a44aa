"""What every route shares: the store and the registry of this process, who a request
is, which sessions its token may reach, and the turns clients opened by id.

The service is one process with one `SessionRegistry`; several services on one
database are several processes, whose guarantees are the library's (turn leases,
fencing, idempotency keys in the store).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from persistence import SourceScopedStore, Store
from persistence.internal import features_of
from protocol import AccessDeniedError, SessionInfo, SessionNotFoundError, StoredMessage, TurnLostError
from protocol._jsonable import message_dict, session_dict

from .. import SessionHandle, SessionRegistry, Turn
from ._errors import ServiceError
from ._events import EventHub
from ._http_turns import AdoptedTurn, LocalTurn, TurnAdopter
from ._tokens import Token, TokenFile
from ._turn_ids import TurnIds, TurnRef

__all__ = ["LOCAL", "Service"]

logger = logging.getLogger("session_actors.serve")

#: Who every request is when the service runs with ``--insecure-local`` (no tokens).
LOCAL = Token("local", frozenset({"admin"}), None, "")
#: Session handles kept (a handle is a few dozen bytes; its actor is what costs, and
#: the registry evicts those on its own).
_HANDLES_KEPT = 100_000


class Service:
    def __init__(self, store: Store, registry: SessionRegistry, tokens: TokenFile | None, hub: EventHub) -> None:
        self.store, self.registry, self.tokens, self.hub = store, registry, tokens, hub
        self._clock_here = features_of(store).local_clock
        self._handles: OrderedDict[str, tuple[SessionHandle, str]] = OrderedDict()
        self._turns: dict[str, tuple[LocalTurn, float]] = {}  # turn id -> (turn, monotonic time opened)
        self.turn_ids = TurnIds(tokens)
        self.adopter = TurnAdopter(store, registry.policy, self._reconcile)
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

    async def store_now(self) -> float:
        """The store's clock: read on the event loop when it is this process's own (no
        I/O), else on a worker thread (a query)."""
        return self.store.now() if self._clock_here else await asyncio.to_thread(self.store.now)

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

    async def keep_turn(self, session_id: str, token: Token, handle: SessionHandle, turn: Turn) -> str:
        """The id of a turn just opened through ``handle``: it names the turn's durable
        lease (see `TurnIds`), so any server of this database and token file can use it."""
        ref = await asyncio.to_thread(self._lease_of, handle)
        self._prune_turns()
        turn_id = self.turn_ids.mint(session_id, token.digest, ref)
        self._turns[turn_id] = (LocalTurn(session_id, ref, handle, turn), time.monotonic())
        self.adopter.start()
        return turn_id

    def _lease_of(self, handle: SessionHandle) -> TurnRef:
        """This registry's lease on the handle's live session (one turn per session
        per registry: the gate holds the others), read back from the store."""
        live_id = handle.session_id
        for _ in range(5):  # a rotation may move it between the open and this read: follow it
            lease = self.store.current_turn(live_id)
            if lease is not None and lease.holder == self.registry.holder:
                return TurnRef(lease.holder, lease.token, self.store.now())
            live_id = self.store.resolve(live_id)
        raise TurnLostError(handle.session_id, message="the turn lost its lease as it opened: open a new one")

    async def turn(self, token: Token, session_id: str, turn_id: str, scope: str) -> LocalTurn | AdoptedTurn:
        """The turn ``turn_id`` of ``session_id``, for the token that opened it alone
        (its digest, not its name, is compared), checked against the token's ``scope``
        and the session's source as any other use of the session is. A turn another
        server opened (before a restart, or another worker) is adopted: used through
        its durable lease."""
        self.require(token, scope)
        ref = self.turn_ids.read(turn_id, session_id, token.digest)
        await self.info(token, session_id)  # the source check: a token may have lost its reach
        kept = self._turns.get(turn_id)
        if kept is not None:
            return kept[0]
        adopted = AdoptedTurn(self.store, self.registry.policy, session_id, ref)
        self.adopter.adopt(adopted)
        return adopted

    def drop_turn(self, turn_id: str, turn: LocalTurn | AdoptedTurn) -> None:
        self._turns.pop(turn_id, None)
        self.adopter.forget(turn.ref.token)

    def _reconcile(self) -> None:
        """Close this process's own turns whose lease is gone: another worker (or a
        restarted server's client) closed it, or it lapsed. Until then this
        registry's gate would hold its other calls to the session behind a turn that
        no longer exists."""
        kept_now = list(self._turns.items())  # before the read: each of these was open by then
        if not kept_now:
            return
        live = {lease.token for lease in self.store.turns(holder=self.registry.holder)}
        for turn_id, (kept, _) in kept_now:
            if kept.ref.token not in live and self._turns.pop(turn_id, None) is not None:
                try:
                    kept.turn.__exit__(None, None, None)
                except Exception:
                    logger.warning("closing the turn %s whose lease is gone failed", turn_id, exc_info=True)

    def _prune_turns(self) -> None:
        """Forget turns left open past ``max_turn_s``: the actor closed them already
        (a client that never closes its turn holds the others that long, no longer)."""
        limit = self.registry.policy.max_turn_s + self.registry.policy.ask_timeout_s
        now = time.monotonic()
        for turn_id, (_, opened) in list(self._turns.items()):
            if now - opened > limit:
                del self._turns[turn_id]

    def stats(self) -> dict[str, Any]:
        return {
            "open_http_turns": len(self._turns) + len(self.adopter),
            "event_subscribers": self.hub.subscribers(),
            "http_requests_in_flight": self.requests_in_flight(),
        }

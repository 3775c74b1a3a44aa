"""Turns clients opened over HTTP, used by their id.

A turn opened through this process is a `LocalTurn`: the registry's own turn (its
gate holds this process's other calls to the session, its turn keeper renews the
lease). A turn id this process did not open (the server that opened it was killed
and restarted, or another worker opened it) names a durable lease, and becomes an
`AdoptedTurn`: its appends, retracts and close go straight to the store carrying the
lease's token, each renewing the lease first (a lease lapsed or taken since is a 409
`TurnLostError`); `TurnAdopter` keeps renewing the adopted turns this process saw
until they close or reach ``max_turn_s``, then seals them as the registry seals its
own overdue turns.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from persistence import Store
from protocol import Message, SessionEndedError, StoredMessage, TurnLease, TurnLostError

from .. import SessionHandle, Turn
from ..compaction import CompactionPolicy
from ._gone import unless_gone
from ._turn_ids import TurnRef

__all__ = ["AdoptedTurn", "LocalTurn", "TurnAdopter"]

logger = logging.getLogger("session_actors.serve")


@dataclass(slots=True)
class LocalTurn:
    """A turn this process opened: the registry's `Turn` on its own handle."""

    session_id: str
    ref: TurnRef
    handle: SessionHandle
    turn: Turn

    @property
    def live_id(self) -> str:
        return self.handle.session_id

    async def append(self, request: Request, messages: list[Message]) -> list[StoredMessage]:
        return await unless_gone(request, self.handle.append_async(messages))

    async def retract(self, request: Request) -> StoredMessage | None:
        return await unless_gone(request, self.handle.retract_async())

    async def interrupted(self) -> bool:
        return self.turn.interrupted

    async def close(self) -> None:
        await self.turn.__aexit__(None, None, None)


class AdoptedTurn:
    """A turn named by its durable lease alone (see the module's docstring)."""

    def __init__(self, store: Store, policy: CompactionPolicy, session_id: str, ref: TurnRef) -> None:
        self._store, self._policy = store, policy
        self.session_id, self.ref = session_id, ref
        self.live_id = session_id

    def _lease(self) -> TurnLease:
        return TurnLease(self.live_id, self.ref.holder, self.ref.token, 0.0)

    def renew(self) -> TurnLease:
        """The lease renewed for ``lease_ttl_s``; `TurnLostError` when it lapsed,
        closed or was taken (a stale turn id after a restart, say)."""
        renewed = self._store.renew_turn(self._lease(), self._policy.lease_ttl_s)
        if renewed is None:
            raise TurnLostError(
                self.session_id,
                message=f"turn {self.ref.token} on {self.session_id!r} has ended (closed, lapsed or taken): "
                "open a new one",
            )
        self.live_id = renewed.session_id  # a rotation carries the lease to the continuation
        return renewed

    def _under_lease(self, write: Any) -> Any:
        for _ in range(3):  # a rotation may commit between the renewal and the write
            lease = self.renew()
            try:
                return write(lease)
            except SessionEndedError:
                continue
        return write(self.renew())

    async def append(self, request: Request, messages: list[Message]) -> list[StoredMessage]:
        def write(lease: TurnLease) -> list[StoredMessage]:
            return self._store.append(lease.session_id, messages, turn=lease)

        return await asyncio.to_thread(self._under_lease, write)

    async def retract(self, request: Request) -> StoredMessage | None:
        def write(lease: TurnLease) -> StoredMessage | None:
            return self._store.retract(lease.session_id, turn=lease)

        return await asyncio.to_thread(self._under_lease, write)

    async def interrupted(self) -> bool:
        return (await asyncio.to_thread(self.renew)).interrupted

    async def close(self) -> None:
        if not await asyncio.to_thread(self._store.close_turn, self._lease()):
            self.renew()  # the lease is no longer this turn's: say so (TurnLostError)


class TurnAdopter:
    """Renews the turns this process adopted, every third of ``lease_ttl_s``, so a
    client that goes on after a restart keeps its turn while it thinks; a turn open
    ``max_turn_s`` (store clock, from when it opened) is sealed and forgotten. Every
    `TICK_S` it also runs ``reconcile`` (the service closes its own turns whose lease
    another process closed)."""

    TICK_S = 0.25

    def __init__(self, store: Store, policy: CompactionPolicy, reconcile: Any) -> None:
        self._store, self._policy, self._reconcile = store, policy, reconcile
        self._turns: dict[int, AdoptedTurn] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start tending (once a turn was opened or adopted here)."""
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="serve-turn-adopter", daemon=True)
                self._thread.start()

    def adopt(self, turn: AdoptedTurn) -> None:
        with self._lock:
            self._turns[turn.ref.token] = turn
        self.start()

    def forget(self, token: int) -> None:
        with self._lock:
            self._turns.pop(token, None)

    def __len__(self) -> int:
        return len(self._turns)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(10)

    def _run(self) -> None:
        renewed_at = time.monotonic()
        while not self._stop.wait(self.TICK_S):
            try:
                self._reconcile()
            except Exception:
                logger.warning("reconciling this server's turns failed", exc_info=True)
            if time.monotonic() - renewed_at >= self._policy.lease_ttl_s / 3:
                renewed_at = time.monotonic()
                self._renew_all()

    def _renew_all(self) -> None:
        with self._lock:
            turns = list(self._turns.values())
        if not turns:
            return
        try:
            now = self._store.now()
        except Exception:
            logger.warning("reading the store's clock failed; adopted turns renew on use", exc_info=True)
            return
        for turn in turns:
            self._tend(turn, now)

    def _tend(self, turn: AdoptedTurn, now: float) -> None:
        try:
            if now - turn.ref.opened_at >= self._policy.max_turn_s:
                self._store.seal_turn(turn.live_id, mode=self._policy.dead_turn, lease=turn._lease())
                self.forget(turn.ref.token)
            else:
                turn.renew()
        except TurnLostError:
            self.forget(turn.ref.token)
        except Exception:
            logger.warning("renewing the adopted turn %d failed", turn.ref.token, exc_info=True)

"""`TurnLeases`: the `SessionActor` steps that keep turns whole across processes.

A turn opened here takes the store's turn lease for the live session
(`Store.open_turn`); the turn's appends carry it; closing the turn releases it.
While another holder's lease is live the store refuses this registry's writes
(`TurnHeldError`); the turn gate then holds every mutating call (`TurnGate.foreign`)
until the registry's turn keeper (`actors._turn_keeper`) sees that lease end and
asks the actor to serve them again, in arrival order. A turn that meets another
turn open (here or elsewhere) follows its ``on_busy`` policy: wait (``"enqueue"``),
refuse (``"reject"``: `SessionBusyError`), or ask the holder to end it first
(``"interrupt"``, and ``"rollback"``, which then retracts what that turn appended).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from protocol import SessionBusyError, SessionEndedError, TurnHeldError, TurnLease
from protocol._commands import OpenTurn
from protocol.errors import DeadTurnError, RegistryClosedError, TurnReplayedError

from ..scheduling import hooks as _sched
from .request import Request
from .routing import Router
from .turns import TurnTicket

if TYPE_CHECKING:
    from persistence import Store

    from ..compaction._policy import CompactionPolicy
    from .turns import TurnGate, _Turn

__all__ = ["LeaseHost", "TurnLeases", "renew_lease"]

logger = logging.getLogger("session_actors.turns")

#: An open turn that follows its session's successors more often than this is a bug.
_MAX_REDIRECTS = 16


class LeaseHost(Protocol):
    """What the turn-lease steps need from their actor."""

    @property
    def live_id(self) -> str: ...

    @property
    def stopping(self) -> bool:
        """The actor is stopping: a held call is answered busy at once."""
        ...

    def answer(self, reply: Future[Any], value: Any = None, error: BaseException | None = None) -> None: ...

    def follow(self, exc: SessionEndedError, session_id: str) -> None:
        """Move to the successor of the ended ``session_id`` (`Forwarded` when another actor serves it)."""
        ...

    def release_held(self) -> None:
        """Serve the calls held behind a turn again, in arrival order."""
        ...


class TurnLeases:
    """The turn-lease steps of one `SessionActor`: open a turn under the store's
    lease, hold calls behind another holder's turn and serve them once it ended,
    seal dead and overdue turns. Every method runs holding the actor's exclusive
    lock; the actor makes one when a turn first needs it (most sessions never do)."""

    __slots__ = ("_holder", "_host", "_incarnation", "_policy", "_registry", "_store", "_turns")

    def __init__(
        self,
        host: LeaseHost,
        *,
        turns: TurnGate,
        store: Store,
        registry: Router,
        policy: CompactionPolicy,
        holder: str,
        incarnation: str,
    ) -> None:
        self._host = host
        self._turns = turns
        self._store = store
        self._registry = registry
        self._policy = policy
        self._holder = holder
        self._incarnation = incarnation

    def open_turn(self, request: Request, command: OpenTurn) -> None:
        """Open ``request``'s turn: take the store's lease, or act on ``on_busy``."""
        joined = self._turns.join(request.sender)
        if joined is not None:
            self._host.answer(request.reply, joined)
            return
        try:
            self._registry._check_accepting_turns()  # a draining close lets open turns finish only
        except RegistryClosedError as exc:
            self._host.answer(request.reply, error=exc)
            return
        on_busy = command.on_busy or self._policy.on_busy
        try:
            lease = self._take_lease(request, command.key)
        except TurnReplayedError as exc:  # completed before: nothing opens, its messages answer
            self._host.answer(request.reply, TurnTicket(0, threading.Event(), replay=exc.messages))
            return
        except TurnHeldError as exc:
            if exc.key is not None and on_busy in ("interrupt", "rollback"):
                on_busy = "enqueue"  # the turn of its own key: wait for it, then replay it
            self._busy(request, exc, on_busy)
            return
        self._host.answer(request.reply, self._turns.open(request.sender, lease, command.key))
        if lease.rolled_back:
            logger.info(
                "turn on %s rolled back %d message(s) of the turn it interrupted", self._host.live_id, lease.rolled_back
            )

    def _take_lease(self, request: Request, key: str | None = None) -> TurnLease:
        """The store's turn lease for the live session (following its successors,
        sealing a dead turn found there first)."""
        extra = {} if key is None else {"key": key}  # a store wrapper need not know keys
        for _ in range(_MAX_REDIRECTS):
            session_id = self._host.live_id
            try:
                return self._store.open_turn(
                    session_id,
                    self._holder,
                    self._policy.lease_ttl_s,
                    incarnation=self._incarnation,
                    rollback=request.rollback,
                    **extra,
                )
            except SessionEndedError as exc:
                self._host.follow(exc, session_id)  # Forwarded when another actor serves it
            except DeadTurnError as exc:
                self.seal_dead_turn(exc)
        raise SessionEndedError(self._host.live_id, None, None, "too many successor redirects")

    def seal_dead_turn(self, exc: DeadTurnError) -> None:
        """A dead turn (its holder died, froze past its lease or ran past
        ``max_turn_s``) refused a write: seal it as ``policy.dead_turn`` says, so the
        write can go on (a turn another path sealed first answers None: also done)."""
        session_id = self._host.live_id
        sealed = self._store.seal_turn(session_id, mode=self._policy.dead_turn)
        if sealed is not None:
            logger.warning(
                "sealed the dead turn %s of %r on %s (%s: %d message(s) retracted)",
                exc.token,
                exc.holder,
                session_id,
                self._policy.dead_turn,
                sealed,
            )

    def _busy(self, request: Request, exc: TurnHeldError, on_busy: str) -> None:
        """Another holder's turn is open: refuse, or ask it to end and wait."""
        if not self._refused_or_asked(request, exc, on_busy):
            self.hold_foreign(request, exc)

    def _refused_or_asked(self, request: Request, exc: TurnHeldError, on_busy: str) -> bool:
        """Another holder's turn is open: True when ``request`` is refused now
        (``"reject"``); otherwise that turn is asked to end as ``on_busy`` says."""
        if on_busy == "reject":
            self._host.answer(
                request.reply, error=SessionBusyError(self._host.live_id, exc.holder, exc.expires_at, exc.token)
            )
            return True
        if on_busy in ("interrupt", "rollback") and exc.token is not None and request.interrupted != exc.token:
            request.interrupted = exc.token
            if on_busy == "rollback" and request.rollback is None:
                request.rollback = exc.token
            try:
                self._store.interrupt_turn(self._host.live_id)
            except Exception:
                logger.warning(
                    "interrupting the turn of %r on %s failed", exc.holder, self._host.live_id, exc_info=True
                )
        return False

    def interrupt_local(self, request: Request, on_busy: str) -> bool:
        """A turn is open (another handle's here, or another holder's that holds this
        actor's calls): True when ``request`` is answered now (``"reject"``);
        otherwise that turn is asked to end as ``on_busy`` says."""
        turn = self._turns.turn
        foreign = self._turns.foreign
        key = request.command.key if isinstance(request.command, OpenTurn) else None
        if key is not None and on_busy in ("interrupt", "rollback"):
            held_by = turn.key if turn is not None else self._foreign_key() if foreign is not None else None
            if held_by == key:
                return False  # the turn of its own key: wait for it, then replay it
        if turn is None and foreign is not None:  # held behind another holder's turn
            return self._refused_or_asked(request, foreign, on_busy)
        if turn is None:
            return False
        if on_busy == "reject":
            expires = None if turn.lease is None else turn.lease.expires_at
            self._host.answer(request.reply, error=SessionBusyError(self._host.live_id, self._holder, expires))
            return True
        if on_busy in ("interrupt", "rollback"):
            turn.interrupted.set()
            if on_busy == "rollback" and turn.lease is not None and request.rollback is None:
                request.rollback = turn.lease.token
        return False

    def _foreign_key(self) -> str | None:
        """The key of the other holder's turn this actor's calls are held behind."""
        try:
            current = self._store.current_turn(self._host.live_id)
        except Exception:
            logger.debug("reading the turn of %s failed", self._host.live_id, exc_info=True)
            return None
        return None if current is None else current.key

    def hold_foreign(self, request: Request, exc: TurnHeldError) -> None:
        """Hold ``request`` (already claimed, or not) until the foreign turn ends."""
        lost = self._turns.lose_turn(request.sender, exc, self._host.live_id)
        if lost is not None:
            self._host.answer(request.reply, error=lost)
            return
        self._turns.foreign = exc
        if not request.held_since:
            request.held_since = _sched.monotonic()
        if self._host.stopping or _sched.monotonic() - request.held_since > self._policy.held_wait_s:
            self._host.answer(
                request.reply, error=SessionBusyError(self._host.live_id, exc.holder, exc.expires_at, exc.token)
            )
            return
        if request.reply.running() and not request.forwarding():  # claimed: see Request.gate
            self._host.answer(
                request.reply, error=SessionBusyError(self._host.live_id, exc.holder, exc.expires_at, exc.token)
            )
            return  # its caller gave up: never applied
        self._turns.hold(request)

    def retry_foreign(self) -> None:
        """The turn keeper's nudge: if the foreign turn that held our calls has ended,
        serve them again (the first refused again holds the rest once more)."""
        foreign = self._turns.foreign
        if foreign is None:
            return
        try:
            current = self._store.current_turn(self._host.live_id)
        except Exception:
            logger.debug("reading the turn of %s failed; retrying the held calls", self._host.live_id, exc_info=True)
            current = None
        if current is not None and current.holder != self._holder and current.token == foreign.token:
            if not self._sealed_dead_holder(current) and not self._expire_held():
                return
        self._turns.foreign = None
        self._host.release_held()

    def _sealed_dead_holder(self, lease: TurnLease) -> bool:
        """The turn's holder process is gone (`HolderProbe.dead`: same host, its pid no
        longer runs it; or, where the store knows holders, its database session is
        gone): seal its turn now rather than wait out its lease. True when the turn
        ended (sealed here, or closed or sealed meanwhile: the fenced seal names its
        token and holder)."""
        if not self._registry.holders.dead(lease.holder):
            return False
        try:
            sealed = self._store.seal_turn(self._host.live_id, mode=self._policy.dead_turn, lease=lease)
        except Exception:
            logger.warning(
                "sealing the turn of dead holder %r on %s failed", lease.holder, self._host.live_id, exc_info=True
            )
            return False
        logger.warning(
            "the holder %r of turn %d on %s is dead: sealed (%s: %s message(s) retracted)",
            lease.holder,
            lease.token,
            self._host.live_id,
            self._policy.dead_turn,
            sealed,
        )
        return True

    def _expire_held(self) -> bool:
        """Answer held calls that waited past ``held_wait_s``; True when none is left."""
        for request in self._turns.take_held():
            if request.held_since and _sched.monotonic() - request.held_since > self._policy.held_wait_s:
                foreign = self._turns.foreign
                holder, expires = (None, None) if foreign is None else (foreign.holder, foreign.expires_at)
                self._host.answer(request.reply, error=SessionBusyError(self._host.live_id, holder, expires))
            else:
                self._turns.hold(request)
        return not self._turns.busy_with_held()

    def end_lease(self, turn: _Turn | None) -> None:
        """Release a closed turn's store lease (an error is logged: it expires)."""
        if turn is None or turn.lease is None:
            return
        lease, turn.lease = turn.lease, None
        try:
            self._store.close_turn(lease)
        except Exception:
            logger.warning(
                "releasing the turn lease on %s failed; it expires on its own", self._host.live_id, exc_info=True
            )

    def seal_overdue(self, turn: _Turn) -> None:
        """The actor closed ``turn`` at ``max_turn_s``: seal it as a dead turn (an error
        is logged: its lease lapses and the next path seals it)."""
        lease, turn.lease = turn.lease, None
        if lease is None:
            return
        try:
            self._store.seal_turn(self._host.live_id, mode=self._policy.dead_turn, lease=lease)
        except Exception:
            logger.warning(
                "sealing the overdue turn on %s failed; it lapses on its own", self._host.live_id, exc_info=True
            )


def renew_lease(store: Store, policy: CompactionPolicy, turn: _Turn) -> None:
    """The turn keeper's thread: extend ``turn``'s lease (not under the exclusive
    lock: the token does not change, the actor only reads it)."""
    lease = turn.lease
    if lease is None:
        return
    try:
        renewed = store.renew_turn(lease, policy.lease_ttl_s)
    except Exception:
        logger.warning("renewing the turn lease on %s failed", lease.session_id, exc_info=True)
        return
    if renewed is None:
        if turn.lease is lease:  # not closed meanwhile
            logger.warning("the turn lease on %s expired before its renewal: the turn is not whole", lease.session_id)
            turn.lost, turn.lease = True, None
        return
    turn.renewed_at = _sched.monotonic()
    if renewed.interrupted:
        turn.interrupted.set()

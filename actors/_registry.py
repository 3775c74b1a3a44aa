"""`SessionRegistry`: exactly one `SessionActor` per live session id, per registry.

Get-or-start is one atomic step under the registry lock (pykka's own registry is a
list with no get-or-start). Every id that resolves to the same live id shares one
slot. Enqueue and stop go through the slot's lock, so no request is stranded on a
stopping actor. Idle and least-recently-used actors are stopped (never one that is
busy), and an actor that moves onto a live id already served here hands its ids
over and stops once its in-flight attempt is over.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from types import TracebackType
from typing import Any

import pykka

from persistence import HolderAwareStore, Store
from persistence.internal import HolderAnnouncement, features_of, telemetry
from protocol import (
    CompressionOutcome,
    CompressionStatus,
    InvalidArgumentError,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    TranscriptError,
    validate_session_id,
)
from protocol._checks import check_duration
from protocol.errors import RegistryClosedError

from ._handle import ReviewHandle, SessionHandle
from ._notifier import OutcomeHook, OutcomeNotifier
from ._passivation import ResidentSet
from ._turn_keeper import TurnKeeper
from .compaction._attempt import Attempt
from .compaction._loop import CompressorLoop
from .compaction._policy import CompactionPolicy, bind_compressor
from .compressors._base import Compressor
from .scheduling import hooks as _sched
from .scheduling.pool import WorkerPool
from .session.actor import CheckTurn, RetryHeld, SessionActor
from .session.liveness import HolderProbe, default_holder
from .session.request import Request
from .session.slot import Slot
from .session.turns import TurnGate

__all__ = ["RegistryClosedError", "SessionRegistry"]

logger = logging.getLogger("session_actors.registry")

#: Pool workers beyond ``max_resident``: evicted and handed-over actors still stopping.
POOL_SLACK = 8

#: Bound on slot-chasing retries in `SessionRegistry._dispatch` (evictions racing a send).
MAX_DISPATCH_RETRIES = 64
#: How long `SessionRegistry.close` lets open turns, calls and compactions finish by default.
DEFAULT_DRAIN_S = 10.0
#: How often a draining close looks whether everything settled.
_DRAIN_POLL_S = 0.01


class SessionRegistry:
    """Owns the actors of one process (or one simulated process) on one store.

    ``on_outcome(outcome)`` is called once for every compaction attempt that produced
    an outcome (joined callers share one; automatic attempts included), after its
    cleanup and after its callers were woken, on a registry thread (never an actor
    thread); an exception from it is logged and ignored.
    """

    #: Whether the holder is announced where the store knows holders. A registry whose
    #: turns belong to its clients rather than to its process (serve's) says False:
    #: its turns then stand for their lease when the process is gone.
    _announces_holder: bool = True

    def __init__(
        self,
        store: Store,
        *,
        compressor: Compressor | None = None,
        policy: CompactionPolicy | None = None,
        holder: str | None = None,
        on_outcome: OutcomeHook | None = None,
    ) -> None:
        if on_outcome is not None and not callable(on_outcome):
            raise InvalidArgumentError(f"on_outcome must be callable or None, got {on_outcome!r}")
        self.store = store
        self.policy = policy or CompactionPolicy()
        self.compressor = bind_compressor(compressor, self.policy)
        self.holder = holder or default_holder()
        self._lock = threading.RLock()
        self._slots: dict[str, Slot] = {}  # every known id -> the slot serving it
        self._resident = ResidentSet()  # LRU order, O(1) per eviction step
        self._starting: dict[str, threading.Lock] = {}  # ids whose store look-up is under way (`_held_lock`)
        self._handed_over: list[Slot] = []  # stop themselves after their attempt; close() makes sure
        self._evicted: list[Slot] = []  # closed under the lock; `_stop_evicted` stops them after it
        self._stopping: list[pykka.Future[Any]] = []
        self._stopping_kept = 64  # pruned when twice this long
        self._attempts: list[Attempt] = []
        self._closed = False
        self._draining = False  # close() is letting open turns finish
        self._counters = {"actors_started": 0, "actors_stopped": 0, "compress_requests": 0}
        self._compressor_loop = CompressorLoop()  # its thread starts with the first async compressor
        # The threads every actor of this registry runs on, started on demand. No handler
        # waits for another actor, so any cap is deadlock-free (see pool.py); this one lets
        # every resident actor block in a handler at once (as with a thread per actor),
        # plus a few actors that are stopping or handing over.
        self._pool = WorkerPool(self.policy.max_resident + POOL_SLACK, core=1, name="session-actors")
        self._notifier = OutcomeNotifier(on_outcome) if on_outcome is not None else None
        self._janitor_stop = threading.Event()
        self._janitor = _sched.Thread(target=self._janitor_loop, name="registry-janitor", daemon=True)
        self._janitor.start()
        self.holders = HolderProbe(self.store)  # is another holder's process gone? (`_sealed_dead_holder`)
        self._announcement = self._announce()
        self._turn_keeper = TurnKeeper(
            self.store, self.holder, self.policy, self._resident_slots, RetryHeld(), self._announcement
        )
        telemetry.track_resident(self)  # the resident-actors gauge reads stats()["resident"]

    def _announce(self) -> HolderAnnouncement | None:
        """On a store that knows holders (PostgreSQL, direct): announce this registry's
        holder for its life, so a registry anywhere held behind one of its turns sees
        at once when this process is gone. A failure is logged: the leases stand."""
        if not (self._announces_holder and features_of(self.store).knows_holders):
            return None
        store: HolderAwareStore = self.store  # type: ignore[assignment]  # declared by knows_holders
        try:
            return store.announce_holder(self.holder)
        except Exception as exc:
            logger.warning("announcing holder %s failed (%s): its dead turns wait out their leases", self.holder, exc)
            return None

    # -- public API ---------------------------------------------------------------------

    def session(self, session_id: str, *, source: str = "api") -> SessionHandle:
        """A handle on ``session_id`` (created when missing), following its lineage."""
        return SessionHandle(self, self._get_or_start(session_id, source=source))

    def review(self, session_id: str, *, source: str = "api") -> ReviewHandle:
        """A handle for a background review: same actor, appends and reads, never compacts."""
        return ReviewHandle(self, self._get_or_start(session_id, source=source))

    async def session_async(self, session_id: str, *, source: str = "api") -> SessionHandle:
        """`session` without blocking the event loop (starting an actor reads the store)."""
        return await asyncio.to_thread(self.session, session_id, source=source)

    async def review_async(self, session_id: str, *, source: str = "api") -> ReviewHandle:
        """`review` without blocking the event loop."""
        return await asyncio.to_thread(self.review, session_id, source=source)

    def delete(self, session_id: str) -> int:
        """**Erase** the lineage holding ``session_id`` (`Store.delete_session`): interrupt
        its attempt in flight, stop its actor (requests already queued run first), then
        delete every session, message, record, lease and cooldown of it. Returns the
        number of messages erased. Handles on it raise `SessionNotFoundError` for good,
        even once ``session(session_id)`` starts a new conversation under the same id.

        Raises: `SessionNotFoundError` for an unknown id.
        """
        validate_session_id(session_id)
        self._check_open()
        ids = {session_id}
        try:  # outside the lock, like every store call of the registry
            ids.add(self.store.resolve(session_id))
        except TranscriptError:  # unknown (delete_session says so below) or forked
            pass
        with self._lock:
            self._check_open()
            slots = self._lineage_slots(ids)
            for slot in slots:
                self._mark_erased(slot)
        for slot in slots:
            attempt = None if slot.runner is None else slot.runner.attempt
            if attempt is not None and attempt.in_flight:
                attempt.abort(CompressionStatus.CANCELLED, "interrupted", wait=True)
        deadline = _sched.monotonic() + self.policy.ask_timeout_s
        for future in [_stop(slot) for slot in slots if slot.runner is not None]:
            _wait(future, deadline)
        return self.store.delete_session(session_id)

    async def delete_async(self, session_id: str) -> int:
        """`delete` without blocking the event loop."""
        return await asyncio.to_thread(self.delete, session_id)

    def stats(self) -> dict[str, int]:
        """Counters for monitoring and tests."""
        with self._lock:
            self._attempts = [a for a in self._attempts if a.in_flight or a.threads_alive]
            return {
                "resident": len(self._resident),
                "known_ids": len(self._slots),
                "attempts_in_flight": sum(1 for a in self._attempts if a.in_flight),
                "stopping": sum(1 for f in self._stopping if not _done(f)),
                "draining": int(self._draining and not self._closed),
                **self._counters,
            }

    def close(self, drain_s: float = DEFAULT_DRAIN_S) -> None:
        """Drain, then interrupt attempts in flight (leases released), stop every actor
        and thread.

        The drain lasts at most ``drain_s`` seconds (default 10): no new turn opens
        (`RegistryClosedError`) from its start, while the turns already open go on and
        every call is served as usual, until no turn is open, no call waits for its
        answer and no compaction is in flight. A gateway shutting down lets the runs in
        flight write their answers instead of leaving their users' messages unanswered.
        When nothing is open or in flight the drain ends at once. ``drain_s=0`` closes
        at once: a turn still open loses the rest of its writes.
        """
        drain = check_duration(drain_s, "drain_s", allow_zero=True)
        if drain and not self._closed:
            self._drain(drain)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            slots = list(self._resident) + self._handed_over + self._evicted
            self._evicted = []
            for slot in slots:
                with slot.lock:
                    slot.closed = True
            self._resident.clear()
            self._slots.clear()
            attempts = list(self._attempts)
        self._janitor_stop.set()
        self._janitor.join(timeout=self.policy.ask_timeout_s)
        self._turn_keeper.close(self.policy.ask_timeout_s)
        for attempt in attempts:
            if attempt.in_flight:
                attempt.abort(CompressionStatus.CANCELLED, "interrupted", wait=True)
        # idle actors stop on this thread; the others after what their mailbox holds
        self._stopping.extend(_stop(slot) for slot in slots if slot.runner is None or not slot.runner._stop_here())
        deadline = _sched.monotonic() + self.policy.ask_timeout_s
        for future in self._stopping:
            _wait(future, deadline)
        with self._lock:  # a queued Compress may have started one more before the stop
            attempts = list(dict.fromkeys(attempts + self._attempts))
        for attempt in attempts:
            attempt.join_threads(deadline)
        self._pool.close(max(1.0, deadline - _sched.monotonic()))  # after the stops it ran
        self._compressor_loop.close(max(1.0, deadline - _sched.monotonic()))
        if self._notifier is not None:  # after the stops: held outcomes of aborted attempts
            self._notifier.close(max(0.0, deadline - _sched.monotonic()))
        if self._announcement is not None:  # last: every turn of ours is closed by now
            self._announcement.close()
        logger.debug("registry %s closed", self.holder)

    async def close_async(self, drain_s: float = DEFAULT_DRAIN_S) -> None:
        """`close` off the event loop (the drain, 10 s at most by default, waits for
        the turns open)."""
        await asyncio.to_thread(self.close, drain_s)

    def _drain(self, seconds: float) -> None:
        self._draining = True
        deadline = _sched.monotonic() + seconds
        settled = threading.Event()  # never set: the poll's clock
        while not self._settled():
            left = deadline - _sched.monotonic()
            if left <= 0:
                logger.warning(
                    "registry %s: turns or calls still open after draining %gs; closing", self.holder, seconds
                )
                return
            _sched.wait(settled, min(_DRAIN_POLL_S, left), "drain")

    def _settled(self) -> bool:
        """No turn open, no call waiting for its answer, no compaction in flight."""
        with self._lock:
            slots = list(self._resident) + self._handed_over
            attempts = list(self._attempts)
        if any(a.in_flight for a in attempts):
            return False
        return not any(s.pending or (s.runner is not None and s.runner.turns.busy) for s in slots)

    def _check_accepting_turns(self) -> None:
        """A turn may open: not while draining. (Once closed, new calls are refused
        anyway, and a turn held until the stop still opens then, as `close` promises.)"""
        if self._draining and not self._closed:
            raise RegistryClosedError("the registry is closing: no new turn opens")

    def __enter__(self) -> SessionRegistry:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()  # drains for at most DEFAULT_DRAIN_S

    # -- the Router interface: used by handles and actors ------------------------------------

    def _get_or_start(self, session_id: str, *, source: str | None = None) -> Slot:
        """The slot serving ``session_id``'s live id, starting its actor if needed.

        The store is never called under the registry lock: one caller per id looks
        the session up (creating it when missing) while later callers for that id
        wait for it, and callers of other ids go on. Only the in-memory step (find
        or start the live id's actor, evict over capacity) takes the lock.
        """
        validate_session_id(session_id)
        while True:
            with self._lock:
                self._check_open()
                slot = self._slots.get(session_id)
                if slot is not None and not slot.closed:
                    return slot
                started = self._starting.get(session_id)
                if started is None:
                    started = self._starting[session_id] = _held_lock()
                    break
            if started.acquire(timeout=self.policy.ask_timeout_s):  # then look again: found, or our turn
                started.release()  # for the next caller waiting on this id
        fresh: Slot | None = None  # our new actor, until the registry has taken it
        victims: list[Slot] = []
        try:
            live_id, info = self._look_up(session_id, source)
            # The actor is made outside the lock, which the other callers' starts need
            # (no thread: a mailbox and pykka's registration, in memory), unless the
            # live id has one (read without the lock: a hint, checked under it). When
            # another id of the lineage starts one meanwhile, ours stops unused.
            resident = self._slots.get(live_id)
            if resident is None or resident.closed:
                fresh = self._spawn(live_id, info)
            with self._lock:  # once per start: the look-up's end, the actor, evictions
                self._starting.pop(session_id, None)
                self._check_open()
                slot = self._slots.get(live_id)
                if slot is None or slot.closed:  # else another id of this lineage started it
                    slot, fresh = fresh or self._spawn(live_id, info), None
                    self._slots[live_id] = slot
                    self._resident.add(slot)
                    self._counters["actors_started"] += 1
                self._serve(session_id, slot)
                victims, self._evicted = self._evicted, []
            return slot
        except BaseException:
            with self._lock:
                self._starting.pop(session_id, None)
            raise
        finally:
            started.release()
            if fresh is not None:
                _stop_unused(fresh)
            self._stop_victims(victims)

    def _look_up(self, session_id: str, source: str | None) -> tuple[str, SessionInfo]:
        """The live id ``session_id`` resolves to and its session (store reads, and a
        create when ``source`` is given and the session is missing)."""
        info = self.store.get_session(session_id)
        if info is None and source is not None:
            try:
                info = self.store.create_session(session_id, source=source)
            except SessionExistsError:  # another process created it first: same session
                info = self.store.get_session(session_id)
        if info is not None and info.ended_at is None:
            return session_id, info  # a live session resolves to itself
        live_id = self.store.resolve(session_id)
        info = self.store.get_session(live_id)
        if info is None:
            raise SessionNotFoundError(live_id)
        return live_id, info

    def _dispatch(self, slot: Slot, request: Request) -> Slot:
        """Enqueue ``request`` on the actor now serving ``slot``; returns that slot."""
        for _ in range(MAX_DISPATCH_RETRIES):
            slot = slot.current()
            if slot.erased:
                raise SessionNotFoundError(slot.session_id, f"session {slot.session_id!r} was erased")
            with slot.lock:
                if not slot.closed and slot.runner is not None:
                    slot.pending += 1
                    slot.last_used = _sched.monotonic()
                    try:
                        slot.runner.actor_ref.tell(request)
                        return slot
                    except pykka.ActorDeadError:
                        slot.pending -= 1
                        slot.closed = True
            if slot.successor is None:
                self._check_same_conversation(slot)
                slot = self._get_or_start(slot.session_id)
        raise TranscriptError(f"could not reach the actor of {slot.session_id!r}")

    def _forward(self, slot: Slot, request: Request) -> None:
        """Re-send a request that reached a handed-over actor to its successor."""
        self._dispatch(slot, request)

    def _request_done(self, slot: Slot) -> None:
        with slot.lock:
            slot.pending -= 1
            slot.last_used = _sched.monotonic()

    def _relocate(self, slot: Slot, live_id: str, turns: TurnGate) -> bool:
        """Point ``slot`` at ``live_id``; False if another slot serves it (hand-over done).

        On a hand-over the open turn of ``turns`` (the handing actor's gate, its
        exclusive lock held) and the calls held behind it go to the other actor's
        mailbox before this slot closes: whatever reaches the other actor through
        this slot afterwards finds the turn open there (`TurnGate.hand_over`)."""
        with self._lock:
            other = self._slots.get(live_id)
            if other is None or other.closed or other is slot or self._closed:
                slot.session_id = live_id
                slot.ids.add(live_id)
                self._slots[live_id] = slot
                return True
            with slot.lock:
                self._move_turn(turns, other)
                slot.closed = True
                slot.successor = other
                slot.session_id = live_id
            for known in slot.ids:
                self._slots[known] = other
            other.ids.update(slot.ids)
            self._resident.discard(slot)
            self._handed_over = [s for s in self._handed_over if s.runner is not None and s.runner.actor_ref.is_alive()]
            self._handed_over.append(slot)
            self._counters["actors_stopped"] += 1
            logger.info("actor for %s hands over to the resident actor of %s", slot.ids, live_id)
            return False

    @staticmethod
    def _move_turn(turns: TurnGate, other: Slot) -> None:
        """Send the handing actor's open turn and held calls to ``other``'s actor."""
        moved = turns.hand_over()
        if moved is None:
            return
        with other.lock:  # counted pending like a request: never evicted with it unserved
            if not other.closed and other.runner is not None:
                other.pending += 1
                try:
                    other.runner.actor_ref.tell(moved)
                    return
                except pykka.ActorDeadError:
                    other.pending -= 1
        turns.take_back(moved)  # applied when the handing actor stops, as before
        logger.warning("an open turn could not move to the actor of %s", other.session_id)

    def _interrupt(self, slot: Slot) -> bool:
        """Cancel the attempt in flight for ``slot`` (or the slot it handed over to).

        A handle may hold a slot whose actor was evicted and later restarted for the
        same session: the interrupt goes to the slot serving that id now.
        """
        slot = slot.current()
        if slot.erased:
            raise SessionNotFoundError(slot.session_id, f"session {slot.session_id!r} was erased")
        if slot.closed:
            with self._lock:
                serving = self._slots.get(slot.session_id)
            if serving is not None and serving.current().born == slot.born:
                slot = serving.current()
        cancelled = False
        current: Slot | None = slot
        while current is not None:
            attempt = None if current.runner is None else current.runner.attempt
            if attempt is not None and attempt.in_flight:
                cancelled = attempt.abort(CompressionStatus.CANCELLED, "interrupted", wait=True) or cancelled
            current = current.successor
        return cancelled

    def _retire_erased(self, slot: Slot) -> None:
        with self._lock:
            if not slot.erased:
                self._mark_erased(slot)
                logger.info("the lineage of %s was erased: its actor retires", slot.session_id)
                if slot.runner is not None:
                    self._stopping.append(_stop(slot))

    def _note_compress_request(self) -> None:
        with self._lock:
            self._counters["compress_requests"] += 1

    def _post_outcome(self, outcome: CompressionOutcome) -> None:
        if self._notifier is not None:
            self._notifier.post(outcome)

    def _track_attempt(self, attempt: Attempt) -> None:
        with self._lock:
            self._attempts = [a for a in self._attempts if a.in_flight or a.threads_alive]
            self._attempts.append(attempt)

    # -- internals --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RegistryClosedError()

    def _lineage_slots(self, ids: set[str]) -> list[Slot]:
        """The slots serving ``ids`` and those handed over to them (registry lock held)."""
        found = {slot.current() for known in ids if (slot := self._slots.get(known)) is not None}
        return [*found, *(s for s in self._handed_over if s.current() in found)]

    def _mark_erased(self, slot: Slot) -> None:
        """Close ``slot`` for good and forget its ids (registry lock held)."""
        with slot.lock:
            was_open = not slot.closed
            slot.erased = slot.closed = True
        for known in list(slot.ids):
            if self._slots.get(known) is slot:
                del self._slots[known]
        self._resident.discard(slot)
        if was_open:
            self._counters["actors_stopped"] += 1

    def _check_same_conversation(self, slot: Slot) -> None:
        """Before restarting an evicted slot's actor: the session it was born on must
        still be there (an erased id may carry a new conversation since)."""
        if slot.born is not None:
            born_id, born_at = slot.born
            info = self.store.get_session(born_id)
            if info is None or info.created_at != born_at:
                slot.erased = True
        if slot.erased:
            raise SessionNotFoundError(slot.session_id, f"session {slot.session_id!r} was erased")

    def _spawn(self, live_id: str, info: SessionInfo) -> Slot:
        """A slot with a started actor for ``live_id``, not yet known to the registry."""
        slot = Slot(live_id)
        slot.born = (info.id, info.created_at)
        SessionActor.start(  # sets slot.runner
            slot=slot,
            registry=self,
            store=self.store,
            compressor=self.compressor,
            policy=self.policy,
            holder=self.holder,
            info=info,
            pool=self._pool,
        )
        return slot

    def _serve(self, session_id: str, slot: Slot) -> Slot:
        """Route ``session_id`` to ``slot`` and evict over capacity (registry lock held)."""
        slot.ids.add(session_id)
        self._slots[session_id] = slot
        for victim in self._resident.over_capacity(self.policy.max_resident, keep=slot):
            self._retire(victim)
        return slot

    def _retire(self, slot: Slot) -> bool:
        """Evict an idle slot (registry lock held): it takes no more requests, and its
        actor is stopped by `_stop_evicted`, once the lock is released. False if busy."""
        with slot.lock:
            if slot.closed:
                return False
            if slot.busy:  # became busy since it was picked: it stays resident
                self._resident.add(slot)
                return False
            slot.closed = True
        for known in list(slot.ids):
            if self._slots.get(known) is slot:
                del self._slots[known]
        self._resident.discard(slot)
        self._evicted.append(slot)
        self._counters["actors_stopped"] += 1
        return True

    def _stop_evicted(self) -> None:
        """Stop the evicted actors (registry lock not held). An idle one (nothing in
        its mailbox) stops right here, on this thread: no message and no worker. One
        with messages left (an internal nudge raced the eviction) gets a stop
        message, handled after them."""
        with self._lock:
            victims, self._evicted = self._evicted, []
        self._stop_victims(victims)

    def _stop_victims(self, victims: list[Slot]) -> None:
        """Stop evicted actors (registry lock not held): see `_stop_evicted`."""
        for slot in victims:
            runner = slot.runner
            if runner is not None and runner._stop_here():
                continue
            future = _stop(slot)
            with self._lock:
                if len(self._stopping) >= 2 * self._stopping_kept:  # amortized: not a scan per stop
                    self._stopping = [f for f in self._stopping if not _done(f)]
                    self._stopping_kept = max(64, len(self._stopping))
                self._stopping.append(future)

    def _resident_slots(self) -> list[Slot]:
        with self._lock:
            return list(self._resident)

    def _janitor_loop(self) -> None:
        shortest = min(self.policy.idle_timeout_s, self.policy.max_turn_s)
        interval = min(max(shortest / 4, 0.02), 1.0)
        next_reap = _sched.monotonic() + self.policy.lease_ttl_s
        while not _sched.wait(self._janitor_stop, min(interval, self.policy.lease_ttl_s), "janitor"):
            try:
                self._evict_idle()
                self._close_overdue_turns()
            except Exception:  # keep the janitor alive whatever a store wrapper does
                logger.exception("idle eviction failed")
            if _sched.monotonic() >= next_reap:
                next_reap = _sched.monotonic() + self.policy.lease_ttl_s
                self._reap_leases()

    def _reap_leases(self) -> None:
        """Release expired leases (crash garbage) once per ``lease_ttl_s``: they block
        nobody, but `fsck` lists them until someone does."""
        try:
            reaped = self.store.reap_leases()
        except Exception as exc:  # a busy or unreachable store: try again next period
            logger.warning("reaping expired leases failed: %s", exc)
            return
        if reaped:
            logger.info("released %d expired lease(s)", reaped)

    def _close_overdue_turns(self) -> None:
        """A turn open past ``max_turn_s`` is closed by its actor: nudge it (no traffic
        may come to make it look)."""
        now = _sched.monotonic()
        with self._lock:
            overdue = [s for s in self._resident if s.runner is not None and s.runner.turns.overdue(now)]
        for slot in overdue:
            with slot.lock:
                if slot.closed or slot.runner is None:
                    continue
                try:
                    slot.runner.actor_ref.tell(CheckTurn())
                except pykka.ActorDeadError:
                    pass

    def _evict_idle(self) -> None:
        cutoff = _sched.monotonic() - self.policy.idle_timeout_s
        with self._lock:
            for slot in self._resident.idle_since(cutoff):
                self._retire(slot)
        self._stop_evicted()


def _stop(slot: Slot) -> pykka.Future[Any]:
    assert slot.runner is not None
    return slot.runner.actor_ref.stop(block=False)


def _stop_unused(slot: Slot) -> None:
    """Stop the actor of a slot the registry never published (no request reached it)."""
    slot.closed = True
    if slot.runner is None or not slot.runner._stop_here():
        _stop(slot)


def _done(future: pykka.Future[Any]) -> bool:
    try:
        future.get(timeout=0)
        return True
    except pykka.Timeout:
        return False
    except Exception:
        return True


def _wait(future: pykka.Future[Any], deadline: float) -> None:
    try:
        left = max(0.0, deadline - _sched.monotonic())
        future.get(timeout=_sched.park("actor stop", lambda: _done(future), left))
    except Exception:
        logger.warning("an actor did not stop in time")


def _held_lock() -> threading.Lock:
    """A one-shot latch for the callers of an id whose look-up is under way: held by
    the starting caller until it is done, then passed from waiter to waiter (a
    plain lock costs a start far less than an Event: a Condition, a deque and two
    bound methods)."""
    latch = threading.Lock()
    latch.acquire()
    return latch

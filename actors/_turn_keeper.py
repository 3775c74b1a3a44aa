"""The registry's turn keeper: one thread that tends the turns of its actors.

Each tick (a tenth of a second, or less under a short ``lease_ttl_s``) it renews the
store's turn lease of every turn open here a third of ``lease_ttl_s`` after its last
renewal; reads, in one query, which of this holder's turns another caller asked to
end (``on_busy="interrupt"``), and sets their `Turn.interrupted`; and nudges each
actor whose calls another holder's turn is holding (`RetryHeld`), which serves them
again once that turn has ended. While no turn is open and nothing is held it only
scans the resident slots (no store reads), so an idle registry costs no I/O. On a store that offers it
(``listen_turns``: PostgreSQL, not behind PgBouncer), it also waits on the
closed-turn NOTIFY once it first holds calls, so a held call goes as soon as the
turn closes rather than at the next tick. On a store that knows holders it keeps
the registry's holder announcement standing while turns are open here (a look at
its connection's socket, no query, unless the server cut it: then it announces
again).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pykka

from persistence.internal import features_of

from .scheduling import hooks as _sched
from .session.turn_leases import renew_lease

if TYPE_CHECKING:
    from persistence import Store
    from persistence.internal import HolderAnnouncement

    from .compaction._policy import CompactionPolicy
    from .session.slot import Slot

__all__ = ["TurnKeeper"]

logger = logging.getLogger("session_actors.turns")


class TurnKeeper:
    """Started by a `SessionRegistry`; ``slots()`` lists its resident slots."""

    def __init__(
        self,
        store: Store,
        holder: str,
        policy: CompactionPolicy,
        slots: Callable[[], Iterable[Slot]],
        nudge: object,
        announcement: HolderAnnouncement | None = None,
    ) -> None:
        self._store = store
        self._announcement = announcement
        self._holder = holder
        self._policy = policy
        self._slots = slots
        self._nudge = nudge  # the message an actor gets when held calls may go
        self._tick = min(0.1, policy.lease_ttl_s / 10)
        self._stop = threading.Event()
        # a harness's scheduler runs the keeper on its clock: polling only, no blocking LISTEN
        self._listen = features_of(store).announces_turns and not _sched.controlled()
        self._listener: Any = None
        self._thread = _sched.Thread(target=self._run, name="registry-turns", daemon=True)
        self._thread.start()

    def close(self, timeout: float) -> None:
        self._stop.set()
        _sched.join(self._thread, timeout, "join turn-keeper")
        if self._listener is not None and not self._thread.is_alive():
            self._listener.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wait()
            if self._stop.is_set():
                return
            try:
                self._tend()
            except Exception:  # keep the keeper alive whatever a store wrapper does
                logger.exception("tending turns failed")

    def _wait(self) -> None:
        """A tick, or less when a turn closed (the NOTIFY hint, where there is one)."""
        listener = self._listener
        if listener is None:
            _sched.wait(self._stop, self._tick, "turn-keeper")
            return
        try:
            listener.wait_closed(self._tick)
        except Exception as exc:  # the hint is gone; polling alone is still correct
            logger.info("listening for closed turns stopped (%s); polling only", exc)
            self._drop_listener()

    def _listen_from_now(self) -> None:
        try:
            self._listener = self._store.listen_turns()  # type: ignore[attr-defined]  # see _listen
        except Exception as exc:  # e.g. behind PgBouncer: polling alone
            logger.debug("no closed-turn hint (%s); polling only", exc)
            self._listen = False

    def _drop_listener(self) -> None:
        listener, self._listener, self._listen = self._listener, None, False
        try:
            listener.close()
        except Exception:
            logger.debug("closing the closed-turn listener failed", exc_info=True)

    def _tend(self) -> None:
        open_turns, held = [], []
        for slot in self._slots():
            if slot.runner is None:
                continue
            gate = slot.runner.turns
            if gate.turn is not None and gate.turn.lease is not None:
                open_turns.append(slot)
            if gate.foreign is not None:
                held.append(slot)
        if open_turns:
            if self._announcement is not None:
                self._announcement.keep()
            self._renew(open_turns)
            self._flag_interrupted(open_turns)
        if held and self._listen and self._listener is None:
            self._listen_from_now()
        for slot in held:
            self._tell(slot)

    def _renew(self, slots: list[Slot]) -> None:
        due = _sched.monotonic() - self._policy.renew_interval_s
        for slot in slots:
            turn = slot.runner.turns.turn if slot.runner is not None else None
            if turn is not None and turn.renewed_at <= due:
                renew_lease(self._store, self._policy, turn)

    def _flag_interrupted(self, slots: list[Slot]) -> None:
        tokens = {lease.token for lease in self._store.interrupted_turns(self._holder)}
        if not tokens:
            return
        for slot in slots:
            turn = slot.runner.turns.turn if slot.runner is not None else None
            lease = None if turn is None else turn.lease
            if lease is not None and lease.token in tokens:
                turn.interrupted.set()  # type: ignore[union-attr]  # lease implies turn

    def _tell(self, slot: Slot) -> None:
        with slot.lock:
            if slot.closed or slot.runner is None:
                return
            try:
                slot.runner.actor_ref.tell(self._nudge)
            except pykka.ActorDeadError:
                pass

"""`SessionActor`: one pykka actor per live session id per registry.

The actor's exclusive lock (`Slot.exclusive`) orders every step of the session: a
mailbox message, an append run on its caller's thread (`append_here`), an append
submitted to the store's group commit (`submit_here`). So two paths of one process
never compact the session concurrently nor overtake each other; which path may run
a step off the mailbox is `admission.runs_here`. The actor owns no thread: its
messages are handled one at a time on the registry's shared worker pool
(`actors.scheduling.pooled`). Compression runs in a worker thread of its own
(`actors.compaction._attempt`), so appends keep flowing meanwhile.

The actor is one object with explicit collaborators, each given a typed host (this
actor) and the parts it works on: the compaction `Attempt` (`AttemptHost`), the
turn-lease steps `TurnLeases` (`LeaseHost`) and the submitted path
`SubmittedAppends` (`SubmitHost`). No handler lets an exception escape: pykka would
stop every actor on a `BaseException`, so errors are delivered to the caller's reply
future instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pykka

from persistence import Store, SubmittingStore
from persistence.internal import skipped, submits
from protocol import (
    CompactionRecord,
    CompressionDisabledError,
    CompressionStatus,
    InvalidArgumentError,
    Message,
    SessionEndedError,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    TranscriptError,
    TurnHeldError,
    TurnLease,
    TurnLostError,
)
from protocol._commands import (
    Append,
    CloseTurn,
    Compress,
    Interrupt,
    OpenTurn,
    ReadArchive,
    ReadTranscript,
    Retract,
)
from protocol._turns import compactable_end
from protocol.errors import DeadTurnError

from ..compaction._attempt import Attempt
from ..compaction._policy import CompactionPolicy
from ..compressors._base import Compressor
from ..scheduling import hooks as _sched
from ..scheduling.pool import WorkerPool
from ..scheduling.pooled import PooledActor
from .admission import Forwarded, runs_here
from .request import Answer, Request, chain, claim, deliver, set_exception, set_result
from .routing import Router
from .slot import Slot
from .submitted import SubmittedAppends
from .turn_leases import TurnLeases
from .turns import MovedTurn, ResumeTurn, TurnGate

if TYPE_CHECKING:
    from .turns import _Turn

__all__ = ["SessionActor"]

logger = logging.getLogger("session_actors.actor")


#: The commands whose handling only reads the conversation (see `_step_footprint`).
_READS = (ReadTranscript, ReadArchive)
#: An append following successors more often than this is a lineage bug, not a race.
MAX_REDIRECTS = 16


@dataclass(frozen=True, slots=True)
class _AttemptResult:
    attempt: Attempt
    result: list[Message] | None
    error: BaseException | None


class CheckTurn:
    """Internal message from the registry's janitor: close the turn if it is overdue."""


class _CheckBudget:
    """Internal: an append ran on its caller's thread; check the automatic compaction
    threshold here (an attempt starts on the actor thread)."""


class _HandedOver:
    """Internal: an append on a caller's thread handed this actor over (`Forwarded`):
    its mailbox stops it, as after a message that did (`_stop_if_handed_over`)."""


class RetryHeld:
    """Internal message from the registry's turn keeper: another holder's turn held
    this actor's calls; serve them again if it has ended."""


class SessionActor(PooledActor):
    """Serves one live session: appends, reads and the compaction flow. It is the
    host of its collaborators (`AttemptHost`, `LeaseHost`, `SubmitHost`): each gets
    this actor and the parts it works on, and nothing else."""

    def __init__(
        self,
        *,
        slot: Slot,
        registry: Router,
        store: Store,
        compressor: Compressor | None,
        policy: CompactionPolicy,
        holder: str,
        info: SessionInfo,
        pool: WorkerPool,
    ) -> None:
        # What every caller-run append reads (`append_here`, `_append`), set first so it
        # sits together at the front of the instance's values, a cache line or two: with
        # dozens of callers taking turns, each append finds its actor cold in the cache.
        self._exclusive = slot.exclusive
        self._slot = slot
        self._mailbox: Sequence[Any] = ()  # the inbox's queue, once pykka has made it (below)
        self._turns = TurnGate(policy.max_turn_s)
        self._budgeted = policy.max_tokens is not None and compressor is not None
        self._store = store
        # The conversation this actor serves, whatever ids its lineage moves through:
        # every write names it, so a lineage erased and started again under the same
        # id by another process is refused (SessionNotFoundError: the actor retires).
        self._incarnation = info.incarnation
        self._tokens: int | None = None  # live-transcript estimate; None = recount
        super().__init__(pool=pool)
        self._registry = registry
        self._compressor = compressor
        self._policy = policy
        self._holder = holder
        self._baseline = (info.id, info.epoch)
        self._attempt: Attempt | None = None
        self._last_auto: Attempt | None = None
        self._stopping = False  # on_stop began: no new attempt (nobody would abort it)
        self._answers: list[tuple[Any, Any, BaseException | None]] | None = None  # see on_receive
        # A `SubmittingStore` (checked on its class: a wrapper delegating by __getattr__
        # is used through its own `append`): `submit_here`. A flag, not the bound
        # method: one object less per resident actor (see `pooled.StopFlag`).
        self._submits = submits(store)
        # The collaborators, made when first needed (`_lease_steps`, `submit_here`): a
        # session that never opens a turn nor appends from an event loop keeps neither.
        self._leases: TurnLeases | None = None
        self._submitted: SubmittedAppends | None = None
        self._mailbox = self.actor_inbox.queue  # the same deque for the actor's life
        slot.runner = self  # the slot's actor from now on (see `Slot`)

    # -- AttemptHost ------------------------------------------------------------------

    @property
    def baseline(self) -> tuple[str, int]:
        return self._baseline

    @property
    def live_id(self) -> str:
        return self._slot.session_id

    @property
    def incarnation(self) -> str:
        return self._incarnation

    def adopt(self, live_id: str, epoch: int) -> None:
        self._move(live_id)
        self._baseline = (live_id, epoch)
        self._tokens = None
        self._turns.note_rewritten()

    def compactable(self, transcript: list[StoredMessage]) -> list[StoredMessage]:
        """The snapshot a compaction may take: never into the open turn (it travels
        whole in the tail) nor into a trailing tool run still waiting for results."""
        if not transcript:
            return transcript
        session_id = transcript[0].session_id
        turn_messages, first_seq = self._turns.snapshot_bounds(session_id)
        live = self._store.current_turn(session_id)  # any holder's (read after the transcript)
        if live is not None and live.first_seq is not None:
            first_seq = live.first_seq if first_seq is None else min(first_seq, live.first_seq)
        end = compactable_end(transcript, turn_messages=turn_messages, turn_first_seq=first_seq)
        return transcript[:end]

    def on_committed(self, record: CompactionRecord, mode: str) -> None:
        if mode == "rotate" and record.child_session_id:
            self._move(record.child_session_id)
            self._baseline = (record.child_session_id, 0)
        else:
            self._baseline = (record.session_id, self._baseline[1] + 1)
        self._tokens = None
        self._turns.note_rewritten()  # the open turn's messages were copied with new seqs

    def post_result(self, attempt: Attempt, result: list[Message] | None, error: BaseException | None) -> None:
        self.actor_ref.tell(_AttemptResult(attempt, result, error))

    # -- Runner (what the slot's users read) --------------------------------------------

    @property
    def turns(self) -> TurnGate:
        return self._turns

    @property
    def attempt(self) -> Attempt | None:
        return self._attempt

    # -- LeaseHost, SubmitHost ---------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping

    def admit(self, sender: int) -> bool:
        if not runs_here(self._slot, self._mailbox, self._turns, sender):
            return False
        self._slot.last_used = _sched.monotonic()
        return True

    def recount(self) -> None:
        self._tokens = None

    def retire_erased(self) -> None:
        """Erased elsewhere: retire before the caller hears of it, so a caller that
        starts afresh at once never reaches this actor again."""
        self._registry._retire_erased(self._slot)

    def _lease_steps(self) -> TurnLeases:
        """The turn-lease collaborator (made on first use, under the exclusive lock)."""
        leases = self._leases
        if leases is None:
            leases = self._leases = TurnLeases(
                self,
                turns=self._turns,
                store=self._store,
                registry=self._registry,
                policy=self._policy,
                holder=self._holder,
                incarnation=self._incarnation,
            )
        return leases

    def _retry_foreign(self) -> None:
        if self._turns.foreign is not None:
            self._lease_steps().retry_foreign()

    def _end_lease(self, turn: _Turn | None) -> None:
        if turn is not None and turn.lease is not None:
            self._lease_steps().end_lease(turn)

    # -- mailbox ----------------------------------------------------------------------

    def _step_name(self) -> str:
        return f"actor {self.live_id}"

    def _step_label(self, message: Any) -> str:
        return super()._step_label(message.command if isinstance(message, Request) else message)

    def _step_footprint(self, message: Any) -> _sched.Footprint:
        # Everything a message makes this actor do (its store writes, its state, the
        # attempts and replies it starts) is about its own conversation. A read changes
        # nothing another read sees: held, it waits in order; a move to the successor
        # it finds is the one any read would make.
        command = message.command if isinstance(message, Request) else None
        return _sched.Footprint(frozenset((self._incarnation,)), not isinstance(command, _READS))

    def on_receive(self, message: Any) -> None:
        """Handle ``message`` holding the exclusive lock; its callers are answered only
        once the lock and the pending count are let go, so a caller that goes on at
        once (the next append of a turn) finds the actor free and takes its fast path."""
        with self._exclusive:
            answers = self._answers = []
            try:
                self._receive(message)
            finally:
                self._answers = None
        try:
            if isinstance(message, (Request, MovedTurn)):  # both counted pending when sent
                self._registry._request_done(self._slot)
        finally:
            deliver(answers)

    def answer(self, reply: Any, value: Any = None, error: BaseException | None = None) -> None:
        """Answer a request: after the handler when one is running (`on_receive`), else now."""
        if self._answers is not None:
            self._answers.append((reply, value, error))
        elif error is not None:
            set_exception(reply, error)
        else:
            set_result(reply, value)

    def _receive(self, message: Any) -> None:
        try:
            if isinstance(message, Request):
                self._serve(message)
            elif isinstance(message, _AttemptResult):
                message.attempt.on_result(message.result, message.error)
            elif isinstance(message, CheckTurn):
                self._close_overdue_turn()
            elif isinstance(message, RetryHeld):
                self._retry_foreign()
            elif isinstance(message, _CheckBudget):
                self._maybe_auto_compact()
            elif isinstance(message, MovedTurn):  # from an actor that handed over to this one
                for request in message.requests():
                    self._serve(request)
            self._stop_if_handed_over()
        except BaseException:  # never let pykka see it: it would stop every actor
            logger.exception("session actor %s failed handling %r", self.live_id, message)

    def on_stop(self) -> None:
        self._stopping = True
        with self._exclusive:  # an append running on its caller's thread finishes first
            self._wind_down()

    def _wind_down(self) -> None:
        attempt = self._attempt
        if attempt is not None and attempt.in_flight:
            attempt.abort(CompressionStatus.CANCELLED, "interrupted", wait=True)
        try:  # held calls were acknowledged to nobody yet: apply them before stopping
            self._end_lease(self._turns.close_for_stop())
            while self._turns.busy:  # a held turn opens and holds the rest: close it too
                self.release_held()  # (one another holder's turn refuses is answered busy)
                self._end_lease(self._turns.close_for_stop())
        except BaseException:
            logger.exception("session actor %s failed applying held calls", self.live_id)

    def _serve(self, request: Request) -> None:
        """Handle one request: now, or held behind another handle's open turn."""
        reply = request.reply
        try:
            if self._slot.successor is not None:
                self._registry._forward(self._slot, request)
                return
            command = request.command
            if self._must_hold(request):
                if isinstance(command, OpenTurn) and self._lease_steps().interrupt_local(
                    request, command.on_busy or self._policy.on_busy
                ):
                    return  # refused: another handle's turn is open
                self._turns.hold(request)
                return
            if isinstance(command, Append):
                if not claim(reply) or not request.take_gate():
                    return  # the caller gave up: withdrawn, never applied
                self.answer(reply, self.append_step(command.messages, request.sender))
                self._maybe_auto_compact()
            elif isinstance(command, OpenTurn):
                if claim(reply) and request.take_gate():
                    self._lease_steps().open_turn(request, command)
            elif isinstance(command, ResumeTurn):
                self._turns.resume(command.turn)
            elif isinstance(command, CloseTurn):
                closed = self._turns.close(request.sender, command.turn)
                if closed is not None:
                    self._end_lease(closed)
                    self.release_held()  # held callers are acknowledged now
                self.answer(reply, None)
            elif isinstance(command, Compress):
                self._compress(command, reply)
            elif isinstance(command, Retract):
                if not claim(reply) or not request.take_gate():
                    return  # the caller gave up while it was held: withdrawn
                self.answer(reply, self._retract(request.sender))
            elif isinstance(command, ReadTranscript):
                limit = command.limit
                read = self._read_live(
                    lambda sid: self._store.transcript(sid, incarnation=self._incarnation, limit=limit)
                )
                self.answer(reply, read)
            elif isinstance(command, ReadArchive):
                self.answer(reply, self._read_live(lambda sid: self._store.archive(sid, incarnation=self._incarnation)))
            elif isinstance(command, Interrupt):  # out of band only: see SessionHandle.ask
                raise InvalidArgumentError("Interrupt is not a mailbox message; use interrupt()")
            else:
                raise InvalidArgumentError(f"unknown command {command!r}")
        except DeadTurnError as exc:  # a turn whose holder is gone: sealed, then this goes on
            self._seal_then_serve(request, exc)
        except TurnHeldError as exc:  # another holder's turn: held until it ends
            self._lease_steps().hold_foreign(request, exc)
        except Forwarded:
            try:
                if not request.forwarding():  # nothing was written; its caller left
                    raise TranscriptError(
                        "append withdrawn: its caller gave up while the session moved to another actor"
                    )
                self._registry._forward(self._slot, request)
            except BaseException as exc:  # e.g. the registry closed meanwhile
                self.answer(reply, error=exc)
        except BaseException as exc:
            if isinstance(exc, SessionNotFoundError):
                # erased elsewhere: retire before the caller hears of it, so a caller
                # that starts afresh at once never reaches this actor again
                self.retire_erased()
            self.answer(reply, error=exc)

    # -- turns ------------------------------------------------------------------------

    def _seal_then_serve(self, request: Request, exc: DeadTurnError) -> None:
        """A dead turn refused ``request``: seal it, then serve the request again (once
        per dead turn: refused by it again, the request is held as behind any turn)."""
        lost = self._turns.lose_turn(request.sender, exc, self.live_id)
        if lost is not None:  # the dead turn is the sender's own: it learns it was lost
            self.answer(request.reply, error=lost)
            return
        if request.sealed == exc.token:
            self._lease_steps().hold_foreign(request, exc)
            return
        request.sealed = exc.token
        try:
            self._lease_steps().seal_dead_turn(exc)
        except Exception as error:
            self.answer(request.reply, error=error)
            return
        if request.reply.running() and not request.forwarding():  # claimed: see Request.gate
            self.answer(request.reply, error=exc)  # its caller gave up: never applied
            return
        self._serve(request)

    def _must_hold(self, request: Request) -> bool:
        while self._turns.must_hold(request):
            if not self._close_overdue_turn():
                return True
        return False

    def _close_overdue_turn(self) -> bool:
        closed = self._turns.close_overdue()
        if closed is None:
            return False
        self._lease_steps().seal_overdue(closed)  # a turn its holder never closed counts as dead
        self.release_held()
        return True

    def release_held(self) -> None:
        """Serve the held requests in arrival order (each may be held again by a turn
        that one of them opened)."""
        for request in self._turns.take_held():
            self._serve(request)

    # -- appends ----------------------------------------------------------------------

    def append_here(self, messages: tuple[Message, ...], sender: int) -> list[StoredMessage] | None:
        """The caller-runs path: run this append's step on the caller's thread, or
        None (nothing done) when it must go through the mailbox.

        It runs only when nothing could be overtaken or entered: the exclusive lock
        is free (no message is being handled, no other caller runs one), nothing is
        queued for this actor (no request counted pending: an enqueue counts it
        before it puts it in the mailbox; no internal message in the mailbox), no
        other handle's turn is open and nothing is held behind one. All of it is
        checked while holding the exclusive lock (the turn gate only changes under
        it); a message enqueued after the check waits for that lock, so it is
        ordered after this append, as it arrived after it. A held exclusive lock
        makes the slot busy, so the actor is not evicted under the append (a slot
        found open here and closed just after stops its actor only once this
        append is done: stopping takes the lock too).

        Every caller of the registry runs this: it is kept to a few attribute reads
        (`admission.runs_here`) around the store's ``append``.
        """
        exclusive = self._exclusive
        if not exclusive.acquire(False):
            return None
        try:
            slot = self._slot
            if not runs_here(slot, self._mailbox, self._turns, sender):
                return None
            slot.last_used = _sched.monotonic()
            try:
                stored = self.append_step(messages, sender)
            except TurnHeldError as exc:
                lost = self._turns.lose_turn(sender, exc, self.live_id)
                if lost is not None:
                    raise lost from exc
                if not isinstance(exc, DeadTurnError):  # a dead one: the mailbox seals it
                    self._turns.foreign = exc  # held from now on: the mailbox holds this one too
                return None
            except Forwarded:
                self.stop_later()
                return None  # the live id is served by another actor: the mailbox forwards
            except SessionNotFoundError:
                self.retire_erased()  # erased elsewhere, as in `_serve`
                raise
            if self._budgeted:
                self.check_budget_later()
            return stored
        finally:
            exclusive.release()

    def submit_here(self, messages: tuple[Message, ...], sender: int, answer: Answer) -> bool:
        """The submitted path of an append from an event loop (`SubmittedAppends.submit`):
        False, nothing done, when it must go through the mailbox (a store that cannot
        submit, or the conditions of `append_here`)."""
        if not self._submits:
            return False
        submitted = self._submitted
        if submitted is None:  # two loops making it at once make two alike: either serves
            submitted = self._submitted = SubmittedAppends(
                self,
                exclusive=self._exclusive,
                turns=self._turns,
                store=cast(SubmittingStore, self._store),  # see _submits
                incarnation=self._incarnation,
            )
        return submitted.submit(messages, sender, answer)

    def stop_later(self) -> None:
        """Off the actor thread, this actor was handed over: let its mailbox stop it
        (nothing else would: no request reaches a handed-over actor)."""
        try:
            self.actor_ref.tell(_HandedOver())
        except pykka.ActorDeadError:  # stopping already
            pass

    def check_budget_later(self) -> None:
        """After an append on a caller's thread: when the session may be over budget,
        ask the actor to look (the caller is not kept waiting for an attempt)."""
        max_tokens = self._policy.max_tokens
        if max_tokens is None or self._compressor is None:
            return
        if self._tokens is None or self._tokens > max_tokens:
            try:
                self.actor_ref.tell(_CheckBudget())
            except pykka.ActorDeadError:  # stopping: the append stands, nobody to check
                pass

    def append_step(self, messages: tuple[Message, ...], sender: int) -> list[Any]:
        """Append to the live id (following successors), then the bookkeeping: the
        token estimate (only kept while auto-compaction counts) and the open turn."""
        session_id = self._slot.session_id
        turns = self._turns
        lease = None if turns.turn is None else turns.owned_lease(sender, session_id)  # most appends: no turn
        try:
            if lease is None:  # a store wrapper need not know turns outside them
                stored = self._store.append(session_id, messages, incarnation=self._incarnation)
            else:
                stored = self._store.append(session_id, messages, incarnation=self._incarnation, turn=lease)
        except SessionEndedError as exc:
            stored = self._append_followed(exc, session_id, messages, lease)
        except TurnLostError:
            turns.mark_lost(sender)
            raise
        if self._tokens is not None:  # None: nothing to keep (no max_tokens) or recount
            self.count_tokens(messages)
        if turns.turn is not None:  # only an open turn learns its seqs
            turns.note_appended(sender, stored)
        return stored

    def _append_followed(
        self, exc: SessionEndedError, session_id: str, messages: tuple[Message, ...], lease: TurnLease | None = None
    ) -> list[Any]:
        """The first try met ``session_id`` ended: follow successors and append again,
        at most `MAX_REDIRECTS` tries in all."""
        extra = {} if lease is None else {"turn": lease}
        for _ in range(MAX_REDIRECTS - 1):
            self.follow(exc, session_id)
            session_id = self._slot.session_id
            try:
                return self._store.append(session_id, messages, incarnation=self._incarnation, **extra)
            except SessionEndedError as again:
                exc = again
        self.follow(exc, session_id)
        raise SessionEndedError(self.live_id, None, None, "too many successor redirects")

    def _read_live(self, read: Callable[[str], list[StoredMessage]]) -> list[StoredMessage]:
        """``read(live id)``, following the conversation when another process rotated
        it: a read never answers from an ended parent (`Forwarded` when another actor
        serves the successor)."""
        for _ in range(MAX_REDIRECTS):
            session_id = self._slot.session_id
            try:
                return read(session_id)
            except SessionEndedError as exc:
                self.follow(exc, session_id)
        raise SessionEndedError(self.live_id, None, None, "too many successor redirects")

    def follow(self, exc: SessionEndedError, session_id: str) -> None:
        """An append met ``session_id`` ended: move to its successor (the baseline
        stays, so a later compress adopts), or raise ``exc``; `Forwarded` when
        another actor serves the successor."""
        successor = exc.successor_id
        if not successor or successor == session_id:
            raise exc
        if not self._move(successor):
            raise Forwarded from exc

    def _retract(self, sender: int) -> Any:
        """`store.retract` in mailbox order: after every append queued before it."""
        lease = self._turns.owned_lease(sender, self._slot.session_id)
        try:
            if lease is None:
                popped = self._store.retract(self.live_id, incarnation=self._incarnation)
            else:
                popped = self._store.retract(self.live_id, incarnation=self._incarnation, turn=lease)
        except TurnLostError:
            self._turns.mark_lost(sender)
            raise
        if popped is not None:
            self._tokens = None  # recount before the next automatic check
            self._turns.note_retracted(popped)
        return popped

    def count_tokens(self, messages: tuple[Message, ...]) -> None:
        """Keep the running estimate; a failing counter must not fail a durable append."""
        if self._tokens is None or self._policy.max_tokens is None:
            return
        try:
            self._tokens += self._policy.token_counter(list(messages))
        except Exception:
            logger.warning("token counter failed; will recount", exc_info=True)
            self._tokens = None

    def _move(self, live_id: str) -> bool:
        """Serve ``live_id`` from now on; False when another actor already does (hand-over)."""
        if live_id == self._slot.session_id:
            return True
        self._tokens = None
        self._turns.note_rewritten()
        return self._registry._relocate(self._slot, live_id, self._turns)

    # -- compaction -------------------------------------------------------------------

    def _compress(self, command: Compress, reply: Future[Any]) -> None:
        self._registry._note_compress_request()
        if command.origin == "review":
            raise CompressionDisabledError(self.live_id, "review handles never compact")
        attempt = self._attempt
        if attempt is not None and attempt.in_flight and not skipped("join"):  # step 1: join, whatever force/mode
            chain(attempt.outcome, reply)
            return
        attempt = self._start_attempt(command)
        chain(attempt.outcome, reply)
        attempt.prepare()  # runs to the compressor (or to an outcome) on this thread

    def _start_attempt(self, command: Compress) -> Attempt:
        attempt = Attempt(
            command,
            host=self,
            store=self._store,
            policy=self._policy,
            compressor=self._compressor,
            holder=self._holder,
            loop=self._registry._compressor_loop,
            on_outcome=self._registry._post_outcome,
        )
        self._attempt = attempt
        self._registry._track_attempt(attempt)
        attempt.outcome.add_done_callback(self._retire_if_erased)
        return attempt

    def _retire_if_erased(self, outcome: Future[Any]) -> None:
        """An attempt that met an erased lineage: this actor retires (any thread)."""
        if not outcome.cancelled() and isinstance(outcome.exception(), SessionNotFoundError):
            self.retire_erased()

    def interrupt(self) -> bool:
        """Thread-safe cancel of the attempt in flight (step 8)."""
        attempt = self._attempt
        if attempt is None or not attempt.in_flight:
            return False
        return attempt.abort(CompressionStatus.CANCELLED, "interrupted", wait=True)

    def _maybe_auto_compact(self) -> None:
        """After appends: start an automatic attempt past ``max_tokens`` (no hot loop)."""
        if self._policy.max_tokens is None or self._compressor is None or self._stopping:
            return
        try:
            self._auto_compact_if_over_budget()
        except Exception:  # the append already succeeded; never report this to its caller
            logger.warning("automatic compaction check of %s failed", self.live_id, exc_info=True)

    def _auto_compact_if_over_budget(self) -> None:
        if self._attempt is not None and self._attempt.in_flight:
            return
        last = self._last_auto
        if (
            last is not None
            and not last.committed
            and last.finished_at is not None
            and _sched.monotonic() - last.finished_at < self._policy.auto_retry_after_s
        ):
            return
        if self._tokens is None:
            self._tokens = self._policy.token_counter(self._store.transcript(self.live_id))
        if self._policy.max_tokens is None or self._tokens <= self._policy.max_tokens:
            return
        logger.info("auto-compacting %s (~%d tokens)", self.live_id, self._tokens)
        attempt = self._start_attempt(Compress(automatic=True))
        self._last_auto = attempt
        attempt.prepare()

    def _stop_if_handed_over(self) -> None:
        """A handed-over actor stops once its in-flight attempt is over."""
        if self._slot.successor is None:
            return
        attempt = self._attempt
        if attempt is None or not attempt.in_flight:
            self.stop()

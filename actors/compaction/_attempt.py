"""One compaction attempt: its state machine, from the cooldown check to the outcome
(docs/architecture.md, "The compaction path").

`Attempt.prepare` runs on the actor thread (cooldown, lease, adoption, forced
cooldown snapshot, durable read) and starts the compressor in a worker thread.
`Attempt.on_result` runs on the actor thread when the compressor returns; it goes
through its decision (`AttemptDecision`), so exactly one of {commit, interrupt, timeout, lease
loss} decides the outcome. Whoever decides cleans up (restore/arm the cooldown,
release the lease) *before* the outcome future is completed.
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any, Protocol

from persistence import Store
from persistence.internal import telemetry
from protocol import (
    END_REASON_COMPRESSION,
    CompactionRecord,
    CompressionOutcome,
    CompressionStatus,
    Lease,
    LeaseLostError,
    Message,
    SessionEndedError,
    SessionNotFoundError,
    SnapshotRetractedError,
    StoredMessage,
    TurnHeldError,
    Usage,
    transcripts_equal,
)
from protocol._commands import Compress
from protocol._transcript import invalid_tool_pairing

from ..compressors._base import Compressor
from ..scheduling import hooks as _sched
from ._decision import AttemptDecision, AttemptState
from ._lease_keeper import LeaseKeeper
from ._loop import CompressorLoop
from ._policy import CompactionPolicy
from ._roles import restore_real_user_ask

__all__ = ["Attempt", "AttemptHost"]

logger = logging.getLogger("session_actors.attempt")

S = CompressionStatus
# Outcomes after which a forced attempt keeps the cooldown as the attempt left it.
_KEEPS_FORCED_CLEAR = (S.COMPACTED, S.ROTATED, S.FAILED)
#: Live messages read first when looking for the tail after a snapshot (then 4x as many).
_TAIL_READ = 64


class AttemptHost(Protocol):
    """What an attempt needs from its actor."""

    @property
    def baseline(self) -> tuple[str, int]: ...

    @property
    def live_id(self) -> str: ...

    @property
    def incarnation(self) -> str:
        """The conversation the host serves: every write of the attempt names it."""
        ...

    def adopt(self, live_id: str, epoch: int) -> None: ...

    def compactable(self, transcript: list[StoredMessage]) -> list[StoredMessage]: ...

    def on_committed(self, record: CompactionRecord, mode: str) -> None: ...

    def post_result(self, attempt: Attempt, result: list[Message] | None, error: BaseException | None) -> None: ...


class _Aborted(Exception):
    """Internal: an interrupt won while the attempt was still preparing."""


class Attempt:
    """A single attempt; its ``outcome`` future is what every joined caller waits on."""

    def __init__(
        self,
        command: Compress,
        *,
        host: AttemptHost,
        store: Store,
        policy: CompactionPolicy,
        compressor: Compressor | None,
        holder: str,
        loop: CompressorLoop | None = None,
        on_outcome: Callable[[CompressionOutcome], None] | None = None,
    ) -> None:
        self.command = command
        self.mode = command.mode or policy.mode
        self.automatic = command.automatic
        self.outcome: Future[CompressionOutcome] = Future()
        self.finished_at: float | None = None
        self.cancel = threading.Event()
        self.decision = AttemptDecision()
        self._host = host
        self._store = store
        self._policy = policy
        self._compressor = compressor
        self._holder = holder
        self._loop = loop
        self._on_outcome = on_outcome
        self._base_id, self._base_epoch = host.baseline
        self._keeper: LeaseKeeper | None = None
        self._worker: _sched.Thread | None = None
        self._snapshot: list[StoredMessage] = []
        self._watermark = 0
        self._usage: Usage | None = None  # what the compressor reported it used
        self._proven_at = _sched.monotonic()
        self._trace = telemetry.compaction(
            self._base_id, mode=self.mode, forced=command.force, automatic=command.automatic
        )

    # -- inspection -------------------------------------------------------------

    @property
    def in_flight(self) -> bool:
        return not self.outcome.done()

    @property
    def committed(self) -> bool:
        if not self.outcome.done() or self.outcome.exception() is not None:
            return False
        return self.outcome.result().status.committed

    @property
    def threads_alive(self) -> bool:
        """The compressor or keeper thread is still running (even after an abort)."""
        return any(t is not None and t.is_alive() for t in (self._worker, self._keeper_thread()))

    def _keeper_thread(self) -> threading.Thread | None:
        return None if self._keeper is None else self._keeper.thread

    def join_threads(self, deadline: float) -> None:
        """Wait (until the monotonic ``deadline``) for the keeper and worker threads."""
        if self._keeper is not None:
            self._keeper.join(max(0.0, deadline - _sched.monotonic()))
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            _sched.join(worker, max(0.0, deadline - _sched.monotonic()), f"join compressor {self._base_id}")

    # -- steps 2-5, on the actor thread -------------------------------------------

    def prepare(self) -> None:
        """Run up to the compressor; completes the outcome unless the compressor started."""
        try:
            outcome = self._prepare()
        except _Aborted:
            self._cleanup_and_complete(self._outcome(S.CANCELLED, "interrupted"))
            return
        except BaseException as exc:  # store errors, ended session, forked lineage
            self.decision.admit()
            self._fail_with(exc)
            return
        if outcome is None:
            return  # the compressor is running; on_result or an abort finishes
        if not self.decision.admit():  # an interrupt won while we were preparing
            outcome = self._outcome(S.CANCELLED, "interrupted")
        self._cleanup_and_complete(outcome)

    def _prepare(self) -> CompressionOutcome | None:
        if self._compressor is None:
            return self._outcome(S.SKIPPED, "disabled")
        if not self.command.force and self._cooldown_is_live():
            return self._skipped_where_it_lives("cooldown")
        self._checkpoint()
        skipped = self._acquire_lease()
        if skipped is not None:
            if skipped.reason == "lease_held":
                return self._skipped_where_it_lives("lease_held")
            return skipped
        adopted = self._adopt_if_stale()
        if adopted is not None:
            return adopted
        if self.command.force:
            self._snapshot_and_clear_cooldown()
        # a dead turn's dangling rows never reach a compressor (nor a summary)
        self._store.seal_turn(self._base_id, mode=self._policy.dead_turn)
        self._checkpoint()
        # never into an open turn or an unanswered trailing tool run: those travel in the tail
        self._snapshot = self._host.compactable(self._store.transcript(self._base_id))
        if len(self._snapshot) < 2:
            return self._outcome(S.SKIPPED, "nothing_to_do")
        self._watermark = self._snapshot[-1].seq
        self._start_compressor()
        return None

    def _checkpoint(self) -> None:
        if self.decision.aborted:
            raise _Aborted

    def _skipped_where_it_lives(self, reason: str) -> CompressionOutcome:
        """SKIPPED, answered from the live id: a rotation made elsewhere is followed
        (the caller's handle names the continuation afterwards)."""
        info = self._store.get_session(self._base_id)
        if info is not None and info.end_reason == END_REASON_COMPRESSION:
            live_id = self._store.resolve(self._base_id)
            live = self._store.get_session(live_id)
            if live is not None and live.ended_at is None:
                self._host.adopt(live_id, live.epoch)
                return self._outcome(S.SKIPPED, reason, previous=self._base_id)
        return self._outcome(S.SKIPPED, reason)

    def _cooldown_is_live(self) -> bool:
        cooldown = self._store.cooldown(self._base_id)
        return cooldown is not None and cooldown.is_live(self._store.now())

    def _acquire_lease(self) -> CompressionOutcome | None:
        """Step 3. Any failure of the lease machinery fails closed (lease_error)."""
        proven_at = _sched.monotonic()
        try:
            lease = self._store.acquire_lease(self._base_id, self._holder, self._policy.lease_ttl_s)
        except Exception:
            telemetry.lease_acquisition("error")
            logger.warning("acquiring the lease on %s failed", self._base_id, exc_info=True)
            self._release_orphaned_lease()
            return self._outcome(S.SKIPPED, "lease_error")
        telemetry.lease_acquisition("held" if lease is None else "acquired")
        if lease is None:
            return self._outcome(S.SKIPPED, "lease_held")
        if not self.decision.publish_lease(lease):
            self._release(lease)
            raise _Aborted
        self._proven_at = proven_at
        return None

    def _release_orphaned_lease(self) -> None:
        """An acquire that raised may still have committed: give back anything ours."""
        try:
            lease = self._store.current_lease(self._base_id)
            if lease is not None and lease.holder == self._holder:
                self._store.release_lease(lease)
        except Exception:
            logger.warning("could not check for a leaked lease on %s", self._base_id, exc_info=True)

    def _adopt_if_stale(self) -> CompressionOutcome | None:
        """Step 4: someone else compacted (or we moved); follow instead of compacting."""
        info = self._store.get_session(self._base_id)
        if info is None:
            raise SessionNotFoundError(self._base_id)
        rotated = info.end_reason == END_REASON_COMPRESSION
        if info.ended_at is not None and not rotated:
            raise SessionEndedError(self._base_id, None, info.end_reason)
        if not (rotated or self._host.live_id != self._base_id or info.epoch > self._base_epoch):
            return None
        live_id = self._store.resolve(self._base_id)
        live = info if live_id == self._base_id else self._store.get_session(live_id)
        if live is None:
            raise SessionNotFoundError(live_id)
        self._host.adopt(live_id, live.epoch)
        return self._outcome(S.ADOPTED, None, previous=self._base_id)

    def _snapshot_and_clear_cooldown(self) -> None:
        """Step 5, forced: keep the raw row (under the lease) to restore it verbatim."""
        snapshot = self._store.cooldown(self._base_id)
        if not self.decision.publish_snapshot(snapshot):
            raise _Aborted
        self._store.clear_cooldown(self._base_id)

    def _start_compressor(self) -> None:
        lease = self.decision.lease
        if lease is None:  # an interrupt already took it back
            raise _Aborted
        self._keeper = LeaseKeeper(
            self._store,
            lease,
            self._policy,
            on_lost=lambda: self.abort(S.LEASE_LOST, None, wait=False),
            on_timeout=lambda: self.abort(S.CANCELLED, "timeout", wait=False),
            renewed_at=self._proven_at,
        )
        if not self.decision.start_running():
            raise _Aborted
        self._keeper.start()
        self._worker = _sched.Thread(target=self._run_compressor, name=f"compressor:{self._base_id}", daemon=True)
        self._worker.start()

    def _run_compressor(self) -> None:
        """Worker thread: call the compressor, hand the result to the actor thread."""
        result: list[Message] | None = None
        error: BaseException | None = None
        try:
            _sched.point(f"compress {self._base_id}")
            with self._trace.phase("compress"):
                output = self._compressor.compress(  # type: ignore[union-attr]
                    self._snapshot, target_tokens=self._policy.target_tokens, cancel=self.cancel
                )
                if inspect.isawaitable(output):  # an ``async def compress``
                    output = self._run_on_loop(output)
                result = _as_messages(output)
                self._usage = _usage_of(output)
        except BaseException as exc:  # delivered as FAILED, never escapes the thread
            error = exc
        try:
            _sched.point(f"compressed {self._base_id}", self._writes())  # the result goes to the actor
            self._host.post_result(self, result, error)
        except Exception:  # the actor is gone (registry closing): finish here
            logger.debug("actor gone before the compressor returned", exc_info=True)
            self.abort(S.CANCELLED, "interrupted", wait=False)

    def _writes(self) -> _sched.Footprint:
        """A step of this attempt: it writes its conversation (the compressor's own
        step is left unknown: it runs your code)."""
        return _sched.Footprint(frozenset((self._host.incarnation,)), True)

    def _run_on_loop(self, awaitable: Any) -> Any:
        """Await an async compressor on the registry's loop; ``cancel`` cancels its task."""
        if self._loop is None:
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never awaited: say so instead of a RuntimeWarning
            raise TypeError("an async compressor needs a SessionRegistry's compressor loop")
        return self._loop.run(awaitable, self.cancel)

    # -- step 6, on the actor thread ------------------------------------------------

    def on_result(self, result: list[Message] | None, error: BaseException | None) -> None:
        """Admit the compressor's result through its decision, then decide and commit."""
        if not self.decision.admit():
            return  # an interrupt, timeout or lease loss already answered
        try:
            outcome = self._decide(result, error)
        except Exception as exc:  # defensive: a bug here must still free the lease
            logger.exception("deciding the compaction of %s failed", self._base_id)
            outcome = self._outcome(S.FAILED, "commit_error", error=repr(exc))
        self._cleanup_and_complete(outcome)

    def _decide(self, result: list[Message] | None, error: BaseException | None) -> CompressionOutcome:
        assert self._keeper is not None
        if error is not None or result is None:
            return self._outcome(S.FAILED, "compressor_error", error=_describe(error))
        if not self._keeper.owned():
            return self._outcome(S.LEASE_LOST, None)
        if transcripts_equal(result, self._snapshot):
            return self._outcome(S.UNCHANGED, None)
        if not result:
            return self._outcome(S.SKIPPED, "empty_result")
        compacted = restore_real_user_ask(self._snapshot, result, merge=self._policy.merge_user_messages)
        try:
            problem = self._invalid_result(compacted)
        except Exception as exc:  # reading the tail failed: nothing was written
            logger.warning("reading the tail of %s failed", self._base_id, exc_info=True)
            return self._outcome(S.FAILED, "commit_error", error=_describe(exc))
        if problem is not None:
            logger.warning("compaction of %s refused: %s", self._base_id, problem)
            return self._outcome(S.FAILED, "invalid_result", error=problem)
        # a pause here (GC, SIGSTOP) outlives the lease: only the commit's fence stops it
        _sched.point(f"commit {self._base_id}", self._writes())
        try:
            with self._trace.phase("commit"):
                record = self._store.commit_compaction(
                    self._keeper.lease,
                    watermark=self._watermark,
                    compacted=compacted,
                    mode=self.mode,
                    compressor=getattr(self._compressor, "name", "") or "",
                    incarnation=self._host.incarnation or None,
                    usage=self._usage,
                )
        except LeaseLostError:
            return self._outcome(S.LEASE_LOST, None)
        except SnapshotRetractedError:  # a retract popped the snapshot's last message
            return self._outcome(S.CANCELLED, "retracted")
        except TurnHeldError:  # the snapshot reached into a turn another holder opened: next time
            return self._outcome(S.SKIPPED, "lease_held")
        except Exception as exc:
            logger.warning("commit of %s failed", self._base_id, exc_info=True)
            return self._outcome(S.FAILED, "commit_error", error=_describe(exc))
        self._host.on_committed(record, self.mode)
        if self.mode == "rotate":
            return self._outcome(
                S.ROTATED, None, record=record, previous=self._base_id, after=len(compacted) + record.tail_count
            )
        return self._outcome(S.COMPACTED, None, record=record, after=len(compacted) + record.tail_count)

    def _invalid_result(self, compacted: list[Message]) -> str | None:
        """The valid-result check on what the commit would publish: the compacted
        set followed by the tail (everything appended after the watermark). A pair
        the live transcript already had broken is not the result's fault."""
        tail = self._tail()
        # Live now: the snapshot, then its tail. Appends only add at the end and a
        # retract that reached the snapshot makes the commit refuse, so this is the
        # live transcript without reading the snapshot's rows a second time.
        return invalid_tool_pairing([*compacted, *tail], self._snapshot, current=[*self._snapshot, *tail])

    def _tail(self) -> list[StoredMessage]:
        """The live messages after the watermark (those appended while the compressor
        ran, usually few), read from the end of the transcript until past it."""
        limit = _TAIL_READ
        while True:
            latest = self._store.transcript(self._base_id, limit=limit)
            if len(latest) < limit or latest[0].seq <= self._watermark:
                return [m for m in latest if m.seq > self._watermark]
            limit *= 4

    # -- step 8: interrupt, timeout, lease loss -------------------------------------

    def abort(self, status: CompressionStatus, reason: str | None, *, wait: bool) -> bool:
        """Cancel before admission (True), or wait for an admitted commit (False).

        Thread-safe. The cleanup (release the lease, restore a forced cooldown) and
        the outcome happen here, on the calling thread, without waiting for the actor
        or the compressor. If the actor thread is still preparing (perhaps inside a
        slow store call), it repeats the idempotent cleanup at its next checkpoint,
        for anything it took after this returned.
        """
        previous = self.decision.abort()
        if previous is None:
            if wait and self.decision.state is AttemptState.ADMITTED:
                try:
                    patience = _sched.park("admitted commit", self.outcome.done, self._policy.ask_timeout_s)
                    self.outcome.exception(timeout=patience)
                except Exception:  # timed out or cancelled: we waited as long as allowed
                    logger.warning("admitted commit of %s still running", self._base_id)
            return False
        self.cancel.set()
        self._cleanup_and_complete(self._outcome(status, reason))
        return True

    # -- step 7: cleanup before any outcome -----------------------------------------

    def _cleanup_and_complete(self, outcome: CompressionOutcome) -> None:
        error = self._cleanup(outcome.status, outcome.reason, outcome.error)
        if error is not None:
            self._complete_error(error)
        else:
            self._complete(outcome)

    def _fail_with(self, exc: BaseException) -> None:
        logger.warning("compaction attempt on %s raised %r", self._base_id, exc)
        error = self._cleanup(None, None, None)
        self._complete_error(exc if error is None else error)

    def _cleanup(
        self, status: CompressionStatus | None, reason: str | None, error_text: str | None
    ) -> BaseException | None:
        """Restore/arm the cooldown, then release the lease. Returns a failed compensation."""
        if self._keeper is not None:
            self._keeper.stop()
        failure: BaseException | None = None
        if self.command.force and self.decision.has_snapshot and status not in _KEEPS_FORCED_CLEAR:
            try:
                self._store.restore_cooldown(self._base_id, self.decision.snapshot)
            except Exception as exc:  # a failed compensation must surface, not look clean
                logger.error("restoring the cooldown of %s failed", self._base_id, exc_info=True)
                failure = exc
        if status is S.FAILED or (status is S.CANCELLED and reason == "timeout"):
            # said out loud: until the cooldown ends the session only grows past its budget
            logger.warning(
                "compaction of %s %s (%s%s); next automatic attempt in %ss",
                self._base_id,
                "failed" if status is S.FAILED else "timed out",
                reason,
                f": {error_text}" if error_text else "",
                self._policy.cooldown_s,
            )
            try:
                self._store.arm_cooldown(
                    self._base_id,
                    self._policy.cooldown_s,
                    reason if reason == "timeout" else (error_text or reason),
                    incarnation=self._host.incarnation or None,
                )
            except Exception as exc:  # SessionNotFoundError: erased (or re-created), not armed
                logger.error("arming the cooldown of %s failed", self._base_id, exc_info=True)
                failure = failure or exc
        lease = self.decision.take_lease()
        if lease is not None:
            self._release(lease)
        return failure

    def _release(self, lease: Lease) -> None:
        try:
            self._store.release_lease(lease)
        except Exception:  # it expires on its own; fencing keeps us correct meanwhile
            logger.warning("releasing the lease on %s failed", lease.session_id, exc_info=True)

    def _complete(self, outcome: CompressionOutcome) -> None:
        self.finished_at = _sched.monotonic()
        self._trace.finish(outcome)  # first: a caller woken by the outcome finds the span ended
        try:
            self.outcome.set_result(outcome)  # runs the joined callers' callbacks: woken now
        except InvalidStateError:
            return
        if self._on_outcome is not None:  # exactly once per attempt, after cleanup and callers
            try:
                self._on_outcome(outcome)
            except Exception:
                logger.exception("posting the outcome of %s failed", self._base_id)

    def _complete_error(self, exc: BaseException) -> None:
        self.finished_at = _sched.monotonic()
        if not isinstance(exc, Exception):
            wrapped = RuntimeError(f"compaction aborted by {exc!r}")
            wrapped.__cause__ = exc
            exc = wrapped
        self._trace.fail(exc)
        try:
            self.outcome.set_exception(exc)
        except InvalidStateError:
            pass

    def _outcome(
        self,
        status: CompressionStatus,
        reason: str | None,
        *,
        previous: str | None = None,
        record: CompactionRecord | None = None,
        after: int = 0,
        error: str | None = None,
    ) -> CompressionOutcome:
        before = len(self._snapshot)
        return CompressionOutcome(
            status=status,
            session_id=self._host.live_id,
            previous_session_id=previous,
            reason=reason,
            record=record,
            messages_before=before,
            messages_after=after if record is not None else before,
            error=error,
        )


def _usage_of(output: object) -> Usage | None:
    """The ``usage`` a compressor reported with its result (`Compressed`), checked:
    a bad one fails the attempt before anything is written."""
    usage = getattr(output, "usage", None)
    return None if usage is None else Usage.coerce(usage)


def _as_messages(output: Sequence[Message] | None) -> list[Message]:
    """Validate the compressor's output: plain messages (dicts accepted)."""
    if output is None or isinstance(output, (str, bytes)):
        raise TypeError(f"a compressor must return a sequence of messages, got {type(output).__name__}")
    return [m if isinstance(m, Message) else Message.from_dict(m) for m in output]


#: Credentials an exception text may carry (a client echoing its request): masked,
#: also under a prefixed name (``openai_api_key=``, ``x-goog-api-key:``).
_CREDENTIAL = re.compile(
    r"(?i)\b(bearer|basic)\s+[^\s'\",;]+"
    r"|\b((?:[\w-]*[-_])?(?:authorization|api[-_]?key))(['\"]?\s*[:=]\s*['\"]?)"
    r"(?:(?:bearer|basic)\s+)?[^\s'\",;]+"
)
#: Longest error text kept in an outcome or a cooldown.
_MAX_ERROR_CHARS = 500


def _describe(exc: BaseException | None) -> str:
    """A short cause for an outcome and a cooldown, credentials masked."""
    if exc is None:
        return "compressor returned nothing"
    text = _CREDENTIAL.sub(_mask, f"{type(exc).__name__}: {exc}")
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def _mask(match: re.Match[str]) -> str:
    if match.group(1):
        return f"{match.group(1)} ***"
    return f"{match.group(2)}{match.group(3)}***"

"""`PooledActor`: a pykka actor that owns no thread.

pykka's extension points for a new actor type are ``_create_actor_inbox`` and
``_start_actor_loop``. Here the inbox is a `Mailbox`: when a message lands in
an idle actor's mailbox, the actor's drain is submitted to a shared
`WorkerPool`, which handles its messages one at a time, in arrival order, then
lets the worker go. The mailbox's ``scheduled`` flag (set by the put that finds
the actor idle, cleared by the drain that finds the mailbox empty, both under
the mailbox lock) makes sure at most one worker ever runs one actor, and that a
message put while a drain is finishing is never left behind.

So an actor costs a thread only while it has messages: starting one is
`ActorRegistry` registration and nothing else, and an actor that never gets a
message (its appends run on the callers' threads) never costs a thread at all.

Everything else is pykka's contract: ``on_start`` runs before the first message
(eagerly when overridden), an ``_ActorStop`` runs ``on_stop`` and the messages
left after it are answered with `ActorDeadError` (so is a message put after the
actor stopped, instead of staying in a dead inbox), and an exception is handled
the way pykka's own loop handles it. One deliberate difference: a
`BaseException` from a handler stops this actor only, not every actor
(``ActorRegistry.stop_all``), since the pool is shared.

As with pykka's own inbox, a message leaves ``queue`` when a worker takes it, so
an empty ``queue`` means nothing is waiting; the caller-runs append path
(`SessionActor.append_here`) checks that, and the actor's exclusive lock and its
slot's pending count cover the message in hand, exactly as with a thread per
actor.
"""

from __future__ import annotations

import logging
import sys
import threading
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

import pykka
from pykka import ActorDeadError
from pykka.messages import _ActorStop

from . import hooks as _sched

if TYPE_CHECKING:
    from pykka._envelope import Envelope

    from .pool import WorkerPool

__all__ = ["Mailbox", "PooledActor", "StopFlag"]

logger = logging.getLogger("session_actors.pooled")

#: Messages one drain handles before the actor goes to the back of the pool's queue
#: (a busy actor must not keep a worker from the others forever).
DRAIN_BATCH = 64


class Mailbox:
    """A pykka actor inbox that schedules its actor on a pool instead of waking a thread."""

    __slots__ = ("_actor", "_dead", "_lock", "_scheduled", "queue")

    def __init__(self) -> None:
        self.queue: deque[Envelope[Any]] = deque()
        self._lock = threading.Lock()
        self._actor: PooledActor | None = None  # set when the actor starts
        self._scheduled = False  # a drain is queued on the pool or running
        self._dead = False  # the actor stopped: puts are answered at once

    def put(self, envelope: Envelope[Any], /) -> None:
        with self._lock:
            actor = None if self._dead else self._actor
            if not self._dead:
                self.queue.append(envelope)
                if self._scheduled or actor is None:
                    return
                self._scheduled = True
        if actor is None:  # the actor stopped before this put: pykka would strand it
            _refuse(envelope)
            return
        actor._pool.submit(actor._drain)

    def get(self) -> Envelope[Any]:
        with self._lock:
            return self.queue.popleft()

    def empty(self) -> bool:
        return not self.queue

    # -- the actor's side -------------------------------------------------------------

    def _bind(self, actor: PooledActor, *, wake: bool) -> None:
        """The actor started: messages put from now on schedule it (``wake``: run a
        drain now, for ``on_start`` or for messages put before the start)."""
        with self._lock:
            self._actor = actor
            if not (wake or self.queue) or self._scheduled:
                return
            self._scheduled = True
        actor._pool.submit(actor._drain)

    def _claim_idle(self) -> bool:
        """Take the actor as a drain would, if nothing is queued, handled or scheduled."""
        with self._lock:
            if self._scheduled or self.queue or self._actor is None:
                return False
            self._scheduled = True
            return True

    def _take(self) -> Envelope[Any] | None:
        """The next message to handle, or None: the drain ends (the actor is idle)."""
        with self._lock:
            if self.queue:
                return self.queue.popleft()
            self._scheduled = False
            return None

    def _close(self) -> list[Envelope[Any]]:
        """The actor stopped: every message left, and later puts are refused."""
        with self._lock:
            self._dead = True
            left = list(self.queue)
            self.queue.clear()
            return left


class StopFlag:
    """The actor's ``actor_stopped``: what pykka asks of its `threading.Event`
    (``set``, ``is_set``, ``wait``) in one object instead of six.

    Every resident actor's objects outlive a few garbage collections and are then
    promoted to the oldest generation, whose full collections come once promotions
    reach a quarter of the heap and walk all of it: so each object an actor keeps
    costs every session start about the same time, whatever the application's heap
    (``python -m tests.benchmarks.bench_starts``). An Event is a Condition, a lock, a
    deque of waiters and two bound methods; this is a flag, and its rare waiters
    share one condition (a stop wakes them all; each looks at its own flag).
    """

    __slots__ = ("_set",)
    _changed = threading.Condition()

    def __init__(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._changed:
            self._set = True
            self._changed.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        with self._changed:
            return self._changed.wait_for(self.is_set, timeout)


class PooledActor(pykka.Actor):
    """A pykka actor whose messages are handled on a shared `WorkerPool`."""

    actor_inbox: Mailbox
    actor_stopped: StopFlag  # type: ignore[assignment]  # an Event's interface, see StopFlag

    def __init__(self, *args: Any, pool: WorkerPool, **kwargs: Any) -> None:
        self._pool = pool
        self._setup_done = False
        # pykka's Actor.__init__ (the fields it documents), with a `StopFlag` for its Event;
        # tests/actors/test_pooled.py checks that they set the same fields
        self.actor_urn = uuid.uuid4().urn
        self.actor_inbox = self._create_actor_inbox()
        self.actor_stopped = StopFlag()
        self._actor_ref = pykka.ActorRef(self)

    @staticmethod
    def _create_actor_inbox() -> Mailbox:
        return Mailbox()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return pykka.ThreadingFuture()

    def _start_actor_loop(self) -> None:
        """No loop and no thread: later puts schedule a drain. ``on_start`` must run
        before the first message, so an actor that overrides it is drained at once."""
        overrides_start = type(self).on_start is not pykka.Actor.on_start
        self.actor_inbox._bind(self, wake=overrides_start)

    def _drain(self) -> None:
        """Handle queued messages, one at a time, on a pool worker (never two at once)."""
        inbox = self.actor_inbox
        pointed = False  # a harness's scheduling point for the first message is taken
        if not self._setup_done:
            if _sched.controlled():
                queued = inbox.queue
                first = queued[0].message if queued else None
                label = self._step_label(first) if queued else f"{self._step_name()} start"
                _sched.point(label, self._step_footprint(first))  # on_start runs in this step too
                pointed = True
            self._setup_done = True
            try:
                self._actor_loop_setup()  # on_start; an Exception stops the actor
            except BaseException:
                self._handle_failure(*sys.exc_info())
        for _ in range(DRAIN_BATCH):
            if self.actor_stopped.is_set():
                self._teardown()
                return
            if _sched.controlled() and inbox.queue and not pointed:
                message = inbox.queue[0].message
                _sched.point(self._step_label(message), self._step_footprint(message))
            pointed = False
            envelope = inbox._take()
            if envelope is None:
                return
            try:
                self._handle(envelope)
            except BaseException:  # answering the caller failed: the drain goes on
                logger.exception("%s failed answering %r", self, envelope)
        if self.actor_stopped.is_set():
            self._teardown()
        else:
            self._pool.submit(self._drain)  # still scheduled: to the back of the queue

    def _step_name(self) -> str:
        """Names this actor in a harness's schedule strings (stable from run to run)."""
        return type(self).__name__

    def _step_label(self, message: Any) -> str:
        """The scheduling point before handling ``message``."""
        return f"{self._step_name()} {type(message).__name__}"

    def _step_footprint(self, message: Any) -> _sched.Footprint | None:
        """What handling ``message`` (after ``on_start``, for the first one) touches
        (None: unknown, so it conflicts with every step)."""
        return None

    def _stop_here(self) -> bool:
        """Stop an idle actor on the calling thread, as a drain handling an
        ``_ActorStop`` would (``on_stop`` runs here); no worker, no message. False,
        doing nothing, when the actor has messages queued or being handled, or is
        already stopped or stopping: stop it through its mailbox instead."""
        if self.actor_stopped.is_set() or not self.actor_inbox._claim_idle():
            return False
        try:
            if not self._setup_done:
                self._setup_done = True
                self._actor_loop_setup()
            if not self.actor_stopped.is_set():
                self._stop()
        except BaseException:
            logger.exception("stopping %s failed", self)
            if not self.actor_stopped.is_set():
                self._handle_failure(*sys.exc_info())
        finally:
            self._teardown()
        return True

    def _handle(self, envelope: Envelope[Any]) -> None:
        """pykka's loop body for one message, except that a `BaseException` stops
        only this actor."""
        reply_to = envelope.reply_to
        try:
            response = self._handle_receive(envelope.message)
            if reply_to is not None:
                reply_to.set(response)
        except Exception:
            if reply_to is not None:
                logger.info("exception returned from %s to caller", self, exc_info=True)
                reply_to.set_exception()
            else:
                self._handle_failure(*sys.exc_info())
                try:
                    self.on_failure(*sys.exc_info())
                except Exception:
                    self._handle_failure(*sys.exc_info())
        except BaseException:
            logger.exception("%r in %s: stopping this actor (others go on)", sys.exc_info()[1], self)
            if reply_to is not None:
                reply_to.set_exception()
            if not self.actor_stopped.is_set():
                self._stop()

    def _teardown(self) -> None:
        """Answer what was left after the stop (pykka's teardown), and refuse later puts."""
        for envelope in self.actor_inbox._close():
            _refuse(envelope)


def _refuse(envelope: Envelope[Any]) -> None:
    reply_to = envelope.reply_to
    if reply_to is None:
        return
    try:
        if isinstance(envelope.message, _ActorStop):
            reply_to.set(None)  # stopping a stopped actor: pykka says True, not dead
        else:
            error = ActorDeadError(f"{envelope} reached a stopped actor")
            reply_to.set_exception(exc_info=(ActorDeadError, error, None))
    except Exception:  # already answered
        logger.debug("could not refuse %r", envelope, exc_info=True)

"""`PooledActor`: pykka actors without a thread of their own, on a shared pool."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from actors.scheduling.pool import WorkerPool
from actors.scheduling.pooled import PooledActor

pytestmark = pytest.mark.timeout(60)


class Record:
    """What a `Recorder` did, readable by the test after the actor stopped."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.seen: list[Any] = []
        self.threads: set[threading.Thread] = set()
        self.overlaps = 0
        self.started_on: threading.Thread | None = None
        self.stopped_on: threading.Thread | None = None
        self.failures = 0


class Recorder(PooledActor):
    """Records what it handles, checks it is never run by two threads at once."""

    def __init__(self, *, pool: WorkerPool, record: Record, gate: threading.Event | None = None) -> None:
        super().__init__(pool=pool)
        self.record = record
        self.gate = gate
        self.inside = threading.Lock()

    def on_start(self) -> None:
        self.record.started_on = threading.current_thread()

    def on_stop(self) -> None:
        self.record.stopped_on = threading.current_thread()

    def on_failure(self, *exc_info: Any) -> None:
        self.record.failures += 1

    def on_receive(self, message: Any) -> Any:
        record = self.record
        if not self.inside.acquire(blocking=False):
            record.overlaps += 1
            self.inside.acquire()
        try:
            record.threads.add(threading.current_thread())
            record.entered.set()
            time.sleep(0)  # give up the GIL: another worker could run this actor now
            if self.gate is not None:
                assert self.gate.wait(10)
            if isinstance(message, BaseException):
                raise message
            record.seen.append(message)
            return message
        finally:
            self.inside.release()


class Plain(PooledActor):
    """No ``on_start``: starting it schedules nothing."""

    def __init__(self, *, pool: WorkerPool) -> None:
        super().__init__(pool=pool)
        self.stopped_on: threading.Thread | None = None

    def on_stop(self) -> None:
        self.stopped_on = threading.current_thread()

    def on_receive(self, message: Any) -> Any:
        return (message, threading.current_thread())


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    pool = WorkerPool(4)
    yield pool
    pykka.ActorRegistry.stop_all(block=True, timeout=10)
    assert pool.close(10)


def test_messages_of_one_actor_are_handled_in_order_one_at_a_time(pool):
    record = Record()
    ref = Recorder.start(pool=pool, record=record)
    senders = 4
    per_sender = 300
    barrier = threading.Barrier(senders)

    def send(k: int) -> None:
        barrier.wait(10)
        for i in range(per_sender):
            ref.tell((k, i))

    threads = [threading.Thread(target=send, args=(k,)) for k in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert ref.ask("last", timeout=10) == "last"
    seen = [m for m in record.seen if m != "last"]
    for k in range(senders):
        assert [i for s, i in seen if s == k] == list(range(per_sender))  # FIFO per sender
    assert record.overlaps == 0  # never two workers on one actor
    ref.stop(timeout=10)


def test_many_actors_share_few_threads(pool):
    before = threading.active_count()
    refs = [Plain.start(pool=pool) for _ in range(200)]
    assert threading.active_count() == before  # starting an actor starts no thread
    assert len(pykka.ActorRegistry.get_by_class(Plain)) == 200
    futures = [ref.ask(i, block=False) for i in range(3) for ref in refs]
    answers = [f.get(timeout=10) for f in futures]
    assert [a[0] for a in answers] == [i for i in range(3) for _ in refs]
    threads = {a[1] for a in answers}
    assert len(threads) <= pool.max_workers
    assert threading.current_thread() not in threads
    assert threading.active_count() - before <= pool.max_workers
    for ref in refs:
        assert ref.stop(timeout=10) is True
    assert pykka.ActorRegistry.get_by_class(Plain) == []


def test_on_start_runs_before_the_first_message_on_a_worker(pool):
    record = Record()
    ref = Recorder.start(pool=pool, record=record)
    assert ref.ask("hello", timeout=10) == "hello"
    assert record.started_on is not None
    assert record.started_on is not threading.current_thread()
    ref.stop(timeout=10)
    assert record.stopped_on is not None


def test_messages_left_after_a_stop_get_actor_dead_error(pool):
    gate = threading.Event()
    record = Record()
    ref = Recorder.start(pool=pool, record=record, gate=gate)
    first = ref.ask("first", block=False)
    assert record.entered.wait(10)  # the actor is busy with "first"
    stopped = ref.stop(block=False)
    late = ref.ask("late", block=False)  # queued behind the stop
    gate.set()
    assert first.get(timeout=10) == "first"
    assert stopped.get(timeout=10) is True
    with pytest.raises(pykka.ActorDeadError):
        late.get(timeout=10)
    assert record.seen == ["first"]
    assert not ref.is_alive()
    assert ref not in pykka.ActorRegistry.get_all()
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("after")
    assert ref.stop(timeout=10) is False  # already dead, like any pykka actor


@pytest.mark.parametrize("raised", [SystemExit(2), KeyboardInterrupt()])
def test_a_base_exception_stops_only_its_own_actor(raised):
    pool = WorkerPool(1)  # one worker: it must survive to serve the other actor
    try:
        bad_record = Record()
        bad = Recorder.start(pool=pool, record=bad_record)
        good = Recorder.start(pool=pool, record=Record())
        with pytest.raises(type(raised)):
            bad.ask(raised, timeout=10)
        assert good.ask("still here", timeout=10) == "still here"
        assert not bad.is_alive()
        assert good.is_alive()
        assert bad not in pykka.ActorRegistry.get_all()
        with pytest.raises(pykka.ActorDeadError):
            bad.ask("after", timeout=10)
        assert bad_record.stopped_on is not None  # on_stop ran, as in pykka's own loop
        assert good.stop(timeout=10) is True
    finally:
        pykka.ActorRegistry.stop_all(block=True, timeout=10)
        assert pool.close(10)


def test_an_exception_from_a_told_message_stops_the_actor_like_pykka(pool):
    record = Record()
    ref = Recorder.start(pool=pool, record=record)
    ref.tell(RuntimeError("told"))
    assert ref.actor_stopped.wait(10)
    assert not ref.is_alive()
    assert record.failures == 1
    assert record.stopped_on is None  # pykka: on_failure, not on_stop
    assert ref not in pykka.ActorRegistry.get_all()
    # an asked one is returned to its caller and the actor goes on
    other = Recorder.start(pool=pool, record=Record())
    with pytest.raises(RuntimeError):
        other.ask(RuntimeError("asked"), timeout=10)
    assert other.ask("fine", timeout=10) == "fine"
    other.stop(timeout=10)


def test_many_actors_never_run_twice_at_once_under_load(pool):
    records = [Record() for _ in range(20)]
    refs = [Recorder.start(pool=pool, record=r) for r in records]
    futures = [ref.ask(i, block=False) for i in range(50) for ref in refs]
    for f in futures:
        f.get(timeout=20)
    for ref, record in zip(refs, records):
        assert record.seen == list(range(50))
        assert record.overlaps == 0
        ref.stop(timeout=10)


class Bare(PooledActor):
    """Nothing of its own: only what `PooledActor` and pykka set."""


class BareThreading(pykka.ThreadingActor):
    """pykka's own actor, never started: only what pykka's ``__init__`` sets."""


def test_a_pooled_actor_has_the_fields_pykka_sets_with_a_stop_flag_for_its_event(pool):
    # PooledActor sets pykka's fields itself (no Event); a pykka release adding a
    # field to Actor.__init__ shows up here
    actor, pykkas = Bare(pool=pool), BareThreading()
    assert set(vars(actor)) - {"_pool", "_setup_done"} == set(vars(pykkas))
    assert actor.actor_urn.startswith("urn:uuid:") and actor.actor_urn != Bare(pool=pool).actor_urn
    ref = actor.actor_ref
    assert (ref.actor_urn, ref.actor_inbox, ref.actor_stopped) == (
        actor.actor_urn,
        actor.actor_inbox,
        actor.actor_stopped,
    )
    assert ref.actor_class is Bare


def test_the_stop_flag_answers_like_an_event_and_wakes_its_waiters(pool):
    ref = Plain.start(pool=pool)
    flag = ref.actor_stopped
    assert ref.is_alive() and not flag.is_set()
    assert flag.wait(0) is False  # not stopped: a zero wait says so at once
    waiting = threading.Event()
    woke: list[bool] = []

    def waiter() -> None:
        waiting.set()
        woke.append(flag.wait(10))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(10)
    assert ref.stop(timeout=10) is True
    thread.join(10)
    assert woke == [True]  # woken by the stop (or it found the flag set), not the timeout
    assert flag.is_set() and not ref.is_alive() and flag.wait() is True

"""Actors own no thread: session starts and evictions cost none, mailbox traffic runs
on the registry's pool (bounded), and `close()` leaves no thread behind."""

from __future__ import annotations

import gc
import threading

import pytest

from actors import CompactionPolicy, SessionRegistry
from persistence import open_store

pytestmark = pytest.mark.timeout(120)

CALLERS = 8
PER_CALLER = 150
MAX_RESIDENT = 64
#: Besides the callers: at most one worker per request in flight (a caller waits for
#: its answer, so at most CALLERS), plus a few. Far below MAX_RESIDENT, so a thread
#: per resident actor fails it.
SMALL = 4


@pytest.fixture
def store_url(sqlite_path: str) -> str:
    """Threads are backend-independent: these run on a real SQLite file only."""
    return sqlite_path


def test_sessions_whose_appends_run_on_the_caller_start_no_thread(make_registry, store):
    registry = make_registry(max_resident=8)
    registry.session("warm-up").append("user", "hello")  # the store's own threads exist now
    baseline = threading.active_count()
    for i in range(100):  # most starts evict one: eviction costs no thread either
        registry.session(f"quiet-{i}").append("user", f"message {i}")
        assert threading.active_count() == baseline, f"a thread appeared at start {i}"
    stats = registry.stats()
    assert stats["resident"] <= 8
    assert stats["actors_stopped"] >= 100 - 8
    assert [m.content for m in store.transcript("quiet-0")] == ["message 0"]


def test_a_resident_actor_keeps_few_objects_for_the_garbage_collector(make_registry, store):
    # Each object a resident actor keeps is promoted to the oldest generation and
    # costs every later session start a share of the full collections (see
    # `actors.scheduling.pooled.StopFlag`): 12 now (its slot, two locks and the set of ids; the
    # actor, its pykka ref and weak reference; its mailbox, lock and deque; the turn
    # gate; the stop flag), 12.6 per start counting the store's own (20.6 with
    # pykka's Event, the turn gate's deque and counter, a bound method)
    registry = make_registry(max_resident=1000)
    registry.session("warm-up").append("user", "hello")
    gc.collect()
    before = len(gc.get_objects())
    starts = 300
    for i in range(starts):
        registry.session(f"resident-{i}").append("user", "hello")
    gc.collect()
    assert registry.stats()["resident"] == starts + 1
    per_actor = (len(gc.get_objects()) - before) / starts
    assert per_actor < 14, f"{per_actor:.2f} tracked objects per resident actor"


def test_threads_stay_bounded_while_many_sessions_start_concurrently(make_registry, store):
    registry = make_registry(max_resident=MAX_RESIDENT)
    registry.session("warm-up").append("user", "hello")
    baseline = threading.active_count()
    peaks = [0] * CALLERS
    errors: list[BaseException] = []
    gate = threading.Barrier(CALLERS)

    def caller(k: int) -> None:
        try:
            gate.wait(10)
            for i in range(PER_CALLER):
                handle = registry.session(f"busy-{k}-{i}")
                handle.append("user", f"{k}/{i}")
                if i % 3 == 0:  # some traffic through the mailbox too
                    assert [m.content for m in handle.transcript()] == [f"{k}/{i}"]
                peaks[k] = max(peaks[k], threading.active_count())
        except BaseException as exc:
            errors.append(exc)

    callers = [threading.Thread(target=caller, args=(k,)) for k in range(CALLERS)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(60)
    assert not errors, errors[0]
    assert max(peaks) - baseline <= 2 * CALLERS + SMALL
    assert registry.stats()["resident"] <= MAX_RESIDENT
    assert registry.stats()["actors_started"] >= CALLERS * PER_CALLER
    for k in range(CALLERS):
        assert [m.content for m in store.transcript(f"busy-{k}-{PER_CALLER - 1}")] == [f"{k}/{PER_CALLER - 1}"]


def test_close_joins_the_threads_mailbox_traffic_started(store_url):
    before = set(threading.enumerate())
    store = open_store(store_url)
    try:
        registry = SessionRegistry(store, policy=CompactionPolicy(max_resident=16))
        handles = [registry.session(f"read-{i}") for i in range(40)]
        for i, handle in enumerate(handles):
            handle.append("user", f"m{i}")
        readers = [threading.Thread(target=lambda h=h: h.transcript()) for h in handles]
        for t in readers:
            t.start()
        for t in readers:
            t.join(30)
        assert set(threading.enumerate()) - before  # workers, the janitor, the writer
        registry.close()
    finally:
        store.close()
    assert not [t.name for t in set(threading.enumerate()) - before if t.is_alive()]

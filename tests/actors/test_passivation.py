"""Item 15 (bounded residency) plus idle eviction and the hand-over between actors."""

from __future__ import annotations

import threading

import pykka
import pytest

from actors import RegistryClosedError
from actors._passivation import ResidentSet
from actors.session.actor import SessionActor
from actors.session.slot import Slot
from actors.testing import GatedCompressor
from protocol import CompressionStatus

from .helpers import Blocker, conversation, result_of, run_in_thread, wait_until

pytestmark = pytest.mark.timeout(120)

SESSIONS = 2_000
MAX_RESIDENT = 64


@pytest.fixture
def store_url(sqlite_path: str) -> str:
    """Residency is backend-independent: these run on a real SQLite file only."""
    return sqlite_path


def test_many_sessions_stay_bounded_and_lose_nothing(make_registry, store):
    registry = make_registry(max_resident=MAX_RESIDENT)
    baseline_threads = threading.active_count()
    first = registry.session("many-0")
    peak_resident = peak_threads = 0
    for i in range(SESSIONS):
        handle = registry.session(f"many-{i}")
        handle.append("user", f"message {i}")
        peak_resident = max(peak_resident, registry.stats()["resident"])
        peak_threads = max(peak_threads, threading.active_count())

    assert peak_resident <= MAX_RESIDENT
    assert peak_threads - baseline_threads <= 2 * MAX_RESIDENT
    assert registry.stats()["actors_stopped"] >= SESSIONS - MAX_RESIDENT
    # an evicted session answers correctly through its old handle
    assert [m.content for m in first.transcript()] == ["message 0"]
    first.append("assistant", "after eviction")
    assert [m.content for m in store.transcript("many-0")] == ["message 0", "after eviction"]
    # nothing lost across eviction
    for i in range(0, SESSIONS, 7):
        assert [m.content for m in store.transcript(f"many-{i}")][:1] == [f"message {i}"]
    assert len(store.sessions()) == SESSIONS


def test_idle_actors_are_stopped_and_come_back(make_registry, store):
    registry = make_registry(idle_timeout_s=0.1)
    session = registry.session("idle")
    session.append("user", "before")
    wait_until(lambda: registry.stats()["resident"] == 0, what="idle eviction")
    session.append("assistant", "after")
    assert registry.stats()["resident"] == 1
    assert [m.content for m in session.transcript()] == ["before", "after"]


def test_an_actor_with_an_attempt_in_flight_is_never_evicted(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated, max_resident=1, idle_timeout_s=0.05)
    busy = registry.session("busy")
    busy.append(conversation(4))
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("o", busy.compress()))
    thread.start()
    assert gated.wait_started(10)
    for i in range(5):  # push over capacity while it compacts
        registry.session(f"other-{i}").append("user", "x")
    # the idle ones go (capacity and idle timeout); the busy one must stay
    wait_until(lambda: registry.stats()["resident"] == 1, what="idle actors to be evicted")
    assert registry.stats()["attempts_in_flight"] == 1
    gated.release()
    thread.join(20)
    # an evicted actor would have cancelled its attempt on stop
    assert box["o"].status is CompressionStatus.COMPACTED
    assert store.current_lease("busy") is None


def test_no_message_is_stranded_while_actors_are_evicted_under_load(make_registry, store):
    """Enqueue and stop share the slot lock: appends racing constant eviction all land."""
    registry = make_registry(max_resident=2, idle_timeout_s=0.01, ask_timeout_s=5)
    sessions = [f"churn-{k}" for k in range(16)]
    handles = {sid: registry.session(sid) for sid in sessions}
    barrier = threading.Barrier(8)
    acked: dict[str, list[str]] = {sid: [] for sid in sessions}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            barrier.wait(5)
            for i in range(60):
                sid = sessions[(w * 7 + i) % len(sessions)]
                stored = handles[sid].append("user", f"w{w}-{i}")
                with lock:
                    acked[sid].append(stored.content)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert registry.stats()["actors_stopped"] > 16  # eviction really happened meanwhile
    for sid in sessions:
        durable = [m.content for m in store.transcript(sid)]
        assert sorted(durable) == sorted(acked[sid])
        assert len(durable) == len(set(durable))


def test_an_old_handle_interrupts_the_restarted_actors_attempt(make_registry, store):
    gated = GatedCompressor()
    registry = make_registry(gated, idle_timeout_s=0.05)
    old = registry.session("restarted")
    old.append(conversation(6))
    wait_until(lambda: registry.stats()["resident"] == 0, what="idle eviction")

    fresh = registry.session("restarted")  # a new actor for the same session
    done = threading.Event()
    box: dict = {}
    worker = threading.Thread(target=lambda: (box.update(o=fresh.compress()), done.set()))
    worker.start()
    assert gated.wait_started(10)
    assert old.interrupt() is True  # the handle from before the eviction still reaches it
    assert done.wait(10)
    worker.join(10)
    assert box["o"].status is CompressionStatus.CANCELLED
    assert store.current_lease("restarted") is None


def test_a_slow_store_look_up_holds_up_only_its_own_id(make_registry):
    """No store I/O under the registry lock: while one id's creation is stuck in the
    store, other ids start and serve, and a second caller of the stuck id waits for
    the first (one create, one actor)."""
    registry = make_registry(faulty=True)
    blocker = Blocker()
    registry.store.hooks["create_session"] = lambda real, sid, **kw: (
        blocker(real, sid, **kw) if sid == "slow" else real(sid, **kw)
    )
    first, first_box = run_in_thread(lambda: registry.session("slow"))
    assert blocker.entered.wait(10)
    second, second_box = run_in_thread(lambda: registry.session("slow"))
    other = registry.session("other")  # would wait behind "slow" if the lock were held
    assert other.append("user", "served meanwhile").seq == 1
    assert first.is_alive() and second.is_alive()
    blocker.release.set()
    a, b = result_of(first, first_box), result_of(second, second_box)
    assert a.append("user", "one").session_id == b.append("user", "two").session_id == "slow"
    assert registry.stats()["actors_started"] == 2
    assert [m.content for m in b.transcript()] == ["one", "two"]


def test_eviction_stops_the_least_recently_used_idle_actor(make_registry, store):
    registry = make_registry(max_resident=3)
    handles = {sid: registry.session(sid) for sid in ("a", "b", "c")}
    handles["a"].append("user", "a is used again")  # b is now the least recently used
    registry.session("d")
    assert registry.stats()["actors_stopped"] == 1
    started = registry.stats()["actors_started"]
    for sid in ("a", "c", "d"):  # still resident: no restart
        registry.session(sid).append("user", f"{sid} resident")
    assert registry.stats()["actors_started"] == started
    handles["b"].append("user", "b comes back")  # restarts b, evicts the LRU one
    assert registry.stats()["actors_started"] == started + 1
    assert registry.stats()["resident"] == 3


def test_resident_set_scans_in_lru_order_and_skips_busy_and_kept_slots():
    resident = ResidentSet()
    slots = [Slot(f"s{i}") for i in range(5)]
    for n, slot in enumerate(slots):
        slot.last_used = float(n)
        resident.add(slot)
    slots[0].pending = 1  # busy: never picked
    slots[1].last_used = 10.0  # used since it was filed: second chance
    assert resident.over_capacity(3, keep=slots[2]) == [slots[3], slots[4]]
    assert list(resident) == [slots[0], slots[1], slots[2]]  # refiled in the order seen
    assert resident.over_capacity(2) == [slots[1]]  # s0 still busy; s1 filed before s2
    slots[0].pending = 0
    slots[2].last_used = 12.0
    assert resident.idle_since(5.0) == [slots[0]]  # s2 was used at 12
    assert list(resident) == [slots[2]]


def test_two_ids_of_one_lineage_started_at_once_share_one_actor(make_registry):
    """The parent's id and its successor's, started by two callers whose look-ups
    end together: each may make an actor outside the registry lock; one is kept,
    the other stops unused, and both handles reach the kept one."""
    gated = GatedCompressor()
    gated.release()
    rotator = make_registry(gated, mode="rotate")
    rotator.session("parent").append(conversation(4))
    outcome = rotator.session("parent").compress()
    assert outcome.status is CompressionStatus.ROTATED
    child = outcome.session_id
    rotator.close()
    registry = make_registry(faulty=True, idle_timeout_s=0.2)
    for trial in range(5):
        looked_up = threading.Barrier(2)  # both callers' last store read is the child's
        registry.store.hooks["get_session"] = lambda real, sid: (
            (looked_up.wait(10), real(sid))[1] if sid == child else real(sid)
        )
        via_parent, parent_box = run_in_thread(lambda: registry.session("parent"))
        via_child, child_box = run_in_thread(lambda: registry.session(child))
        parent_handle, child_handle = result_of(via_parent, parent_box), result_of(via_child, child_box)
        registry.store.hooks.clear()
        assert parent_handle.append("user", f"parent {trial}").session_id == child
        assert child_handle.append("user", f"child {trial}").session_id == child
        assert len(pykka.ActorRegistry.get_by_class(SessionActor)) == 1  # none left unused
        wait_until(lambda: registry.stats()["resident"] == 0, what="idle eviction")
    assert registry.stats()["actors_started"] == 5
    assert [m.content for m in registry.session(child).transcript()][-2:] == ["parent 4", "child 4"]


def test_a_start_that_ends_after_close_leaves_no_actor(make_registry):
    """close() while a start's store look-up is under way: the start fails with
    `RegistryClosedError` and the actor it made outside the lock is stopped."""
    registry = make_registry(faulty=True)
    blocker = Blocker()
    registry.store.hooks["create_session"] = blocker
    starting, box = run_in_thread(lambda: registry.session("late"))
    assert blocker.entered.wait(10)
    registry.close()
    blocker.release.set()
    with pytest.raises(RegistryClosedError):
        result_of(starting, box)
    assert pykka.ActorRegistry.get_by_class(SessionActor) == []

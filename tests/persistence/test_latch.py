"""`Latch`: the one-shot wake-up of a group-commit writer's waiting caller, on an
eventfd where Linux has one, else (or past `MAX_EVENTFDS`) on a plain lock."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from persistence import _latch as latch
from persistence._latch import Latch

pytestmark = pytest.mark.timeout(60)

HAS_EVENTFD = hasattr(os, "eventfd")


@pytest.fixture(params=["eventfd", "lock"])
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "eventfd" and not HAS_EVENTFD:
        pytest.skip("no os.eventfd on this platform")
    if request.param == "lock":
        monkeypatch.setattr(latch, "MAX_EVENTFDS", 0)  # every new latch is a lock
    yield request.param


def waited_in_thread(
    target: Latch, was_set: list[bool], set_called: list[bool], ready: threading.Event
) -> threading.Thread:
    """A thread that waits on ``target``, then records whether its setter had been
    called by then (``set_called``, flipped by the test right before ``set``)."""

    def wait() -> None:
        ready.set()
        target.wait()
        was_set.append(set_called[0])

    thread = threading.Thread(target=wait)
    thread.start()
    return thread


def test_a_latch_set_first_lets_its_wait_through(kind):
    done = Latch()
    done.set()
    done.wait()  # returns at once: nothing blocks this thread
    again = Latch()  # may reuse the eventfd, whose count the set above left behind
    again.set()
    again.wait()


def test_a_waiter_returns_only_after_its_own_set_even_past_stale_wake_ups(kind):
    # Each round first leaves a stale wake-up behind (a latch set, then waited on
    # without reading: its count stays on an eventfd that goes back to the pool), so
    # the next latch may take an eventfd that already counts one: its waiter must
    # look at its own flag and wait on.
    early: list[int] = []
    for round_ in range(200):
        stale = Latch()
        stale.set()
        stale.wait()
        target, was_set, set_called, ready = Latch(), [], [False], threading.Event()
        thread = waited_in_thread(target, was_set, set_called, ready)
        assert ready.wait(10)
        set_called[0] = True
        target.set()
        thread.join(10)
        assert not thread.is_alive()
        if was_set != [True]:
            early.append(round_)
    assert early == [], f"waits returned before their set in rounds {early}"


def test_many_latches_in_flight_each_wake_their_own_waiter(kind):
    count = 64
    latches = [Latch() for _ in range(count)]
    woke = [threading.Event() for _ in range(count)]
    ready = threading.Barrier(count + 1)

    def wait(k: int) -> None:
        ready.wait(10)
        latches[k].wait()
        woke[k].set()

    threads = [threading.Thread(target=wait, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    ready.wait(10)
    for k in range(0, count, 2):  # half of them: the others must stay asleep
        latches[k].set()
    for k in range(0, count, 2):
        assert woke[k].wait(10)
    assert not any(woke[k].is_set() for k in range(1, count, 2))
    for k in range(1, count, 2):
        latches[k].set()
    for t in threads:
        t.join(10)
    assert all(w.is_set() for w in woke)


@pytest.mark.skipif(not HAS_EVENTFD or not hasattr(os, "fork"), reason="eventfds and fork (Linux)")
def test_a_forked_child_never_takes_the_parents_wake_ups():
    # An eventfd idle in the pool at the fork is shared by both processes; a child
    # that waited on its copy could swallow the parent's wake-up and leave the
    # parent's waiter asleep for good. The child makes its own instead.
    warm = Latch()
    warm.set()
    warm.wait()  # an eventfd is now idle in the pool, as the fork will see it
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait on a latch of its own until the parent has set its one
        try:
            os.close(to_child_w)
            os.close(to_parent_r)
            mine = Latch()
            waiter = threading.Thread(target=mine.wait)
            waiter.start()
            os.write(to_parent_w, b"w")  # waiting (or about to)
            os.read(to_child_r, 1)  # the parent has set its latch
            mine.set()
            waiter.join(10)
            os._exit(0 if not waiter.is_alive() else 1)
        except BaseException:
            os._exit(2)
    os.close(to_child_r)
    os.close(to_parent_w)
    try:
        theirs = Latch()  # takes the pooled eventfd the child inherited
        woke = threading.Event()
        waiter = threading.Thread(target=lambda: (theirs.wait(), woke.set()))
        waiter.start()
        assert os.read(to_parent_r, 1) == b"w"
        theirs.set()
        assert woke.wait(10), "the parent's waiter never woke: the child took its wake-up"
        os.write(to_child_w, b"s")
        waiter.join(10)
    finally:
        os.close(to_child_w)
        os.close(to_parent_r)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

"""`WorkerPool`: threads on demand up to the cap, FIFO, idle exit, close joins."""

from __future__ import annotations

import threading

import pytest

from actors.scheduling.pool import WorkerPool

pytestmark = pytest.mark.timeout(60)


def test_tasks_run_in_submission_order_on_one_worker():
    pool = WorkerPool(1)
    seen: list[int] = []
    done = threading.Event()
    gate = threading.Event()
    pool.submit(lambda: gate.wait(10))  # the queue builds up behind it
    for i in range(100):
        pool.submit(lambda i=i: seen.append(i))
    pool.submit(done.set)
    gate.set()
    assert done.wait(10)
    assert seen == list(range(100))
    assert pool.close(10)


def test_threads_start_on_demand_and_never_pass_the_cap():
    cap = 3
    pool = WorkerPool(cap)
    before = threading.active_count()
    release = threading.Event()
    lock = threading.Lock()
    running = [0]
    peak = [0]
    all_in = threading.Barrier(cap + 1)
    finished = threading.Semaphore(0)
    workers: set[threading.Thread] = set()

    def task(first_wave: bool) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            workers.add(threading.current_thread())
        if first_wave:
            all_in.wait(10)  # every worker of the cap is busy at once
        assert release.wait(10)
        with lock:
            running[0] -= 1
        finished.release()

    for i in range(10):
        pool.submit(lambda first=i < cap: task(first))
    all_in.wait(10)
    assert threading.active_count() - before <= cap  # blocked tasks made it start the cap
    release.set()
    for _ in range(10):
        assert finished.acquire(timeout=10)
    assert peak[0] == cap
    assert len(workers) == cap
    assert pool.stats()["threads_started"] == cap
    assert pool.close(10)
    assert not any(w.is_alive() for w in workers)


def test_no_thread_until_the_first_task():
    before = threading.active_count()
    pool = WorkerPool(8)
    assert threading.active_count() == before
    ran = threading.Event()
    pool.submit(ran.set)
    assert ran.wait(10)
    assert pool.stats()["threads_started"] == 1
    assert pool.close(10)
    assert threading.active_count() == before


def test_an_idle_worker_exits_by_itself():
    pool = WorkerPool(4, idle_s=0.05)
    box: dict[str, threading.Thread] = {}
    ran = threading.Event()
    pool.submit(lambda: (box.setdefault("worker", threading.current_thread()), ran.set()))
    assert ran.wait(10)
    box["worker"].join(10)  # no close(): the idle timeout ends it
    assert not box["worker"].is_alive()
    assert pool.stats()["workers"] == 0
    # and the pool starts another one for the next task
    again = threading.Event()
    pool.submit(again.set)
    assert again.wait(10)
    assert pool.close(10)


def test_close_runs_what_is_queued_then_joins_every_worker():
    pool = WorkerPool(2)
    gate = threading.Event()
    ran: list[int] = []
    workers: set[threading.Thread] = set()
    started = threading.Barrier(3)

    def blocker() -> None:
        workers.add(threading.current_thread())
        started.wait(10)
        gate.wait(10)

    pool.submit(blocker)
    pool.submit(blocker)
    for i in range(5):
        pool.submit(lambda i=i: ran.append(i))
    started.wait(10)
    closer = threading.Thread(target=pool.close, args=(10,))
    closer.start()
    gate.set()
    closer.join(10)
    assert not closer.is_alive()
    assert sorted(ran) == list(range(5))
    assert not any(w.is_alive() for w in workers)


def test_a_task_submitted_after_close_runs_on_the_submitting_thread():
    pool = WorkerPool(2)
    assert pool.close(10)
    box = {}
    pool.submit(lambda: box.setdefault("thread", threading.current_thread()))
    assert box["thread"] is threading.current_thread()


@pytest.mark.parametrize("raised", [RuntimeError("boom"), SystemExit(3), KeyboardInterrupt()])
def test_a_failing_task_never_takes_its_worker_down(raised):
    pool = WorkerPool(1)
    threads: list[threading.Thread] = []
    done = threading.Event()

    def fail() -> None:
        threads.append(threading.current_thread())
        raise raised

    pool.submit(fail)
    pool.submit(lambda: (threads.append(threading.current_thread()), done.set()))
    assert done.wait(10)
    assert threads[0] is threads[1]  # the same worker went on
    assert pool.close(10)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        WorkerPool(0)
    with pytest.raises(ValueError):
        WorkerPool(1, idle_s=0)

"""Review of the pooled runtime (actors without a thread of their own): what it must
keep from the thread-per-actor one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from actors.scheduling.pool import WorkerPool

pytestmark = pytest.mark.timeout(120)

#: A process whose work is done exits within this (it takes well under a second).
EXIT_WITHIN_S = 30


@pytest.mark.parametrize("used", [False, True], ids=["never-used", "used"])
def test_a_process_that_never_closes_its_registry_still_exits(tmp_path, used):
    """The pool's core worker waits for work for ever: as a non-daemon thread it kept
    the interpreter from exiting (main exited at once, or after idle eviction)."""
    script = textwrap.dedent(f"""
        from actors import CompactionPolicy, SessionRegistry
        from persistence import open_store
        registry = SessionRegistry(open_store({str(tmp_path / "state.db")!r}),
                                   policy=CompactionPolicy(idle_timeout_s=1))
        if {used!r}:
            handle = registry.session("s")
            handle.append("user", "hello")
            assert [m.content for m in handle.transcript()] == ["hello"]  # a pool worker ran
        print("done", flush=True)
    """)
    try:
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not exit within {EXIT_WITHIN_S}s after its work (stdout {exc.stdout!r})")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "done"


def test_a_worker_that_cannot_start_leaves_the_task_to_the_workers_alive(monkeypatch):
    """``can't start new thread`` (a pids limit) while a worker is busy: the task waits
    for that worker, the teller is not told it failed (its message is queued and will
    be handled: a retry would apply it twice), and close() still joins the pool."""
    pool = WorkerPool(4, core=1, name="review-pool")
    gate = threading.Event()
    entered = threading.Event()
    pool.submit(lambda: (entered.set(), gate.wait(10)))
    assert entered.wait(10)  # the core worker is busy: the next task wants a new one
    real_start = threading.Thread.start

    def failing_start(thread: threading.Thread) -> None:
        if thread.name.startswith("review-pool"):
            raise RuntimeError("can't start new thread")  # injected fault
        real_start(thread)

    ran = threading.Event()
    monkeypatch.setattr(threading.Thread, "start", failing_start)
    try:
        pool.submit(ran.set)
    finally:
        monkeypatch.setattr(threading.Thread, "start", real_start)
        gate.set()
    assert ran.wait(10)
    assert pool.stats()["workers"] == 1
    assert pool.close(10)

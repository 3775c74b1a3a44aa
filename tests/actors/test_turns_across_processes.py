"""Turns stay whole across processes: a real worker process holds turns on the
same database (SQLite file or PostgreSQL), synchronized by its stdin/stdout pipes.
kill -9 and SIGSTOP of the holder: the other process goes on once the lease lapses."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from actors import CompactionPolicy, SessionRegistry
from persistence import open_store
from protocol import Message, SessionBusyError

TTL_S = 1.0
pytestmark = pytest.mark.timeout(120)


def _worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.actors.turn_worker", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _expect(proc: subprocess.Popen[str], line: str, timeout: float = 30.0) -> None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"worker said nothing within {timeout}s"
    assert proc.stdout.readline().strip() == line


def _finish(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


@pytest.fixture
def registry(store):
    reg = SessionRegistry(store, policy=CompactionPolicy(lease_ttl_s=TTL_S))
    yield reg
    reg.close()


def test_an_append_from_another_process_waits_for_the_turn(store_url, registry):
    registry.session("s").append(Message("user", "start"))
    proc = _worker("hold", store_url, "s", "30")
    try:
        _expect(proc, "opened")
        outcome: list[object] = []
        appended = threading.Thread(target=lambda: outcome.append(registry.session("s").append("user", "mine")))
        appended.start()
        appended.join(1.5)  # it must still be waiting: the turn is open
        assert appended.is_alive() and not outcome
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _expect(proc, "closed")
        appended.join(30)
        assert outcome and outcome[0].content == "mine"
    finally:
        _finish(proc)
    assert [m.content for m in registry.session("s").transcript()] == ["start", "held-1", "held-2", "mine"]


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_dead_or_frozen_holder_blocks_others_only_until_its_lease_lapses(store_url, registry, fault):
    proc = _worker("hold", store_url, "s", str(TTL_S))
    try:
        _expect(proc, "opened")
        os.kill(proc.pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        started = time.monotonic()
        stored = registry.session("s").append("user", "after the holder")
        waited = time.monotonic() - started
        assert waited < TTL_S + 5.0  # the lease lapses, the poll notices
        assert stored.seq == 2
        if fault == "stop":  # thawed, its lease is gone: the rest of its turn is refused
            os.kill(proc.pid, signal.SIGCONT)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            _expect(proc, "lost")
    finally:
        _finish(proc)
    assert [m.content for m in registry.session("s").transcript()] == ["held-1", "after the holder"]


@pytest.mark.parametrize("on_busy", ["reject", "interrupt", "rollback"])
def test_on_busy_against_another_process(store_url, registry, on_busy):
    proc = _worker("hold", store_url, "s", "30")
    try:
        _expect(proc, "opened")
        handle = registry.session("s")
        if on_busy == "reject":
            with pytest.raises(SessionBusyError) as caught:
                with handle.turn(on_busy="reject"):
                    pass
            assert caught.value.holder == "worker" and caught.value.expires_at is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            _expect(proc, "closed")
        else:
            done = threading.Event()

            def interrupting_turn():
                with handle.turn(on_busy=on_busy):
                    handle.append("user", "second texter")
                done.set()

            thread = threading.Thread(target=interrupting_turn)
            thread.start()
            assert not done.wait(0.5)  # waits for the worker's turn
            proc.stdin.write("go\n")  # the worker ends its turn (a real one would see Turn.interrupted)
            proc.stdin.flush()
            _expect(proc, "closed")
            thread.join(30)
            assert done.is_set()
    finally:
        _finish(proc)
    live = [m.content for m in registry.session("s").transcript()]
    assert (
        live
        == {
            "reject": ["held-1", "held-2"],
            "interrupt": ["held-1", "held-2", "second texter"],
            "rollback": ["second texter"],
        }[on_busy]
    )
    if on_busy == "rollback":
        assert [(m.content, m.state) for m in registry.session("s").archive()] == [
            ("held-1", "retracted"),
            ("held-2", "retracted"),
        ]


def test_a_rejecting_turn_behind_a_held_append_is_refused_at_once(store_url, registry):
    """An append held behind another process's turn leaves the session busy: a turn
    that rejects when busy is refused now, not once the other turn ends."""
    proc = _worker("hold", store_url, "s", "30")
    try:
        _expect(proc, "opened")
        outcome: list[object] = []
        appended = threading.Thread(target=lambda: outcome.append(registry.session("s").append("user", "mine")))
        appended.start()
        appended.join(0.5)
        assert appended.is_alive() and not outcome  # held behind the worker's turn
        started = time.monotonic()
        with pytest.raises(SessionBusyError) as caught:
            with registry.session("s").turn(on_busy="reject"):
                pass
        assert time.monotonic() - started < 5.0
        assert caught.value.holder == "worker"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _expect(proc, "closed")
        appended.join(30)
        assert outcome and outcome[0].content == "mine"
    finally:
        _finish(proc)
    assert [m.content for m in registry.session("s").transcript()] == ["held-1", "held-2", "mine"]


def test_turns_from_two_processes_are_never_split(store_url, registry):
    registry.session("s").append(Message("user", "start"))
    workers = [_worker("turns", store_url, "s", name, "15") for name in ("p1", "p2")]
    try:
        for proc in workers:
            _expect(proc, "ready")
        for proc in workers:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        handle = registry.session("s")
        for n in range(15):  # this process drives turns too
            with handle.turn():
                handle.append(Message("user", f"p0-{n} ask", meta={"turn": f"p0-{n}"}))
                handle.append(Message("assistant", f"p0-{n} answer", meta={"turn": f"p0-{n}"}))
        for proc in workers:
            _expect(proc, "done", timeout=90)
    finally:
        for proc in workers:
            _finish(proc)
    transcript = registry.session("s").transcript()
    turns = [m.meta.get("turn") for m in transcript[1:] if m.meta.get("turn")]
    assert len(turns) == 2 * 45
    pairs = [m.meta.get("turn") for m in transcript]
    for i, m in enumerate(transcript):  # each ask is followed by its own answer
        if m.content.endswith(" ask"):
            assert pairs[i + 1] == m.meta["turn"], f"turn {m.meta['turn']} split by {transcript[i + 1].content!r}"


def _fault_the_holder_then_append(proc, reg, fault: str, opened=lambda: None, alive=lambda: True) -> float:
    """Once the worker opened its turn (``opened()`` checks it), kill -9 or SIGSTOP it,
    then append through ``reg``:
    after a kill the append must land long before the 60 s lease lapses (the time it
    took is returned); a frozen holder (``alive()`` still true) keeps its turn until
    it resumes and closes it. The worker is resumed in any case."""
    try:
        _expect(proc, "opened")
        opened()
        os.kill(proc.pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        outcome: list[object] = []
        appended = threading.Thread(target=lambda: outcome.append(reg.session("s").append("user", "mine")))
        started = time.monotonic()
        appended.start()
        if fault == "kill":
            appended.join(10)
            waited = time.monotonic() - started
            assert outcome, "held behind a dead holder's turn"
            assert waited < 10  # not the 60 s lease
            return waited
        appended.join(1.5)  # several polls
        assert appended.is_alive() and not outcome  # alive, only slow: its turn stands
        assert alive()
        os.kill(proc.pid, signal.SIGCONT)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _expect(proc, "closed")
        appended.join(30)
        assert outcome
        return time.monotonic() - started
    finally:
        if fault == "stop" and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
        _finish(proc)


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_dead_holder_on_this_host_is_noticed_at_once_a_frozen_one_keeps_its_turn(store_url, store, fault):
    """The holder's default name marks its process: killed, its turn is sealed within
    about a tick, long before its 60 s lease lapses; frozen (alive), it keeps its turn."""
    with SessionRegistry(store, policy=CompactionPolicy()) as reg:  # the default lease: 60 s
        proc = _worker("hold", store_url, "s", "60", "-")

        def opened():
            assert "@" in store.current_turn("s").holder  # the worker's process mark

        _fault_the_holder_then_append(proc, reg, fault, opened)
        live = [m.content for m in reg.session("s").transcript()]
    assert live == (["held-1", "mine"] if fault == "kill" else ["held-1", "held-2", "mine"])


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_dead_holder_on_another_host_is_noticed_by_postgresql_a_frozen_one_keeps_its_turn(pg_url, fault, capsys):
    """A holder named by hand has no process mark, so /proc cannot help (as for a holder
    on another host): on PostgreSQL its registry holds a session lock named after it.
    Killed, its session ends and the lock with it: its turn is sealed within about a
    second, long before its 60 s lease lapses; frozen, its session (and its turn) stands."""
    with open_store(pg_url) as store, SessionRegistry(store, policy=CompactionPolicy()) as reg:
        proc = _worker("hold", pg_url, "s", "60", "cross-host-worker")

        def opened():
            assert store.current_turn("s").holder == "cross-host-worker"
            assert store.holder_alive("cross-host-worker") is True  # announced by the worker's registry

        waited = _fault_the_holder_then_append(
            proc, reg, fault, opened, alive=lambda: store.holder_alive("cross-host-worker") is True
        )
        if fault == "kill":
            with capsys.disabled():
                print(f"\n[cross-host kill -9] the append landed after {waited:.2f}s")
        live = [m.content for m in reg.session("s").transcript()]
    assert live == (["held-1", "mine"] if fault == "kill" else ["held-1", "held-2", "mine"])

"""`registry.close(drain_s=...)`: the turns open when a gateway shuts down finish and
write their answers; no new turn opens meanwhile; the drain ends at its deadline."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from actors import RegistryClosedError
from actors.testing import GatedCompressor
from protocol import InvalidArgumentError, Message

pytestmark = pytest.mark.timeout(60)


def _until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.005)


class Run:
    """A gateway's run on its own thread: a turn with the user's message; the model
    answers when ``answer`` is set; then the assistant's message and the turn closes."""

    def __init__(self, registry, session_id: str) -> None:
        self.answer = threading.Event()
        self.opened = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(registry, session_id), name=f"run:{session_id}")
        self._thread.start()

    def _run(self, registry, session_id: str) -> None:
        try:
            with registry.session(session_id).turn() as h:
                h.append("user", "ask")
                self.opened.set()
                assert self.answer.wait(20)
                h.append("assistant", "answer")
        except BaseException as exc:  # the outcome under test
            self.error = exc

    def join(self) -> None:
        self._thread.join(30)
        assert not self._thread.is_alive()


def test_a_draining_close_lets_open_turns_write_their_answers(make_registry) -> None:
    registry = make_registry()
    runs = [Run(registry, f"s{i}") for i in range(5)]
    for run in runs:
        assert run.opened.wait(10)
    closer = threading.Thread(target=registry.close, kwargs={"drain_s": 20}, name="closer")
    closer.start()
    _until(lambda: registry.stats()["draining"] == 1, "draining")
    with pytest.raises(RegistryClosedError, match="no new turn"):
        with registry.session("late").turn():
            pass
    registry.session("late").append("user", "a plain append is still served")
    assert closer.is_alive()  # the turns are still open: the close waits
    for run in runs:
        run.answer.set()
    for run in runs:
        run.join()
        assert run.error is None
    closer.join(30)
    assert not closer.is_alive()
    with pytest.raises(RegistryClosedError):
        registry.session("s0").transcript()
    check = make_registry()
    for i in range(5):
        assert [m.text for m in check.session(f"s{i}").transcript()] == ["ask", "answer"]


def test_the_drain_ends_at_its_deadline_and_the_late_turn_is_refused(make_registry) -> None:
    registry = make_registry()
    run = Run(registry, "stuck")
    assert run.opened.wait(10)
    started = time.monotonic()
    registry.close(drain_s=0.3)
    assert 0.3 <= time.monotonic() - started < 10
    run.answer.set()
    run.join()
    assert isinstance(run.error, RegistryClosedError)
    assert [m.text for m in make_registry().session("stuck").transcript()] == ["ask"]


def test_a_draining_close_lets_a_compaction_in_flight_commit(make_registry) -> None:
    compressor = GatedCompressor()
    registry = make_registry(compressor, keep_last=1)
    handle = registry.session("c")
    handle.append([Message("user", "one"), Message("assistant", "two"), Message("user", "three")])
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(handle.compress(force=True)), name="compress")
    worker.start()
    assert compressor.wait_started()
    closer = threading.Thread(target=registry.close, kwargs={"drain_s": 20}, name="closer")
    closer.start()
    _until(lambda: registry.stats()["draining"] == 1, "draining")
    compressor.release()
    worker.join(30)
    closer.join(30)
    assert not closer.is_alive() and outcome and outcome[0].status.committed


def test_close_async_drains_off_the_loop(make_registry) -> None:
    registry = make_registry()
    run = Run(registry, "a")
    assert run.opened.wait(10)

    async def shut_down() -> None:
        closing = asyncio.create_task(registry.close_async(drain_s=20))
        await asyncio.sleep(0)  # the loop stays free while the close drains
        assert not closing.done()
        run.answer.set()
        await closing

    asyncio.run(shut_down())
    run.join()
    assert run.error is None


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True, "5"])
def test_a_bad_drain_is_a_typed_error_and_closes_nothing(make_registry, bad) -> None:
    registry = make_registry()
    with pytest.raises(InvalidArgumentError):
        registry.close(drain_s=bad)
    registry.session("still-open").append("user", "hello")

"""`registry.close(drain_s=...)`: the turns open when a gateway shuts down finish and
write their answers; no new turn opens meanwhile; the drain ends at its deadline. A plain
`close()` (and leaving ``with registry:``) drains for up to 10 s; ``drain_s=0`` does not."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import pytest

from actors import RegistryClosedError, SessionRegistry
from actors.testing import GatedCompressor
from protocol import InvalidArgumentError, Message

pytestmark = pytest.mark.timeout(60)

#: What `SessionRegistry.close` drains for when given no ``drain_s``.
DEFAULT_DRAIN_S = 10.0


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


def test_close_drains_by_default_so_the_open_turn_writes_its_answer(make_registry) -> None:
    registry = make_registry()
    run = Run(registry, "open")
    assert run.opened.wait(10)
    closer = threading.Thread(target=registry.close, name="closer")  # no drain_s: the default
    closer.start()
    _until(lambda: registry.stats()["draining"] == 1, "draining")
    with pytest.raises(RegistryClosedError, match="no new turn"):  # refused at once
        with registry.session("late").turn():
            pass
    assert closer.is_alive()  # the turn is still open: the close waits for it
    run.answer.set()
    run.join()
    assert run.error is None
    closer.join(30)
    assert not closer.is_alive()
    assert [m.text for m in make_registry().session("open").transcript()] == ["ask", "answer"]


def test_leaving_the_with_block_drains_too(make_registry) -> None:
    registry = make_registry()
    run = Run(registry, "in-with")
    assert run.opened.wait(10)

    def leave() -> None:
        with registry:  # leaving the block closes the registry, with the default drain
            pass

    leaver = threading.Thread(target=leave, name="leaver")
    leaver.start()
    _until(lambda: registry.stats()["draining"] == 1, "draining")
    assert leaver.is_alive()
    run.answer.set()
    run.join()
    assert run.error is None
    leaver.join(30)
    assert not leaver.is_alive()
    assert [m.text for m in make_registry().session("in-with").transcript()] == ["ask", "answer"]


def test_drain_s_0_closes_at_once_and_the_open_turn_loses_its_answer(make_registry) -> None:
    registry = make_registry()
    run = Run(registry, "abandoned")
    assert run.opened.wait(10)
    started = time.monotonic()
    registry.close(drain_s=0)  # the run still waits for its answer: nothing waits for it
    assert time.monotonic() - started < DEFAULT_DRAIN_S / 2
    run.answer.set()
    run.join()
    assert isinstance(run.error, RegistryClosedError)
    assert [m.text for m in make_registry().session("abandoned").transcript()] == ["ask"]


def test_the_default_drain_is_ten_seconds_for_close_and_close_async() -> None:
    for method in (SessionRegistry.close, SessionRegistry.close_async):
        assert inspect.signature(method).parameters["drain_s"].default == DEFAULT_DRAIN_S


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

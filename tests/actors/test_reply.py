"""`Reply`, the latch a sync caller waits on: one-shot, thread-safe, bounded waits."""

from __future__ import annotations

import threading
from concurrent.futures import InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from actors.reply import Reply


def test_result_crosses_threads_and_can_be_read_twice():
    reply = Reply()
    ready = threading.Event()

    def answer():
        ready.wait(5)
        reply.set_result(42)

    worker = threading.Thread(target=answer)
    worker.start()
    assert not reply.done()
    ready.set()
    assert reply.result(timeout=5) == 42
    assert reply.result(timeout=0) == 42 and reply.done()
    worker.join(5)


def test_exception_is_raised_to_the_waiter():
    reply = Reply()
    reply.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        reply.result(timeout=1)


def test_a_reply_is_set_once():
    reply = Reply()
    reply.set_result(1)
    with pytest.raises(InvalidStateError):
        reply.set_result(2)
    with pytest.raises(InvalidStateError):
        reply.set_exception(ValueError())
    assert reply.result(timeout=0) == 1


def test_waiting_is_bounded():
    with pytest.raises(FutureTimeout):
        Reply().result(timeout=0.01)

"""`Reply`, the latch a sync caller waits on: one-shot, thread-safe, bounded waits."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from actors._reply import LoopReplies, Reply


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


def test_loop_replies_wake_the_loop_once_for_a_batch_of_answers():
    async def main():
        loop = asyncio.get_running_loop()
        replies = LoopReplies.of(loop)
        assert LoopReplies.of(loop) is replies
        futures = [loop.create_future() for _ in range(5)]
        cancelled = loop.create_future()
        cancelled.cancel()  # its task went away: the answer goes to nobody

        def post_all() -> list:
            wakes = [replies.post(f, (lambda i=i: i), None) for i, f in enumerate(futures)]
            wakes.append(replies.post(cancelled, lambda: "nobody", None))
            return wakes

        wakes = await asyncio.to_thread(post_all)
        assert wakes[0] is not None and wakes[1:] == [wakes[0]] * 5  # a wake-up until one is called
        await asyncio.to_thread(wakes[0])
        assert await asyncio.gather(*futures) == [0, 1, 2, 3, 4]
        error = loop.create_future()
        wake = await asyncio.to_thread(replies.post, error, None, ValueError("boom"))
        await asyncio.to_thread(wake)
        with pytest.raises(ValueError):
            await error

    asyncio.run(main())


def test_loop_replies_for_a_closed_loop_are_dropped():
    loop = asyncio.new_event_loop()
    future = loop.create_future()
    replies = LoopReplies.of(loop)
    loop.close()
    wake = replies.post(future, lambda: 1, None)
    wake()  # no error: nobody can await it any more
    assert not future.done()

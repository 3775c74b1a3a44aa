"""What both stores' ``append_nowait`` share: the completion their writer thread runs.

A submitted append is answered by the COMMIT that holds it, on the writer thread;
the caller (an event loop) builds its `StoredMessage`s itself, off the shared
writer. The completion never lets a telemetry failure keep the answer from
``on_done``: the caller holds its actor's exclusivity until then.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from protocol import Message, StoredMessage, TranscriptError

from . import _telemetry as telemetry
from ._rows import stored_from_params

__all__ = ["Built", "OnDone", "Wake", "completion", "stored_messages", "woken"]

#: A wake-up the writer calls once per batch (`actors._reply.LoopReplies`).
Wake = Callable[[], None]
#: Builds the stored messages of a committed append (called by whoever was answered).
Built = Callable[[], list[StoredMessage]]
#: ``on_done(built, error)``: exactly one of them is None.
OnDone = Callable[[Built | None, BaseException | None], Wake | None]
#: The writer's side: ``done((first_seq, ids, created_at), None)`` or ``done(None, error)``.
Done = Callable[[tuple[int, list[int], float] | None, BaseException | None], Wake | None]


def stored_messages(
    messages: Sequence[Message],
    params: Sequence[Mapping[str, Any]],
    session_id: str,
    first_seq: int,
    ids: list[int],
    created_at: float,
) -> list[StoredMessage]:
    """The `StoredMessage`s just-committed ``messages`` read back as."""
    if len(ids) == 1:  # most appends: no comprehension (a frame of its own) for one
        return [stored_from_params(messages[0], params[0], session_id, first_seq, ids[0], created_at)]
    return [
        stored_from_params(m, p, session_id, first_seq + i, msg_id, created_at)
        for i, (m, p, msg_id) in enumerate(zip(messages, params, ids))
    ]


def completion(
    on_done: OnDone,
    messages: Sequence[Message],
    params: Sequence[Mapping[str, Any]],
    session_id: str,
    log: logging.Logger,
) -> Done:
    """The writer's completion of one submitted append: counts it (telemetry), then
    calls ``on_done`` with a builder of its stored messages, or with the error.
    A partial, not a closure: two objects per append instead of six (the writer
    keeps dozens alive at a time, see `persistence.sqlite._writer._Request`)."""
    return functools.partial(_complete, on_done, messages, params, session_id, log, time.perf_counter())


def _complete(
    on_done: OnDone,
    messages: Sequence[Message],
    params: Sequence[Mapping[str, Any]],
    session_id: str,
    log: logging.Logger,
    started: float,
    result: tuple[int, list[int], float] | None,
    error: BaseException | None,
) -> Wake | None:
    if error is not None or result is None:
        return on_done(None, error or TranscriptError("append lost its result"))
    try:  # on the writer thread: a failing hook must not keep the answer from on_done
        telemetry.appended(len(params), time.perf_counter() - started)
    except Exception:
        log.warning("counting a submitted append failed", exc_info=True)
    if type(result) is list:  # a keyed append: its writer built the stored messages
        return on_done(functools.partial(list, result), None)
    return on_done(functools.partial(stored_messages, messages, params, session_id, *result), None)


def woken(wakes: Iterable[Wake], log: logging.Logger) -> None:
    """Call each wake-up a batch's completions returned (the writer passes each distinct
    one once); a failing one is logged, never kept from the others or the writer."""
    for wake in wakes:
        try:
            wake()
        except BaseException:  # never let the writer die of a consumer
            log.exception("waking a consumer of submitted appends failed")

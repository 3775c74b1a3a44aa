"""A fault-trial worker: appends and compacts one session until it is killed or done.

Run as ``python -m tests.faults.worker DB SESSION LEDGER [options]`` in a separate
process (its environment may arm a kill point, see `persistence._killpoints`).
Each acknowledged message goes to the ledger (fsync'd) before the next step, so
the parent can hold the store to every acknowledgement the worker ever got.
With ``--lease-file`` the worker writes that file once its compressor runs (it
holds the lease then) and keeps compressing slowly, for freeze trials.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

from actors import CompactionPolicy, HeadTailCompressor, SessionRegistry
from actors.simulate._ledger import Ledger
from persistence import open_store
from protocol import Message, StoreBusyError, StoredMessage, TranscriptError


class _SignallingCompressor:
    """HeadTail with a delay; writes a marker file when it starts (the lease is held)."""

    name = "fault-trial"

    def __init__(self, marker: str | None, delay_s: float) -> None:
        self.marker = marker
        self.delay_s = delay_s
        self.inner = HeadTailCompressor(keep_last=2)

    def compress(
        self, messages: Sequence[StoredMessage], *, target_tokens: int, cancel: threading.Event
    ) -> Sequence[Message]:
        if self.marker:
            Path(self.marker).write_text("holding", encoding="utf-8")
        if self.delay_s and cancel.wait(self.delay_s):
            return [m.as_message() for m in messages]
        return self.inner.compress(messages, target_tokens=target_tokens, cancel=cancel)


def _wait_for(path: Path, timeout_s: float = 60.0) -> None:
    """Until the parent says go on (it is fixing the fault meanwhile)."""
    pause = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if path.exists():
            return
        pause.wait(0.01)


def _open_session(registry: SessionRegistry, session_id: str):
    """Get-or-create, retried while the store is busy (a storm may outlast the patience)."""
    for _ in range(200):
        try:
            return registry.session(session_id, source="faults")
        except StoreBusyError:
            continue
    return registry.session(session_id, source="faults")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("session")
    parser.add_argument("ledger")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--mode", default="in_place")
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--holder", default="fault-worker")
    parser.add_argument("--lease-file", default=None)
    parser.add_argument("--compress-delay", type=float, default=0.0)
    parser.add_argument("--patience", type=float, default=None, help="the store's patience_s")
    parser.add_argument(
        "--resume-file", default=None, help="after a failed append, wait until this file exists before going on"
    )
    parser.add_argument(
        "--turns", action="store_true", help="each round's ask and reply are two appends inside one handle.turn()"
    )
    parser.add_argument(
        "--turn-file",
        default=None,
        help="with --turns: in round 3, after the ask, write this file and wait for --go-file (a freeze point "
        "inside a turn, outside any write)",
    )
    parser.add_argument("--go-file", default=None)
    parser.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="append and compress from an event loop (append_async: the submitted path)",
    )
    args = parser.parse_args(argv)
    policy = CompactionPolicy(
        lease_ttl_s=args.ttl, keep_last=2, target_tokens=50, cooldown_s=0, ask_timeout_s=30.0, max_compaction_s=60.0
    )
    compressor = _SignallingCompressor(args.lease_file, args.compress_delay)
    store = open_store(args.db, **({} if args.patience is None else {"patience_s": args.patience}))
    try:
        with (
            Ledger(args.ledger) as ledger,
            SessionRegistry(
                store,
                compressor=compressor,
                policy=policy,
                holder=args.holder,
            ) as registry,
        ):
            handle = _open_session(registry, args.session)
            if args.use_async:
                asyncio.run(_rounds_async(handle, ledger, args))
            else:
                for n in range(args.rounds):
                    _round(handle, ledger, args, n)
    finally:
        store.close()
    return 0


def _round(handle, ledger: Ledger, args: argparse.Namespace, n: int) -> None:
    """One round: append a question and its answer (acknowledged in the ledger), and
    every third round force a compaction."""
    try:  # a failed call (e.g. a terminated connection) is not acknowledged
        if args.turns:
            _in_turn(handle, ledger, args, n)
            return
        _acknowledged(ledger, args.session, handle.append(_batch(args.holder, n)))
    except TranscriptError as exc:
        _failed(ledger, exc, args, n)
        return
    if n % 3 == 2:
        try:
            _outcome(ledger, handle.compress(force=True, mode=args.mode))
        except TranscriptError as exc:
            ledger.record("error", type(exc).__name__, str(exc))


async def _rounds_async(handle, ledger: Ledger, args: argparse.Namespace) -> None:
    """`_round` from an event loop: the same writes through the async twins."""
    for n in range(args.rounds):
        try:
            _acknowledged(ledger, args.session, await handle.append_async(_batch(args.holder, n)))
        except TranscriptError as exc:
            _failed(ledger, exc, args, n)
            continue
        if n % 3 == 2:
            try:
                _outcome(ledger, await handle.compress_async(force=True, mode=args.mode))
            except TranscriptError as exc:
                ledger.record("error", type(exc).__name__, str(exc))


def _in_turn(handle, ledger: Ledger, args: argparse.Namespace, n: int) -> None:
    """The round's ask and reply as a turn of two appends (``meta["turn"]`` names it)."""
    with handle.turn():
        for index, message in enumerate(_batch(args.holder, n)):
            turn = {"turn": f"{args.holder} {n}"}
            stored = handle.append(Message(message.role, message.content, meta=turn))
            _acknowledged(ledger, args.session, [stored])
            if args.turn_file and n == 3 and index == 0:
                Path(args.turn_file).write_text("in a turn", encoding="utf-8")
                _wait_for(Path(args.go_file))


def _batch(holder: str, n: int) -> list[Message]:
    return [Message("user", f"ask {holder} {n}"), Message("assistant", f"reply {holder} {n}")]


def _acknowledged(ledger: Ledger, session: str, stored: Sequence[StoredMessage]) -> None:
    for m in stored:
        ledger.record("ack", session, m.id, m.text)


def _failed(ledger: Ledger, exc: TranscriptError, args: argparse.Namespace, n: int) -> None:
    ledger.record("failed", type(exc).__name__, [m.text for m in _batch(args.holder, n)])
    if args.resume_file:
        _wait_for(Path(args.resume_file))


def _outcome(ledger: Ledger, outcome) -> None:
    ledger.record("outcome", outcome.status.value, outcome.reason)


if __name__ == "__main__":
    raise SystemExit(main())

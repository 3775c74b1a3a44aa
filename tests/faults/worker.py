"""A fault-trial worker: appends and compacts one session until it is killed or done.

Run as ``python -m tests.faults.worker DB SESSION LEDGER [options]`` in a separate
process (its environment may arm a kill point, see `persistence.killpoints`).
Each acknowledged message goes to the ledger (fsync'd) before the next step, so
the parent can hold the store to every acknowledgement the worker ever got.
With ``--lease-file`` the worker writes that file once its compressor runs (it
holds the lease then) and keeps compressing slowly, for freeze trials.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Sequence
from pathlib import Path

from actors import CompactionPolicy, HeadTailCompressor, SessionRegistry
from actors.simulate.ledger import Ledger
from persistence import open_store
from protocol import Message, StoreBusyError, StoredMessage, TranscriptError


class _SignallingCompressor:
    """HeadTail with a delay; writes a marker file when it starts (the lease is held)."""

    name = "fault-trial"

    def __init__(self, marker: str | None, delay_s: float) -> None:
        self.marker = marker
        self.delay_s = delay_s
        self.inner = HeadTailCompressor(keep_last=2)

    def compress(self, messages: Sequence[StoredMessage], *, target_tokens: int,
                 cancel: threading.Event) -> Sequence[Message]:
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
    parser.add_argument("--resume-file", default=None,
                        help="after a failed append, wait until this file exists before going on")
    args = parser.parse_args(argv)
    policy = CompactionPolicy(lease_ttl_s=args.ttl, keep_last=2, target_tokens=50, cooldown_s=0,
                              ask_timeout_s=30.0, max_compaction_s=60.0)
    compressor = _SignallingCompressor(args.lease_file, args.compress_delay)
    store = open_store(args.db, **({} if args.patience is None else {"patience_s": args.patience}))
    try:
        with Ledger(args.ledger) as ledger, SessionRegistry(
            store, compressor=compressor, policy=policy, holder=args.holder,
        ) as registry:
            handle = _open_session(registry, args.session)
            for n in range(args.rounds):
                batch = [Message("user", f"ask {args.holder} {n}"),
                         Message("assistant", f"reply {args.holder} {n}")]
                try:  # a failed call (e.g. a terminated connection) is not acknowledged
                    for m in handle.append(batch):
                        ledger.record("ack", args.session, m.id, m.text)
                except TranscriptError as exc:
                    ledger.record("failed", type(exc).__name__, [m.text for m in batch])
                    if args.resume_file:
                        _wait_for(Path(args.resume_file))
                    continue
                if n % 3 == 2:
                    try:
                        outcome = handle.compress(force=True, mode=args.mode)
                        ledger.record("outcome", outcome.status.value, outcome.reason)
                    except TranscriptError as exc:
                        ledger.record("error", type(exc).__name__, str(exc))
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A separate process holding turns on a shared store, for the cross-process tests.

``python -m tests.actors.turn_worker hold URL SESSION TTL [HOLDER]``: open a turn (as
HOLDER, default "worker"; "-": the registry's default name with its process mark), append
"held-1", print "opened", then wait for a line on stdin; append "held-2", close
the turn, print "closed" and exit ("lost" when its lease lapsed meanwhile). ``python -m tests.actors.turn_worker turns URL
SESSION NAME COUNT``: print "ready", wait for "go", then drive COUNT turns of two
messages each (with an append_async outside a turn between them) and print "done".
Each message's meta names its process and turn, so the parent checks contiguity.
``python -m tests.actors.turn_worker tool URL SESSION TTL KEY``: open a turn (keyed
unless KEY is "-"), append a user ask and an assistant message calling a tool, print
"opened", wait for a line; then append the tool's result and the answer, close the
turn and print "closed" ("closed interrupted" when another caller asked it to end;
a kill -9 while it waits leaves a dead turn).
"""

from __future__ import annotations

import asyncio
import sys

from actors import CompactionPolicy, SessionRegistry
from persistence import open_store
from protocol import Message, TurnLostError


def _hold(url: str, session: str, ttl: float, holder: str | None = "worker") -> None:
    with open_store(url) as store:
        registry = SessionRegistry(store, policy=CompactionPolicy(lease_ttl_s=ttl), holder=holder)
        try:
            handle = registry.session(session)
            try:
                with handle.turn():
                    handle.append(Message("user", "held-1"))
                    print("opened", flush=True)
                    sys.stdin.readline()
                    handle.append(Message("assistant", "held-2"))
                print("closed", flush=True)
            except TurnLostError:  # frozen past its lease: the rest of the turn is refused
                print("lost", flush=True)
        finally:
            registry.close()


def _turns(url: str, session: str, name: str, count: int) -> None:
    with open_store(url) as store:
        registry = SessionRegistry(store, policy=CompactionPolicy(lease_ttl_s=5))
        try:
            handle = registry.session(session)
            print("ready", flush=True)
            sys.stdin.readline()
            for n in range(count):
                turn = f"{name}-{n}"
                with handle.turn():
                    handle.append(Message("user", f"{turn} ask", meta={"turn": turn}))
                    handle.append(Message("assistant", f"{turn} answer", meta={"turn": turn}))
                asyncio.run(handle.append_async(Message("user", f"{name} review {n}", meta={"turn": ""})))
            print("done", flush=True)
        finally:
            registry.close()


def _tool(url: str, session: str, ttl: float, key: str) -> None:
    call = {"id": "call-w", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    with open_store(url) as store:
        registry = SessionRegistry(store, policy=CompactionPolicy(lease_ttl_s=ttl), holder="worker")
        try:
            handle = registry.session(session)
            turn = handle.turn(key=None if key == "-" else key)
            with turn:
                handle.append(Message("user", "worker ask"))
                handle.append(Message("assistant", None, tool_calls=[call]))
                print("opened", flush=True)
                sys.stdin.readline()
                handle.append(Message("tool", "12 C", tool_call_id="call-w"))
                handle.append(Message("assistant", "worker answer"))
                interrupted = turn.interrupted
            print("closed interrupted" if interrupted else "closed", flush=True)
        finally:
            registry.close()


def main(argv: list[str]) -> None:
    mode, url, session, *rest = argv
    if mode == "hold":  # an optional HOLDER: "-" for the registry's default (its process mark)
        holder = rest[1] if len(rest) > 1 else "worker"
        _hold(url, session, float(rest[0]), None if holder == "-" else holder)
    elif mode == "tool":
        _tool(url, session, float(rest[0]), rest[1])
    else:
        _turns(url, session, rest[0], int(rest[1]))


if __name__ == "__main__":
    main(sys.argv[1:])

"""kill -9 and SIGSTOP a process holding a turn on a session this process also drives
turns on: this process goes on within the turn lease's TTL, no turn is split, and
every acknowledgement of both (the worker's fsync'd ledger, ours) is in the store.

The worker drives turns of two appends (``--turns``); once its ledger holds a few
acknowledgements the trial faults it, at whatever point of a turn it happens to be,
then times this process's next turn. A worker is frozen inside a turn, right
after its first append (outside any write: a frozen SQLite writer would hold the file
lock), and thawed after our turn: the rest of its turn is refused (`TurnLostError`,
not acknowledged) and it carries on.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from actors import CompactionPolicy, SessionRegistry
from actors.simulate._check import Ack
from persistence import open_store
from protocol import Message

from .harness import TTL_S, Tally, finish, integrity_problems, ledger_acks, spawn_worker, trials, wait_until

#: How long after the fault this process's turn may take: the lease lapses within
#: TTL_S (the worker renews every third of it), the held call is retried every 0.1 s.
GRACE_S = TTL_S + 3.0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_turn_holder_faults(store_url: str, tmp_path, fault: str, tally: Tally) -> None:
    failures_before = len(tally.failures)
    for trial in range(trials()):
        tally.record(_one_trial(store_url, tmp_path / f"trial-{trial}", fault))
    assert tally.failures[failures_before:] == []


def _one_trial(db: str, workdir, fault: str) -> list[str]:
    workdir.mkdir()
    root = f"th-{uuid.uuid4().hex[:8]}"
    ledger = workdir / "ledger"
    store = open_store(db)
    store.create_session(root, source="faults")
    marker, go = workdir / "in-turn", workdir / "go"
    extra = ["--turn-file", str(marker), "--go-file", str(go)] if fault == "stop" else []
    proc = spawn_worker(db, root, ledger, args=["--turns", "--rounds", "400", *extra])
    problems: list[str] = []
    acks: list[Ack] = []
    try:
        policy = CompactionPolicy(lease_ttl_s=TTL_S, ask_timeout_s=30.0)
        with SessionRegistry(store, policy=policy, holder="fault-parent") as registry:
            handle = registry.session(root)
            # a kill anywhere (a killed process holds no lock); a freeze inside a turn
            # but outside a write (a frozen SQLite writer would hold the file's lock)
            ready = (lambda: len(ledger_acks([ledger])) >= 6) if fault == "kill" else marker.exists
            if not wait_until(ready, 60):
                proc.kill()
                return [f"the worker never got there: {finish(proc)}"]
            os.kill(proc.pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            started = time.monotonic()
            _turn(handle, root, "parent 0", acks)
            waited = time.monotonic() - started
            if waited > GRACE_S:
                problems.append(f"our turn waited {waited:.1f}s after the {fault}, over {GRACE_S}s")
            if fault == "stop":
                go.write_text("go", encoding="utf-8")
                os.kill(proc.pid, signal.SIGCONT)
            for n in range(1, 6):
                _turn(handle, root, f"parent {n}", acks)
        code, err = finish(proc)
        expected = -signal.SIGKILL if fault == "kill" else 0
        if code != expected:
            problems.append(f"the worker exited with {code}, not {expected}: {err[-500:]}")
        problems += integrity_problems(store, root, [*ledger_acks([ledger]), *acks])
    finally:
        if proc.poll() is None:
            proc.kill()
            finish(proc)
        store.close()
    return problems


def _turn(handle, root: str, name: str, acks: list[Ack]) -> None:
    with handle.turn():
        for role in ("user", "assistant"):
            stored = handle.append(Message(role, f"{role} {name}", meta={"turn": name}))
            acks.append(Ack(root, stored.id, stored.text))

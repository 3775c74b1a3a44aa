"""``session-actors serve --workers N``: N server processes behind one listening socket.

The supervisor binds the socket and starts N copies of the same command line, each
with ``--listen-fd`` naming the inherited socket: every worker accepts on it (the
kernel hands each connection to one of them) and runs its own store and registry on
the one database. Nothing is shared in memory: ownership between workers is the
store's, as between any processes (turn leases, fencing tokens, idempotency keys), and
a turn id names its durable lease, so a turn opened through one worker goes on
through any other. A worker that dies is started again; SIGTERM or SIGINT is passed
on to every worker, which drains as a single server does.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["run_workers"]

logger = logging.getLogger("session_actors.serve")

#: How often the supervisor looks for a worker that died.
_WATCH_S = 0.2
_STOPS = (signal.SIGTERM, signal.SIGINT)


def run_workers(argv: Sequence[str], sock: Any, workers: int, drain_s: float, announce: TextIO | None = None) -> int:
    """Supervise ``workers`` copies of ``serve`` (the command line ``argv``) on the bound
    ``sock`` until SIGTERM or SIGINT; 0 when every worker stopped cleanly."""
    fd = sock.fileno()
    os.set_inheritable(fd, True)
    command = [sys.executable, "-m", "actors.cli", *argv, "--workers", "1", "--listen-fd", str(fd)]
    # a flag, not an Event: a handler that takes a lock can deadlock the main thread it interrupts
    stopping: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, _: stopping.append(signum)) for signum in _STOPS}
    children = [_start(command, fd) for _ in range(workers)]
    try:
        host, port = sock.getsockname()[:2]
        out = announce or sys.stdout
        out.write(f"session-actors serve: listening on http://{host}:{port} (console: /console; {workers} workers)\n")
        out.flush()
        while not stopping:
            time.sleep(_WATCH_S)
            for n, child in enumerate(children):
                if child.poll() is not None:
                    logger.warning(
                        "worker %d (pid %d) exited with %s: starting it again", n, child.pid, child.returncode
                    )
                    children[n] = _start(command, fd)
        return _stopped(children, drain_s)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _start(command: list[str], fd: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, pass_fds=(fd,), stdout=subprocess.DEVNULL)


def _stopped(children: list[subprocess.Popen[bytes]], drain_s: float) -> int:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    codes = []
    for child in children:
        try:
            codes.append(child.wait(drain_s + 30))
        except subprocess.TimeoutExpired:
            child.kill()
            codes.append(child.wait())
    # -SIGTERM: a worker still starting (no handler yet, so nothing accepted, nothing to drain)
    return 0 if all(code in (0, -signal.SIGTERM) for code in codes) else 1

"""Shared plumbing for the CLI tests: run the CLI in-process or as a subprocess (piped, or
on a pseudo-terminal), build databases."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import sqlite3
import struct
import subprocess
import sys
import termios
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from actors.cli import main
from persistence import open_store
from protocol import Message

COMMANDS = (
    "sessions",
    "show",
    "lineage",
    "locks",
    "fsck",
    "migrate",
    "compact",
    "export",
    "delete",
    "prune",
    "simulate",
)


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


def run_cli(capsys, *argv: str) -> Run:
    """Call ``actors.cli.main`` and capture what it printed."""
    capsys.readouterr()  # drop anything printed before
    code = main(list(argv))
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def build_lineage_db(url: str) -> dict[str, str]:
    """A small clean database: one rotated lineage, one in-place session, one idle one.

    Returns the ids: ``root`` (ended by compression), ``child`` (its live
    continuation), ``inplace`` (compacted in place) and ``idle`` (no messages).
    """
    store = open_store(url)
    try:
        store.create_session("chat:root", source="discord")
        store.append(
            "chat:root",
            [
                Message("system", "be brief"),
                Message("user", "hello"),
                Message("assistant", "hi"),
                Message("user", "[tag] brackets"),
            ],
        )
        lease = store.acquire_lease("chat:root", "cli-test", 60)
        record = store.commit_compaction(
            lease,
            watermark=3,
            mode="rotate",
            compressor="test",
            compacted=[Message("system", "be brief"), Message("user", "summary of hello")],
        )
        store.release_lease(lease)
        store.append(record.child_session_id, Message("assistant", "after rotation"))

        store.create_session("chat:inplace", source="web")
        store.append("chat:inplace", [Message("user", f"m{i}") for i in range(4)])
        lease = store.acquire_lease("chat:inplace", "cli-test", 60)
        store.commit_compaction(lease, watermark=4, mode="in_place", compacted=[Message("user", "short")])
        store.release_lease(lease)

        store.create_session("chat:idle")
        return {"root": "chat:root", "child": record.child_session_id, "inplace": "chat:inplace", "idle": "chat:idle"}
    finally:
        store.close()


def sql(path: str, statement: str, *params) -> None:
    """Run one write statement directly on a SQLite file (crafted corruption only)."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(statement, params)


# -- the CLI as a user runs it: a subprocess, piped or on a terminal -------------------

REPO = Path(__file__).resolve().parents[2]
#: Variables that change how the CLI prints; a test sets the ones it wants.
_DISPLAY_ENV = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM", "CLICOLOR_FORCE")


def cli_env(**overrides: str | None) -> dict[str, str]:
    """The environment of a CLI subprocess: this checkout first on the path, display
    variables cleared, then ``overrides`` (None removes a variable)."""
    env = {k: v for k, v in os.environ.items() if k not in _DISPLAY_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("TERM", "xterm-256color")
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def cli_argv(*argv: str) -> list[str]:
    return [sys.executable, "-m", "actors.cli", *argv]


def run_piped(*argv: str, timeout: float = 60, **env: str | None) -> Run:
    """Run the CLI with stdout and stderr piped (as in a script or CI)."""
    proc = subprocess.run(
        cli_argv(*argv),
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def run_on_terminal(*argv: str, columns: int = 100, timeout: float = 60, **env: str | None) -> Run:
    """Run the CLI on a pseudo-terminal ``columns`` wide (stdout and stderr both on it)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    try:
        proc = subprocess.Popen(
            cli_argv(*argv),
            env=cli_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
            cwd=REPO,
            close_fds=True,
        )
    finally:
        os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"{argv} printed nothing for {timeout}s")
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal closed with the process
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = b"".join(chunks).decode("utf-8", errors="replace").replace("\r\n", "\n")
    return Run(code, text, "")

"""Shared plumbing for the CLI tests: run the CLI in-process, build databases."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass

from actors.cli import main
from persistence import open_store
from protocol import Message

COMMANDS = ("sessions", "show", "lineage", "locks", "fsck", "compact", "simulate")


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
        store.append("chat:root", [Message("system", "be brief"), Message("user", "hello"),
                                   Message("assistant", "hi"), Message("user", "[tag] brackets")])
        lease = store.acquire_lease("chat:root", "cli-test", 60)
        record = store.commit_compaction(
            lease, watermark=3, mode="rotate", compressor="test",
            compacted=[Message("system", "be brief"), Message("user", "summary of hello")],
        )
        store.release_lease(lease)
        store.append(record.child_session_id, Message("assistant", "after rotation"))

        store.create_session("chat:inplace", source="web")
        store.append("chat:inplace", [Message("user", f"m{i}") for i in range(4)])
        lease = store.acquire_lease("chat:inplace", "cli-test", 60)
        store.commit_compaction(lease, watermark=4, mode="in_place",
                                compacted=[Message("user", "short")])
        store.release_lease(lease)

        store.create_session("chat:idle")
        return {"root": "chat:root", "child": record.child_session_id,
                "inplace": "chat:inplace", "idle": "chat:idle"}
    finally:
        store.close()


def sql(path: str, statement: str, *params) -> None:
    """Run one write statement directly on a SQLite file (crafted corruption only)."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(statement, params)

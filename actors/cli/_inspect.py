"""Read-only CLI commands: ``sessions``, ``show``, ``locks``, ``fsck`` (``lineage`` has its own module)."""

from __future__ import annotations

import argparse
import logging
import shlex
import sqlite3
from collections.abc import Callable
from typing import Any

from persistence import Store
from persistence.internal import check_store, display_url
from protocol import (
    InvalidArgumentError,
    LineageForkedError,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    TranscriptError,
    validate_session_id,
)

from ._database import open_existing
from ._output import (
    Column,
    Output,
    fmt_time,
    lease_dict,
    message_dict,
    session_dict,
    shorten,
    to_jsonable,
)
from ._recall import cmd_show_compaction

__all__ = ["cmd_fsck", "cmd_locks", "cmd_sessions", "cmd_show", "existing_session", "live_tip", "state_text"]

log = logging.getLogger("session_actors.cli.inspect")

PROG = "session-actors"
SESSION_FIELDS = (
    "id",
    "source",
    "live",
    "end_reason",
    "epoch",
    "live_messages",
    "parent_session_id",
    "created_at",
    "ended_at",
)
MESSAGE_FIELDS = (
    "session_id",
    "seq",
    "id",
    "state",
    "role",
    "created_at",
    "origin_id",
    "name",
    "tool_call_id",
    "key",
    "content",
    "tool_calls",
)
LEASE_FIELDS = ("session_id", "holder", "token", "acquired_at", "expires_at", "live")
FINDING_FIELDS = ("severity", "kind", "session_id", "detail")
#: Characters of a message shown in a table (the whole message: --format json).
PREVIEW = 120


def existing_session(store: Store, session_id: str) -> SessionInfo:
    info = store.get_session(validate_session_id(session_id))
    if info is None:
        raise SessionNotFoundError(session_id)
    return info


def state_text(info: SessionInfo) -> str:
    return "live" if info.live else f"ended ({info.end_reason})"


def live_tip(store: Store, session_id: str) -> tuple[str | None, bool]:
    """The live tip of ``session_id``'s lineage and whether the lineage is forked."""
    try:
        return store.resolve(session_id), False
    except LineageForkedError:
        return None, True


# -- sessions ---------------------------------------------------------------------


def cmd_sessions(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise InvalidArgumentError(f"--limit must be >= 0, got {args.limit}")
    with open_existing(args, readonly=True) as store:
        # one row past the page says whether another page exists
        infos = store.sessions(
            live=args.live,
            source=args.source,
            metadata=dict(args.meta) if args.meta else None,
            after=args.after,
            limit=args.limit + 1 if args.limit else None,
        )
        more = bool(args.limit) and len(infos) > args.limit
        infos = infos[: args.limit] if args.limit else infos
        counts = {info.id: len(store.transcript(info.id)) for info in infos}
    rows = [session_dict(i) | {"live_messages": counts[i.id]} for i in infos]
    next_after = infos[-1].id if more else None
    out = Output(args)
    if out.structured:
        out.emit({"sessions": rows, "more": more, "next_after": next_after}, rows, SESSION_FIELDS)
    else:
        out.table(
            f"{len(infos)} session(s), newest first",
            ["id", "source", "state", "epoch", Column("messages", "right"), "parent", "created"],
            [
                (i.id, i.source, state_text(i), i.epoch, counts[i.id], i.parent_session_id, fmt_time(i.created_at))
                for i in infos
            ],
        )
    if more:
        out.note(_next_page_hint(args, next_after))
    return 0


def _next_page_hint(args: argparse.Namespace, last_id: str | None) -> str:
    """How to get the next page: the same command line with ``--after`` the last id shown."""
    if not hasattr(args, "after"):  # no keyset paging in this store version
        return "more sessions exist: raise --limit (0 shows all)"
    argv = _masked(_without_option(list(getattr(args, "argv", None) or ["sessions"]), "--after"))
    return f"more sessions exist; next page: {shlex.join([PROG, *argv, '--after', str(last_id)])}"


def _without_option(argv: list[str], option: str) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            kept.append(arg)
    return kept


def _masked(argv: list[str]) -> list[str]:
    """The command line with every ``--db`` password masked (it is printed)."""
    shown = list(argv)
    for i, arg in enumerate(shown):
        if arg.startswith("--db="):
            shown[i] = "--db=" + display_url(arg[len("--db=") :])
        elif arg == "--db" and i + 1 < len(shown):
            shown[i + 1] = display_url(shown[i + 1])
    return shown


# -- show -------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    if (args.session_id is None) == (getattr(args, "compaction", None) is None):
        raise InvalidArgumentError("show takes a session ID or --compaction CID (one of them)")
    if args.session_id is None:
        return cmd_show_compaction(args)
    tail = getattr(args, "tail", None)
    if tail is not None and tail < 1:
        raise InvalidArgumentError(f"--tail must be >= 1, got {tail}")
    with open_existing(args, readonly=True) as store:
        info = existing_session(store, args.session_id)
        transcript = store.transcript(info.id)
        archive = store.archive(info.id) if args.archive else []
        records = store.compactions(info.id) if args.archive else []
        tip, forked = live_tip(store, info.id)
    total = len(transcript)
    shown = transcript[-tail:] if tail else transcript
    out = Output(args)
    if out.structured:
        document: dict[str, Any] = {
            "session": session_dict(info),
            "live_tip": tip,
            "forked": forked,
            "live_messages": total,
            "transcript": [message_dict(m) for m in shown],
        }
        if args.archive:
            document["archive"] = [message_dict(m) for m in archive]
            document["compactions"] = to_jsonable(records)
        rows = [message_dict(m) for m in [*archive, *shown]]
        out.emit(document, rows, MESSAGE_FIELDS)
        return 0
    out.line(f"session {info.id}  source={info.source}  {state_text(info)}  epoch={info.epoch}")
    if info.parent_session_id:
        out.line(f"continues {info.parent_session_id}")
    if forked:
        out.line("lineage is FORKED (run `session-actors fsck`)", style="bold red")
    elif tip != info.id:
        out.line(f"live continuation: {tip}")
    if args.archive:
        _message_table(out, f"archive: {len(archive)} message(s)", archive)
        _records_table(out, records)
    title = f"transcript: {total} message(s)"
    if len(shown) < total:
        title = f"transcript: last {len(shown)} of {total} message(s)"
    elif not total and tip is not None and tip != info.id:  # rotated: its live rows moved on
        title += f"; the conversation is live in {tip} (`{PROG} show {tip}`)"
    _message_table(out, title, shown)
    return 0


def _message_table(out: Output, title: str, messages: list[StoredMessage]) -> None:
    out.table(
        title,
        [Column("seq", "right"), Column("id", "right"), "state", "role", "created", "key", "content"],
        [
            (m.seq, m.id, m.state, m.role, fmt_time(m.created_at), m.key or "", shorten(m.text, PREVIEW))
            for m in messages
        ],
    )


def _records_table(out: Output, records: list) -> None:
    out.table(
        f"compactions: {len(records)}",
        [
            Column("id", "right"),
            "mode",
            Column("token", "right"),
            "holder",
            Column("watermark", "right"),
            Column("archived", "right"),
            Column("tail", "right"),
            "child",
            "compressor",
            "committed",
        ],
        [
            (
                r.id,
                r.mode,
                r.token,
                r.holder,
                r.watermark,
                r.archived_count,
                r.tail_count,
                r.child_session_id,
                r.compressor,
                fmt_time(r.committed_at),
            )
            for r in records
        ],
    )


# -- locks ------------------------------------------------------------------------


def cmd_locks(args: argparse.Namespace) -> int:
    reap = bool(getattr(args, "reap", False))
    with open_existing(args, readonly=not reap) as store:
        reaped = store.reap_leases() if reap else None
        leases, turns, now = store.leases(), store.turns(), store.now()
    rows = [lease_dict(lease, now) for lease in leases]
    out = Output(args)
    if reaped is not None:
        out.note(f"released {reaped} expired lease(s) (tokens kept)")
    if out.structured:
        document: dict[str, Any] = {"now": now, "leases": rows, "turns": [to_jsonable(t) for t in turns]}
        if reaped is not None:
            document["reaped"] = reaped
        out.emit(document, rows, LEASE_FIELDS)
        return 0
    out.table(
        f"{len(leases)} lease(s) held",
        ["session", "holder", Column("token", "right"), "acquired", "expires", "state"],
        [
            (
                lease.session_id,
                lease.holder,
                lease.token,
                fmt_time(lease.acquired_at),
                fmt_time(lease.expires_at),
                "live" if lease.expires_at > now else "expired (garbage: --reap releases it)",
            )
            for lease in leases
        ],
    )
    out.table(
        f"{len(turns)} turn(s) open",
        ["session", "holder", Column("token", "right"), "expires", "interrupted"],
        [(t.session_id, t.holder, t.token, fmt_time(t.expires_at), "yes" if t.interrupted else "") for t in turns],
    )
    return 0


# -- fsck -------------------------------------------------------------------------

#: What SQLite says of a damaged file (its messages carry no stored text); "file is not
#: a database" is not among them: that is the wrong file given, a usage error.
_CORRUPT = ("malformed", "database disk image", "corrupt")


def _lineages_scope(store: Store, ids: list[str] | None) -> Callable[[str], bool] | None:
    """``fsck --session``: only the sessions of the lineages holding ``ids``."""
    if not ids:
        return None
    from ._lifecycle import lineage_of  # the lineage walk export uses too

    wanted = {info.id for sid in ids for info in lineage_of(store, validate_session_id(sid))}
    return wanted.__contains__


def _corrupt(exc: BaseException) -> bool:
    text = " ".join(str(e) for e in (exc, exc.__cause__) if e is not None).lower()
    return any(marker in text for marker in _CORRUPT)


def _sqlite_reason(exc: BaseException) -> str:
    cause = exc.__cause__
    return str(cause) if isinstance(cause, sqlite3.Error) else "malformed database"


def cmd_fsck(args: argparse.Namespace) -> int:
    try:
        with open_existing(args, readonly=True) as store:
            report = check_store(store, scope=_lineages_scope(store, getattr(args, "sessions", None)))
            now = store.now()
    except TranscriptError as exc:
        if not _corrupt(exc):
            raise
        # damage found, not a usage error: exit 1 like any other problem, content unshown
        out = Output(args)
        detail = f"the database file cannot be read: {_sqlite_reason(exc)}"
        if out.structured:
            problem = {"kind": "corrupt", "session_id": "", "detail": detail}
            out.emit({"ok": False, "problems": [problem]}, [{"severity": "problem"} | problem], FINDING_FIELDS)
        else:
            out.line(f"problem: corrupt: {detail}")
        return 1
    code = 0 if report.ok else 1
    out = Output(args)
    if out.structured:
        findings = (
            [{"severity": "problem"} | to_jsonable(p) for p in report.problems]
            + [{"severity": "warning"} | to_jsonable(w) for w in report.warnings]
            + [
                {
                    "severity": "info",
                    "kind": "live_lease",
                    "session_id": lease.session_id,
                    "detail": f"held by {lease.holder} token {lease.token} until {fmt_time(lease.expires_at)}",
                }
                for lease in report.live_leases
            ]
        )
        out.emit(
            {
                "ok": report.ok,
                "sessions_checked": report.sessions_checked,
                "messages_checked": report.messages_checked,
                "counts": report.counts(),
                "problems": to_jsonable(report.problems),
                "warnings": to_jsonable(report.warnings),
                "live_leases": [lease_dict(lease, now) for lease in report.live_leases],
            },
            findings,
            FINDING_FIELDS,
        )
        return code
    out.line(f"checked {report.sessions_checked} session(s), {report.messages_checked} message(s)")
    for lease in report.live_leases:
        out.line(
            f"live lease (not a problem): {lease.session_id} held by {lease.holder} "
            f"token {lease.token} until {fmt_time(lease.expires_at)}"
        )
    for warning in report.warnings:  # listed like live leases: not damage, not counted
        out.line(f"warning (not a problem): {warning.kind}: {warning.session_id}: {warning.detail}", style="yellow")
    if report.ok:
        out.line("ok: no problems found", style="green")
        return code
    out.table(
        f"{len(report.problems)} problem(s)",
        ["kind", "session", "detail"],
        [(p.kind, p.session_id, p.detail) for p in report.problems],
    )
    return code

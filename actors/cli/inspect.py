"""Read-only CLI commands: ``sessions``, ``show``, ``lineage``, ``locks``, ``fsck``."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from rich.table import Table
from rich.tree import Tree

from persistence import Store
from persistence.integrity import check_store
from protocol import InvalidArgumentError, LineageForkedError, SessionInfo, SessionNotFoundError, validate_session_id

from .database import open_existing
from .output import (
    console,
    emit_json,
    fmt_time,
    lease_dict,
    message_dict,
    session_dict,
    shorten,
    to_jsonable,
)

__all__ = ["cmd_fsck", "cmd_lineage", "cmd_locks", "cmd_sessions", "cmd_show"]

log = logging.getLogger("session_actors.cli_inspect")


def _wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def _existing_session(store: Store, session_id: str) -> SessionInfo:
    info = store.get_session(validate_session_id(session_id))
    if info is None:
        raise SessionNotFoundError(session_id)
    return info


def _state(info: SessionInfo) -> str:
    return "live" if info.live else f"ended ({info.end_reason})"


# -- sessions ---------------------------------------------------------------------


def cmd_sessions(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise InvalidArgumentError(f"--limit must be >= 0, got {args.limit}")
    with open_existing(args) as store:
        infos = store.sessions(live=args.live, limit=args.limit or None)
        counts = {info.id: len(store.transcript(info.id)) for info in infos}
    if _wants_json(args):
        emit_json({"sessions": [session_dict(i) | {"live_messages": counts[i.id]} for i in infos]})
        return 0
    table = Table(title=f"{len(infos)} session(s)")
    for column in ("id", "source", "state", "epoch", "messages", "parent", "created"):
        table.add_column(column)
    for info in infos:
        table.add_row(info.id, info.source, _state(info), str(info.epoch), str(counts[info.id]),
                      info.parent_session_id or "", fmt_time(info.created_at))
    console().print(table)
    return 0


# -- show -------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    with open_existing(args) as store:
        info = _existing_session(store, args.session_id)
        transcript = store.transcript(info.id)
        archive = store.archive(info.id) if args.archive else []
        records = store.compactions(info.id) if args.archive else []
        tip, forked = _live_tip(store, info.id)
    if _wants_json(args):
        document: dict[str, Any] = {
            "session": session_dict(info),
            "live_tip": tip,
            "forked": forked,
            "transcript": [message_dict(m) for m in transcript],
        }
        if args.archive:
            document["archive"] = [message_dict(m) for m in archive]
            document["compactions"] = to_jsonable(records)
        emit_json(document)
        return 0
    out = console()
    out.print(f"session {info.id}  source={info.source}  {_state(info)}  epoch={info.epoch}")
    if info.parent_session_id:
        out.print(f"continues {info.parent_session_id}")
    if forked:
        out.print("lineage is FORKED (run `session-actors fsck`)")
    elif tip != info.id:
        out.print(f"live continuation: {tip}")
    out.print(_message_table("transcript", transcript))
    if args.archive:
        out.print(_message_table("archive", archive))
        out.print(_records_table(records))
    return 0


def _live_tip(store: Store, session_id: str) -> tuple[str | None, bool]:
    try:
        return store.resolve(session_id), False
    except LineageForkedError:
        return None, True


def _message_table(title: str, messages: list) -> Table:
    table = Table(title=f"{title}: {len(messages)} message(s)")
    for column in ("seq", "id", "state", "role", "created", "content"):
        table.add_column(column, overflow="fold" if column == "content" else "ellipsis")
    for m in messages:
        table.add_row(str(m.seq), str(m.id), m.state, m.role, fmt_time(m.created_at), shorten(m.text))
    return table


def _records_table(records: list) -> Table:
    table = Table(title=f"compactions: {len(records)}")
    for column in ("id", "mode", "token", "holder", "watermark", "archived", "tail", "child",
                   "compressor", "committed"):
        table.add_column(column)
    for r in records:
        table.add_row(str(r.id), r.mode, str(r.token), r.holder, str(r.watermark),
                      str(r.archived_count), str(r.tail_count), r.child_session_id or "",
                      r.compressor, fmt_time(r.committed_at))
    return table


# -- lineage ----------------------------------------------------------------------


def cmd_lineage(args: argparse.Namespace) -> int:
    with open_existing(args) as store:
        info = _existing_session(store, args.session_id)
        root = _root_of(store, info)
        tip, forked = _live_tip(store, root.id)
        node = _lineage_node(store, root, set())
    if _wants_json(args):
        emit_json({"root": root.id, "live_tip": tip, "forked": forked, "tree": node})
        return 0
    tree = Tree(_node_label(node, args.session_id, tip))
    _grow(tree, node, args.session_id, tip)
    out = console()
    out.print(tree)
    if forked:
        out.print("lineage is FORKED: a compression-ended session has more than one child")
    return 0


def _root_of(store: Store, info: SessionInfo) -> SessionInfo:
    """Follow parents up; a cycle or a missing parent stops the walk (fsck reports it)."""
    seen = {info.id}
    while info.parent_session_id and info.parent_session_id not in seen:
        parent = store.get_session(info.parent_session_id)
        if parent is None:
            break
        seen.add(parent.id)
        info = parent
    return info


def _lineage_node(store: Store, info: SessionInfo, seen: set[str]) -> dict[str, Any]:
    seen.add(info.id)
    kids = [k for k in store.children(info.id) if k.id not in seen]
    return {
        "session": session_dict(info),
        "live_messages": len(store.transcript(info.id)),
        "children": [_lineage_node(store, k, seen) for k in kids],
    }


def _node_label(node: dict[str, Any], asked: str, tip: str | None) -> str:
    s = node["session"]
    state = "live" if s["live"] else f"ended ({s['end_reason']})"
    marks = []
    if s["id"] == tip:
        marks.append("live tip")
    if s["id"] == asked:
        marks.append("asked")
    if len(node["children"]) > 1:
        marks.append(f"FORK: {len(node['children'])} children")
    suffix = f"  [{', '.join(marks)}]" if marks else ""
    return f"{s['id']}  {state}  epoch={s['epoch']}  messages={node['live_messages']}{suffix}"


def _grow(tree: Tree, node: dict[str, Any], asked: str, tip: str | None) -> None:
    for child in node["children"]:
        _grow(tree.add(_node_label(child, asked, tip)), child, asked, tip)


# -- locks ------------------------------------------------------------------------


def cmd_locks(args: argparse.Namespace) -> int:
    with open_existing(args) as store:
        leases, now = store.leases(), store.now()
    if _wants_json(args):
        emit_json({"now": now, "leases": [lease_dict(lease, now) for lease in leases]})
        return 0
    table = Table(title=f"{len(leases)} lease(s) held")
    for column in ("session", "holder", "token", "acquired", "expires", "state"):
        table.add_column(column)
    for lease in leases:
        state = "live" if lease.expires_at > now else "expired, never released (leaked)"
        table.add_row(lease.session_id, lease.holder, str(lease.token),
                      fmt_time(lease.acquired_at), fmt_time(lease.expires_at), state)
    console().print(table)
    return 0


# -- fsck -------------------------------------------------------------------------


def cmd_fsck(args: argparse.Namespace) -> int:
    with open_existing(args) as store:
        report = check_store(store)
        now = store.now()
    if _wants_json(args):
        emit_json({
            "ok": report.ok,
            "sessions_checked": report.sessions_checked,
            "messages_checked": report.messages_checked,
            "counts": report.counts(),
            "problems": to_jsonable(report.problems),
            "warnings": to_jsonable(report.warnings),
            "live_leases": [lease_dict(lease, now) for lease in report.live_leases],
        })
        return 0 if report.ok else 1
    out = console()
    out.print(f"checked {report.sessions_checked} session(s), {report.messages_checked} message(s)")
    for lease in report.live_leases:
        out.print(f"live lease (not a problem): {lease.session_id} held by {lease.holder} "
                  f"token {lease.token} until {fmt_time(lease.expires_at)}")
    for warning in report.warnings:  # listed like live leases: not damage, not counted
        out.print(f"warning (not a problem): {warning.kind}: {warning.session_id}: {warning.detail}")
    if report.ok:
        out.print("ok: no problems found")
        return 0
    table = Table(title=f"{len(report.problems)} problem(s)")
    for column in ("kind", "session", "detail"):
        table.add_column(column, overflow="fold")
    for problem in report.problems:
        table.add_row(problem.kind, problem.session_id, problem.detail)
    out.print(table)
    return 1

"""Data lifecycle commands: ``export``, ``delete``, ``prune``, and the filters of ``sessions``.

``export`` writes JSON Lines (one OpenAI chat message per line, `Message.to_dict`) on
stdout whatever ``--format`` says: it is meant for piping into other tools. ``delete``
is the one command that deletes data (`Store.delete_session`): without ``--yes`` it
only says what it would erase, and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from persistence import Store
from protocol import InvalidArgumentError, SessionInfo, StoredMessage
from protocol._jsonable import json_scalar

from ._database import open_existing
from ._inspect import existing_session
from ._output import Output, session_dict

__all__ = [
    "add_branch_options",
    "add_delete_options",
    "add_expire_options",
    "add_export_options",
    "add_prune_options",
    "add_sessions_filters",
    "cmd_branch",
    "cmd_delete",
    "cmd_expire",
    "cmd_export",
    "cmd_prune",
    "parse_duration",
    "parse_meta",
]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.ASCII)  # ASCII digits only


def parse_duration(text: str, option: str = "--older-than") -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (a bare number is seconds) -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise InvalidArgumentError(f"{option} must be a duration such as 30d, 12h, 90m or 45s, got {text!r}")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(seconds):
        raise InvalidArgumentError(f"{option} is out of range: {text!r}")
    return seconds


def parse_meta(pair: str) -> tuple[str, Any]:
    """A ``KEY=VALUE`` filter: VALUE is read as JSON when it is a JSON scalar (``42``,
    ``true``, ``null``, ``"42"``), else taken as the string written (``tier=gold``)."""
    key, sep, raw = pair.partition("=")
    if not sep or not key:
        raise InvalidArgumentError(f"--meta takes KEY=VALUE, got {pair!r}")
    return key, json_scalar(raw)


# -- options ----------------------------------------------------------------------


def _add_source_and_meta(parser: argparse.ArgumentParser, what: str, whose: str) -> None:
    parser.add_argument("--source", metavar="S", default=None, help=f"only {what} from this source")
    parser.add_argument(
        "--meta",
        metavar="KEY=VALUE",
        action="append",
        default=None,
        type=_argument(parse_meta),
        help=f"only {what} whose {whose} has KEY equal to VALUE (repeatable; "
        'VALUE is JSON when it parses as a scalar: 42, true, null, "42"; '
        "else a string)",
    )


def add_sessions_filters(parser: argparse.ArgumentParser) -> None:
    _add_source_and_meta(parser, "sessions", "metadata")
    parser.add_argument(
        "--after", metavar="ID", default=None, help="the page after this session id (the last one shown; keyset paging)"
    )


def add_export_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "session_id", metavar="ID", nargs="?", help="any id of the conversation (resolved to its live tip)"
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every conversation instead of one ID: each live session's transcript (with --archive, every "
        "row of every session), each line tagged with session_id, seq and state",
    )
    parser.add_argument(
        "--archive",
        action="store_true",
        help="also the live tip's non-live rows (compacted, superseded, retracted, pruned), in seq order",
    )
    parser.add_argument(
        "--lineage", action="store_true", help="every row of every session of the lineage, oldest session first"
    )


def add_delete_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_id", metavar="ID", help="any id of the lineage to erase")
    parser.add_argument(
        "--yes", action="store_true", help="really erase (without it: say what would be erased and exit 2)"
    )


def add_prune_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        metavar="DURATION",
        required=True,
        help="archived rows that left the live transcript at least this long ago: 30d, 12h, 90m, 45s (0: all)",
    )
    parser.add_argument(
        "--session", metavar="ID", default=None, help="only this session's lineage (default: every session)"
    )


def add_expire_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--idle",
        metavar="DURATION",
        required=True,
        help="erase lineages with no new session or message for this long: 90d, 12h, 45s (0: every idle one)",
    )
    parser.add_argument("--dry-run", action="store_true", help="only list what would be erased")
    _add_source_and_meta(parser, "lineages", "live session's metadata")


def add_branch_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_id", metavar="ID", help="the session whose live transcript the branch starts from")
    parser.add_argument("--at", dest="at_seq", metavar="SEQ", type=int, required=True, help="the last seq copied")
    parser.add_argument("--new", dest="new_id", metavar="NEW_ID", required=True, help="the branch's id")


def _argument(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type``: our typed error becomes a usage error (one line, exit 2)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except InvalidArgumentError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    convert.__name__ = parse.__name__
    return convert


# -- export -----------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    if args.all == (args.session_id is not None):
        raise InvalidArgumentError("export takes one ID or --all")
    if args.all:
        return _export_all(args)
    with open_existing(args, readonly=True) as store:
        existing_session(store, args.session_id)
        if args.lineage:
            rows = [m for info in lineage_of(store, args.session_id) for m in _all_rows(store, info.id)]
        else:
            tip = store.resolve(args.session_id)
            rows = _all_rows(store, tip) if args.archive else store.transcript(tip)
    tagged = args.archive or args.lineage
    for message in rows:
        sys.stdout.write(json.dumps(_export_line(message, tagged), ensure_ascii=False) + "\n")
    return 0


def _export_all(args: argparse.Namespace) -> int:
    """Every conversation in one pass (one process, one store): live sessions' transcripts,
    or with ``--archive`` every row of every session, oldest session first."""
    if args.lineage:
        raise InvalidArgumentError("--all already covers every lineage: drop --lineage")
    with open_existing(args, readonly=True) as store:
        infos = list(reversed(store.sessions(live=None if args.archive else True)))
        for info in infos:
            rows = _all_rows(store, info.id) if args.archive else store.transcript(info.id)
            for message in rows:
                sys.stdout.write(json.dumps(_export_line(message, True), ensure_ascii=False) + "\n")
    return 0


def _export_line(message: StoredMessage, tagged: bool) -> dict[str, Any]:
    line = message.to_dict()
    if tagged:
        line.update(session_id=message.session_id, seq=message.seq, state=message.state)
    return line


def _all_rows(store: Store, session_id: str) -> list[StoredMessage]:
    return sorted(store.transcript(session_id) + store.archive(session_id), key=lambda m: m.seq)


def lineage_of(store: Store, session_id: str) -> list[SessionInfo]:
    """Every session of the lineage holding ``session_id``, oldest first."""
    root = existing_session(store, session_id)
    seen = {root.id}
    while root.parent_session_id is not None and root.parent_session_id not in seen:
        parent = store.get_session(root.parent_session_id)
        if parent is None:  # a missing parent (fsck reports it): start here
            break
        root = parent
        seen.add(root.id)
    found, queue = {root.id: root}, [root.id]
    while queue:
        for child in store.children(queue.pop()):
            if child.id not in found:
                found[child.id] = child
                queue.append(child.id)
    return sorted(found.values(), key=lambda info: (info.created_at, info.id))


# -- delete -----------------------------------------------------------------------


def cmd_delete(args: argparse.Namespace) -> int:
    with open_existing(args, readonly=not args.yes) as store:
        sessions = lineage_of(store, args.session_id)
        if not args.yes:
            messages = sum(len(_all_rows(store, info.id)) for info in sessions)
            ids = ", ".join(info.id for info in sessions)
            raise InvalidArgumentError(
                f"would erase {len(sessions)} session(s) ({ids}) and {messages} message(s) in every "
                f"state, with their compaction records, leases, cooldowns and metadata; "
                f"add --yes to erase"
            )
        erased = store.delete_session(args.session_id)
    out = Output(args)
    document = {"deleted": args.session_id, "sessions": [i.id for i in sessions], "messages": erased}
    if out.structured:
        out.emit(document, [document | {"sessions": len(sessions)}], ["deleted", "sessions", "messages"])
    else:
        out.line(f"erased the lineage of {args.session_id}: {len(sessions)} session(s), {erased} message(s)")
    return 0


# -- prune ------------------------------------------------------------------------


def cmd_prune(args: argparse.Namespace) -> int:
    older_than = parse_duration(args.older_than)  # before opening: a bad value writes nothing
    with open_existing(args) as store:
        if args.session is not None:
            existing_session(store, args.session)
        pruned = store.prune_archive(older_than_s=older_than, session_id=args.session)
    out = Output(args)
    document = {"pruned": pruned, "older_than_s": older_than, "session": args.session}
    if out.structured:
        out.emit(document, [document], list(document))
    else:
        scope = f" of the lineage of {args.session}" if args.session else ""
        out.line(
            f"pruned {pruned} archived message(s){scope} that left the live transcript "
            f"more than {args.older_than.strip()} ago"
        )
    return 0


def cmd_expire(args: argparse.Namespace) -> int:
    idle = parse_duration(args.idle, "--idle")  # before opening: a bad value erases nothing
    with open_existing(args, readonly=args.dry_run) as store:
        ids = store.expire(
            idle, source=args.source, metadata=dict(args.meta) if args.meta else None, dry_run=args.dry_run
        )
    out = Output(args)
    document = {"dry_run": args.dry_run, "idle_for_s": idle, "lineages": ids}
    if out.structured:
        out.emit(document, [{"session_id": i} for i in ids], ["session_id"])
        return 0
    verb = "would erase" if args.dry_run else "erased"
    out.line(f"{verb} {len(ids)} lineage(s) idle for at least {args.idle}")
    for sid in ids:
        out.line(f"  {sid}")
    return 0


def cmd_branch(args: argparse.Namespace) -> int:
    with open_existing(args) as store:
        info = store.branch(args.session_id, args.at_seq, args.new_id)
        copied = len(store.transcript(info.id))
    out = Output(args)
    if out.structured:
        document = session_dict(info) | {"live_messages": copied}
        out.emit(document, [document], list(document))
        return 0
    out.line(f"started {info.id}: a branch of {args.session_id} at seq {args.at_seq}, {copied} message(s) copied")
    return 0

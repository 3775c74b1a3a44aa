"""session-actors: inspect, check, compact and stress a session store.

Exit status: 0 ok (compact included, whatever outcome it prints); 1 when fsck or
simulate finds a problem; 2 for a user or configuration error (unknown id, missing
database, bad URL), printed as one line on stderr.
--db, --format and --json are accepted before or after the subcommand. Output is
flushed line by line; NO_COLOR turns colour off.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from persistence.internal import display_url
from protocol import TranscriptError
from protocol._checks import MAX_COUNT

from . import _compact as compact
from . import _database as database
from . import _inspect as inspect
from . import _lifecycle as lifecycle
from . import _lineage as lineage
from . import _recall as recall
from . import _serve as serve
from . import _simulate as simulate
from ._database import DEFAULT_DB, ENV_DB
from ._output import add_format_options, line_buffered

__all__ = ["EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE", "build_parser", "main"]

log = logging.getLogger("session_actors.cli")

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
PROG = "session-actors"


#: A URL with a scheme inside a message (argparse's), up to whitespace or a quote.
_URL_IN_TEXT = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"]+", re.I)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one stderr line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        # argparse quotes stray arguments: a database URL given without --db holds a password
        message = _URL_IN_TEXT.sub(lambda m: display_url(m.group(0)), message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _common_options() -> argparse.ArgumentParser:
    # SUPPRESS defaults: an option given before the subcommand is not overwritten
    # by the subparser's default, so it may appear on either side.
    common = _Parser(add_help=False)
    common.add_argument(
        "--db",
        metavar="URL",
        default=argparse.SUPPRESS,
        help=f"database path, sqlite:///path or postgresql://... (default: ${ENV_DB} or {DEFAULT_DB})",
    )
    add_format_options(common)
    return common


def _add_command(sub, common, name: str, handler, summary: str, example: str):
    parser = sub.add_parser(
        name,
        parents=[common],
        help=summary,
        description=summary,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=handler)
    return parser


def build_parser() -> argparse.ArgumentParser:
    common = _common_options()
    parser = _Parser(
        prog=PROG,
        parents=[common],
        description=__doc__,
        epilog="example:\n  session-actors simulate && session-actors fsck",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)

    p = _add_command(
        sub,
        common,
        "sessions",
        inspect.cmd_sessions,
        "list sessions, newest first",
        f"{PROG} sessions --live --limit 20",
    )
    state = p.add_mutually_exclusive_group()
    state.add_argument(
        "--live", dest="live", action="store_const", const=True, default=None, help="only sessions that have not ended"
    )
    state.add_argument("--ended", dest="live", action="store_const", const=False, help="only ended sessions")
    p.add_argument(
        "--limit", type=count_option(0, MAX_COUNT - 1), default=100, help="at most N sessions (0: all; default 100)"
    )
    lifecycle.add_sessions_filters(p)

    p = _add_command(
        sub,
        common,
        "show",
        inspect.cmd_show,
        "show a session's live transcript (and its archive)",
        f"{PROG} show discord:123 --archive",
    )
    p.add_argument("session_id", metavar="ID", nargs="?", help="the session to show (exactly this id)")
    p.add_argument(
        "--archive", action="store_true", help="also show compacted and superseded messages and compaction records"
    )
    p.add_argument(
        "--compaction",
        metavar="CID",
        type=count_option(1, MAX_COUNT),
        help="instead: what compaction CID did (the rows it replaced, its summary, the tail it carried)",
    )
    p.add_argument(
        "--tail",
        metavar="N",
        type=count_option(1, MAX_COUNT),
        default=None,
        help="only the last N live messages (N >= 1; default: all)",
    )

    p = _add_command(
        sub,
        common,
        "search",
        recall.cmd_search,
        "search message text, live and archived, best match first (every word must match)",
        f"{PROG} search 'ferry tangier' --session discord:123",
    )
    recall.add_search_options(p, count_option)

    p = _add_command(
        sub,
        common,
        "usage",
        recall.cmd_usage,
        "sum the token usage recorded on messages and compactions, per model",
        f"{PROG} usage discord:123",
    )
    recall.add_usage_options(p)

    p = _add_command(
        sub,
        common,
        "lineage",
        lineage.cmd_lineage,
        "show the continuations around a session: a straight chain as one short "
        "list (root ... live tip, with a count), a branching lineage as a tree",
        f"{PROG} lineage discord:123",
    )
    p.add_argument("session_id", metavar="ID", help="any session of the lineage")

    p = _add_command(
        sub,
        common,
        "locks",
        inspect.cmd_locks,
        "list compaction leases still held (live, or expired: garbage a crash left) and the turns open",
        f"{PROG} locks --reap",
    )
    p.add_argument(
        "--reap", action="store_true", help="release the expired leases first (tokens are kept; live leases untouched)"
    )

    p = _add_command(
        sub,
        common,
        "fsck",
        inspect.cmd_fsck,
        "check integrity: forks, orphan writes, seq gaps, lineage cycles, missing parents "
        "(exit 1 when any); warnings such as expired leases and stranded live rows are "
        "listed, not counted",
        f"{PROG} fsck --db postgresql://localhost/agents",
    )
    p.add_argument(
        "--session",
        dest="sessions",
        metavar="ID",
        action="append",
        help="check only the lineages holding these ids (repeat it; one process for any number)",
    )

    p = _add_command(
        sub,
        common,
        "export",
        lifecycle.cmd_export,
        "write a conversation as JSON Lines on stdout, one OpenAI chat message per line "
        "(the live transcript of ID's live tip; --archive/--lineage add rows and tag each "
        "line with session_id, seq and state)",
        f"{PROG} export discord:123 --lineage > discord-123.jsonl",
    )
    lifecycle.add_export_options(p)

    p = _add_command(
        sub,
        common,
        "delete",
        lifecycle.cmd_delete,
        "ERASE a conversation: every session of its lineage with all messages, compaction "
        "records, leases, cooldowns and metadata (without --yes: say what, exit 2)",
        f"{PROG} delete discord:123 --yes",
    )
    lifecycle.add_delete_options(p)

    p = _add_command(
        sub,
        common,
        "prune",
        lifecycle.cmd_prune,
        "archive retention: blank archived messages (compacted, superseded, retracted) "
        "that left the live transcript longer ago than DURATION; seqs and records stay",
        f"{PROG} prune --older-than 30d",
    )
    lifecycle.add_prune_options(p)

    p = _add_command(
        sub,
        common,
        "branch",
        lifecycle.cmd_branch,
        "start a new conversation from a session's live transcript up to seq SEQ (a branch: "
        "not a continuation, the session itself untouched)",
        f"{PROG} branch discord:123 --at 14 --new discord:123-retry",
    )
    lifecycle.add_branch_options(p)

    p = _add_command(
        sub,
        common,
        "expire",
        lifecycle.cmd_expire,
        "ERASE every lineage idle longer than DURATION (no new session or message; no live "
        "turn or lease), as delete does; --dry-run lists them",
        f"{PROG} expire --idle 90d --source discord --dry-run",
    )
    lifecycle.add_expire_options(p)

    _add_command(
        sub,
        common,
        "migrate",
        database.cmd_migrate,
        "apply pending schema migrations (other commands never change the schema)",
        f"{PROG} migrate --db postgresql://localhost/agents",
    )

    p = _add_command(
        sub,
        common,
        "compact",
        compact.cmd_compact,
        "compact one session now through a session actor (lease + fencing); "
        "exit 0 for every outcome printed (compacted, skipped, failed, lease_lost, ...)",
        f"{PROG} compact discord:123 --mode rotate --force",
    )
    compact.add_compact_options(p)

    p = _add_command(
        sub,
        common,
        "simulate",
        simulate.cmd_simulate,
        "run a gateway-shaped concurrent workload, then an integrity report "
        "(exit 1 on any violation); creates the database if missing",
        f"{PROG} simulate --sessions 16 --turns 20 --threads 6 --processes 2",
    )
    simulate.add_options(p)
    compact.add_compressor_options(p)

    p = _add_command(
        sub,
        common,
        "serve",
        serve.cmd_serve,
        "serve every session operation over HTTP/JSON, compaction events and a web console "
        "(/console); needs the serve extra; creates the database if missing",
        f"{PROG} serve --db postgresql://localhost/agents --tokens tokens.txt",
    )
    serve.add_serve_options(p)

    p = _add_command(
        sub,
        common,
        "token",
        serve.cmd_token_add,
        "token add: append a new bearer token to a token file and print it (its only showing, "
        "the last word of the output)",
        f"{PROG} token add discord-bot --scope read,write --source discord --tokens tokens.txt",
    )
    p.add_argument("action", choices=("add",), help="add: a new token")
    serve.add_token_options(p)
    return parser


def count_option(minimum: int, maximum: int):
    """An argparse type: an int in ``[minimum, maximum]``, else a usage error (exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be from {minimum} to {maximum}, got {text}")
        return value

    parse.__name__ = "count"  # argparse names the type in its messages
    return parse


def _fail(message: str) -> int:
    line = " ".join(str(message).split()) or "error"
    sys.stderr.write(f"{PROG}: error: {line}\n")
    return EXIT_USAGE


#: The exit status of a command whose reader closed the pipe (128 + SIGPIPE, as a shell reports it).
EXIT_SIGPIPE = 141


def _silence_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for the closed pipe would fail
    again when the interpreter flushes it at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing to silence
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (the console script passes it to exit)."""
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=f"{PROG}: %(levelname)s %(name)s: %(message)s")
    line_buffered(sys.stdout)
    line_buffered(sys.stderr)
    args.argv = arguments  # for hints that repeat the command line
    try:
        return handler(args)
    except TranscriptError as exc:
        return _fail(str(exc))
    except BrokenPipeError:  # piped into head, say: the reader left; stop quietly, as a SIGPIPE would
        _silence_stdout()
        return EXIT_SIGPIPE
    except OSError as exc:  # unreadable path, permission denied, ...
        return _fail(f"{exc.strerror or exc}: {exc.filename or ''}".strip(": "))
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130

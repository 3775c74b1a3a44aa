"""``session-actors serve`` and ``session-actors token add``: the HTTP service and the
bearer tokens it checks (the ``serve`` extra, imported only by these commands)."""

from __future__ import annotations

import argparse
import sys

from protocol import InvalidArgumentError

from ..compaction._policy import CompactionPolicy
from ._compact import add_compressor_options, make_compressor
from ._database import resolve_db

__all__ = ["add_serve_options", "add_token_options", "cmd_serve", "cmd_token_add", "serve_policy"]

#: serve's own defaults: a crashed server's turns free their sessions within 15 s, and a
#: client that never closes its turn holds the others for 2 minutes at most.
DEFAULT_LEASE_TTL_S = 15.0
DEFAULT_MAX_TURN_S = 120.0


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8787, help="the port (default 8787; 0: any free port)")
    parser.add_argument("--tokens", metavar="FILE", default=None, help="the token file (session-actors token add)")
    parser.add_argument(
        "--insecure-local",
        action="store_true",
        help="serve without tokens, every request an admin: only on a loopback address",
    )
    parser.add_argument("--max-body", type=int, default=1 << 20, help="largest request body in bytes (default 1 MiB)")
    parser.add_argument(
        "--max-concurrency", type=int, default=1000, help="requests in flight at once; more get 503 (default 1000)"
    )
    parser.add_argument(
        "--header-timeout", type=float, default=10.0, help="seconds a connection may take to send headers (default 10)"
    )
    parser.add_argument(
        "--drain", type=float, default=10.0, help="seconds a shutdown lets open turns and calls finish (default 10)"
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        help="seconds a request body's next chunk may take (default 30; 408 then)",
    )
    parser.add_argument(
        "--events-heartbeat-s",
        metavar="S",
        type=float,
        default=15.0,
        help="seconds between the comment lines an idle /v1/events stream gets (default 15)",
    )
    parser.add_argument(
        "--lease-ttl-s",
        metavar="S",
        type=float,
        default=DEFAULT_LEASE_TTL_S,
        help=f"lifetime of turn and compaction leases, renewed every third of it; a crashed server's turn "
        f"holds the others this long (default {DEFAULT_LEASE_TTL_S:g})",
    )
    parser.add_argument(
        "--max-turn-s",
        metavar="S",
        type=float,
        default=DEFAULT_MAX_TURN_S,
        help=f"a turn open longer is closed by the server (default {DEFAULT_MAX_TURN_S:g})",
    )
    parser.add_argument(
        "--ask-timeout-s",
        metavar="S",
        type=float,
        default=CompactionPolicy().ask_timeout_s,
        help=f"the longest a call waits on a session actor (default {CompactionPolicy().ask_timeout_s:g})",
    )
    parser.add_argument(
        "--compact-at-tokens",
        metavar="N",
        type=int,
        default=None,
        help="compact a session automatically once its live transcript passes N tokens (default: never; "
        "serve compacts only when asked)",
    )
    parser.add_argument(
        "--target-tokens",
        metavar="N",
        type=int,
        default=None,
        help=f"size a compaction's summary aims for (default {CompactionPolicy().target_tokens})",
    )
    parser.add_argument(
        "--keep-last",
        metavar="N",
        type=int,
        default=None,
        help=f"messages a compaction keeps verbatim at the end (default {CompactionPolicy().keep_last})",
    )
    parser.add_argument(
        "--workers",
        metavar="N",
        type=int,
        default=1,
        help="server processes on the one socket and database (default 1); a turn opened through one "
        "goes on through any",
    )
    parser.add_argument("--listen-fd", type=int, default=None, help=argparse.SUPPRESS)  # a worker's socket
    add_compressor_options(parser)


def serve_policy(args: argparse.Namespace) -> CompactionPolicy:
    """The registry's policy from the options (`InvalidArgumentError` out of range)."""
    sizes = {"target_tokens": args.target_tokens, "keep_last": args.keep_last}
    return CompactionPolicy(
        max_tokens=args.compact_at_tokens,
        lease_ttl_s=args.lease_ttl_s,
        max_turn_s=args.max_turn_s,
        ask_timeout_s=args.ask_timeout_s,
        **{name: value for name, value in sizes.items() if value is not None},
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from ..serve import ServeLimits, serve

    policy = serve_policy(args)  # checked before the compressor or the database
    limits = ServeLimits(
        max_body=args.max_body,
        max_concurrency=args.max_concurrency,
        header_timeout_s=args.header_timeout,
        drain_s=args.drain,
        body_timeout_s=args.body_timeout,
        heartbeat_s=args.events_heartbeat_s,
    )
    if args.workers < 1:
        raise InvalidArgumentError(f"--workers must be at least 1, got {args.workers}")
    compressor = make_compressor(args)  # an unconfigured LLM stops the start here, in the supervisor too
    if args.workers > 1:
        return _supervise(args, limits.drain_s)
    serve(
        resolve_db(args),
        host=args.host,
        port=args.port,
        tokens=args.tokens,
        insecure_local=args.insecure_local,
        compressor=compressor,
        policy=policy,
        limits=limits,
        listen_fd=args.listen_fd,
    )
    return 0


def _supervise(args: argparse.Namespace, drain_s: float) -> int:
    """``--workers N``: bind once, then run N workers on the socket (`run_workers`),
    after checking what would stop every worker's start (tokens, database)."""
    from ..serve._server import bound_socket, check_tokens
    from ..serve._workers import run_workers

    check_tokens(args.tokens, args.insecure_local, args.host)
    resolve_db(args)  # a bad --db stops here, once, not in every worker
    sock = bound_socket(args.host, args.port)
    try:
        return run_workers(args.argv, sock, args.workers, drain_s)
    finally:
        sock.close()


def add_token_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="who the token is for (1-64 of A-Z a-z 0-9 _ . : @ -)")
    parser.add_argument("--scope", required=True, help="comma-separated: read, write, admin")
    parser.add_argument("--source", default=None, help="limit the token to the sessions of this source")
    parser.add_argument("--tokens", metavar="FILE", required=True, help="the token file (created mode 0600)")


def cmd_token_add(args: argparse.Namespace) -> int:
    from ..serve import add_token

    secret = add_token(args.tokens, args.name, args.scope.split(","), args.source)
    sys.stdout.write(f"added {args.name} to {args.tokens}; it is shown only now: {secret}\n")
    return 0

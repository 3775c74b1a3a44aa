"""``session-actors serve`` and ``session-actors token add``: the HTTP service and the
bearer tokens it checks (the ``serve`` extra, imported only by these commands)."""

from __future__ import annotations

import argparse
import sys

from ._compact import add_compressor_options, make_compressor
from ._database import resolve_db

__all__ = ["add_serve_options", "add_token_options", "cmd_serve", "cmd_token_add"]


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
    add_compressor_options(parser)


def cmd_serve(args: argparse.Namespace) -> int:
    from ..serve import ServeLimits, serve

    limits = ServeLimits(
        max_body=args.max_body,
        max_concurrency=args.max_concurrency,
        header_timeout_s=args.header_timeout,
        drain_s=args.drain,
    )
    serve(
        resolve_db(args),
        host=args.host,
        port=args.port,
        tokens=args.tokens,
        insecure_local=args.insecure_local,
        compressor=make_compressor(args),
        limits=limits,
    )
    return 0


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

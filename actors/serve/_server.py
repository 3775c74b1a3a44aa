"""``session-actors serve``: the application under uvicorn, on one socket.

Secure by default: without a token file the service refuses to start, unless asked
for ``insecure_local`` on a loopback address. SIGTERM (or Ctrl-C) first drains the
registry while HTTP goes on (open turns finish, the calls they held are applied, no
new turn opens), then stops accepting connections, lets the requests in flight
finish, releases the leases and closes the store.
"""

from __future__ import annotations

import asyncio
import ctypes
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any, TextIO

import uvicorn

from protocol import ConfigurationError

from ..compaction import CompactionPolicy
from ..compressors import Compressor
from ._app import ServeLimits, build
from ._limits import bounded_protocol
from ._service import Service
from ._tokens import TokenFile

__all__ = ["bound_socket", "check_tokens", "serve"]

logger = logging.getLogger("session_actors.serve")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_tokens(tokens: str | None, insecure_local: bool, host: str) -> TokenFile | None:
    """The token file at ``tokens`` (None: ``insecure_local``, on a loopback address
    alone); `ConfigurationError` for a missing, unreadable or empty one."""
    if tokens is None and not insecure_local:
        raise ConfigurationError("serve needs --tokens FILE (or --insecure-local on a loopback address)")
    if tokens is None and not _loopback(host):
        raise ConfigurationError(f"--insecure-local serves only a loopback address, not {host!r}")
    token_file = TokenFile.read(tokens) if tokens is not None else None
    if token_file is not None and not len(token_file):
        raise ConfigurationError(f"the token file {tokens!r} holds no token (add one: session-actors token add)")
    return token_file


def serve(
    db: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    tokens: str | None = None,
    insecure_local: bool = False,
    compressor: Compressor | None = None,
    policy: CompactionPolicy | None = None,
    limits: ServeLimits | None = None,
    announce: TextIO | None = None,
    listen_fd: int | None = None,
) -> None:
    """Serve ``db`` until SIGTERM or SIGINT. ``tokens`` is the token file's path.
    Port 0 takes a free port; the line written to ``announce`` (stdout by default)
    names the address actually bound. ``listen_fd``: accept on this inherited,
    already listening socket instead (a worker of ``--workers``; nothing announced)."""
    token_file = check_tokens(tokens, insecure_local, host)
    limits = limits or ServeLimits()
    if listen_fd is not None:
        _end_with_the_supervisor()
    sock = bound_socket(host, port) if listen_fd is None else socket.socket(fileno=listen_fd)
    try:
        app, service = build(db, tokens=token_file, compressor=compressor, policy=policy, limits=limits)
        config = uvicorn.Config(
            app,
            http=bounded_protocol(limits.header_timeout_s),
            lifespan="on",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=int(limits.drain_s) + 1,
            h11_max_incomplete_event_size=64 * 1024,
        )
        server = _DrainingServer(config, service, limits.drain_s)
        if listen_fd is None:
            bound_host, bound_port = sock.getsockname()[:2]
            out = announce or sys.stdout
            out.write(f"session-actors serve: listening on http://{bound_host}:{bound_port} (console: /console)\n")
            out.flush()
        _stop_signals_end_the_serve()
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()


class _DrainingServer(uvicorn.Server):
    """On the first SIGTERM/SIGINT the registry drains while HTTP goes on (the
    holders of open turns can still append and close them; no new turn opens, and
    ``/readyz`` says draining); then uvicorn stops as usual. A second signal stops
    at once."""

    def __init__(self, config: uvicorn.Config, service: Service, drain_s: float) -> None:
        super().__init__(config)
        self._service, self._drain_s = service, drain_s
        self._draining: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._draining is not None or not self._drain_s:
            super().handle_exit(sig, frame)
            return
        self._draining = threading.Thread(target=self._drain, args=(sig,), name="serve-drain", daemon=True)
        self._draining.start()

    def _drain(self, sig: int) -> None:
        try:
            self._service.registry.close(drain_s=self._drain_s)
        except Exception:
            logger.exception("draining the registry failed")
        finally:
            self.should_exit = True


#: prctl(2)'s option: the signal this process gets when the thread that started it exits.
_PR_SET_PDEATHSIG = 1


def _end_with_the_supervisor() -> None:
    """A worker of ``--workers`` ends with its supervisor: killed with it when the
    supervisor is killed (-9, say), instead of serving on, unsupervised, on a socket
    nobody restarts. SIGKILL, not SIGTERM: it arrives whatever handler the server has
    installed at that moment; what was acknowledged is durable, and clients retry by
    key. Linux only; elsewhere the worker outlives a killed supervisor."""
    supervisor = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        failed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0
    except (OSError, AttributeError):  # no prctl here
        failed = True
    if failed:
        logger.warning("this worker cannot follow its supervisor's death (no prctl): it outlives a killed supervisor")
    elif os.getppid() != supervisor:  # gone before the request took effect
        os._exit(1)


def _stop_signals_end_the_serve() -> None:
    """uvicorn shuts down gracefully on SIGTERM/SIGINT, then raises the signal again
    for the handler it found: make that one a no-op, so a graceful stop exits 0
    instead of dying by the signal it already handled."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: None)


def bound_socket(host: str, port: int) -> Any:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    return sock

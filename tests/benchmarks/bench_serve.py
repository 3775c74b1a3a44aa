"""Appends/s over HTTP: ``session-actors serve``'s append route against a bare FastAPI
endpoint that does nothing, under the same uvicorn settings, loaded by one client
process in the same run. Goal: our route >= 0.9x the bare endpoint.

The bare endpoint is the same path on a plain FastAPI application: it reads the body
and answers 201 with ``{"messages": []}``, no parsing, no middleware, no store. Both
servers are one uvicorn process on the asyncio loop with `serve`'s HTTP protocol
(h11 with the header deadline), log level warning, no access log.
Besides appends/s (which the client, a Python process on the same machine, also
bounds), each round reads the server process's CPU time (user + system, all its
threads: ours includes the writer thread's SQLite work) per acknowledged append:
what a request costs the server, whatever else the machine runs.

The client process runs ``--threads`` threads, each on one kept-alive connection,
posting a message (with an idempotency key) to one of ``--sessions`` sessions round
robin, for ``--seconds``; rounds alternate the two servers and medians are compared.
Ours writes every append durably to a fresh SQLite file (group commit).

    python -m tests.benchmarks.bench_serve
    python -m tests.benchmarks.bench_serve --threads 32 --seconds 3 --rounds 3
"""

# no `from __future__ import annotations`: FastAPI reads bare_app's signature at runtime
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.serve.client import call, start_server


def bare_app():  # type: ignore[no-untyped-def]
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.post("/v1/sessions/{session_id}/messages")
    async def append(session_id: str, request: Request):  # type: ignore[no-untyped-def]
        await request.body()
        return JSONResponse({"messages": []}, status_code=201)

    return app


def serve_bare() -> None:
    """A uvicorn with `session-actors serve`'s settings around `bare_app`."""
    import asyncio
    import socket

    import uvicorn

    from actors.serve._limits import bounded_protocol

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    config = uvicorn.Config(bare_app(), http=bounded_protocol(10.0), log_level="warning", access_log=False)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


def load(port: int, threads: int, sessions: int, seconds: float) -> tuple[float, int]:
    """Acknowledged appends/s from ``threads`` kept-alive connections, and how many."""
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    stop = time.monotonic() + seconds + 0.2

    def worker(n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        start.wait()
        i = 0
        while time.monotonic() < stop:
            sid = f"bench:{(n + i * threads) % sessions}"
            body = json.dumps(
                {"role": "user", "content": f"message {i} of {n}", "key": f"{n}-{i}-{time.monotonic_ns()}"}
            )
            conn.request("POST", f"/v1/sessions/{sid}/messages", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status in (200, 201):
                counts[n] += 1
            i += 1
        conn.close()

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    began = time.monotonic()
    for w in workers:
        w.join()
    return sum(counts) / (time.monotonic() - began), sum(counts)


def _cpu_s(pid: int) -> float:
    """User + system seconds the process ``pid`` used so far (every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client(port: int, args: argparse.Namespace) -> tuple[float, int]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.benchmarks.bench_serve",
            "--client",
            str(port),
            "--threads",
            str(args.threads),
            "--sessions",
            str(args.sessions),
            "--seconds",
            str(args.seconds),
        ],
        capture_output=True,
        text=True,
        timeout=args.seconds * 10 + 60,
        check=True,
    )
    rate, count = done.stdout.split()[-2:]
    return float(rate), int(count)


def compare(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as directory:
        ours = start_server(str(Path(directory) / "state.db"), None)
        bare = subprocess.Popen(
            [sys.executable, "-m", "tests.benchmarks.bench_serve", "--bare"], stdout=subprocess.PIPE, text=True
        )
        try:
            bare_port = int(bare.stdout.readline().rsplit(":", 1)[1]) if bare.stdout else 0
            for n in range(args.sessions):
                assert call(ours.port, "PUT", f"/v1/sessions/bench:{n}", {}).status == 201
            rates: dict[str, list[float]] = {"bare": [], "ours": []}
            cpu_us: dict[str, list[float]] = {"bare": [], "ours": []}  # server CPU per append
            pids = {"bare": bare.pid, "ours": ours.process.pid}
            for round_ in range(args.rounds):
                order = [("bare", bare_port), ("ours", ours.port)]
                for name, port in order if round_ % 2 == 0 else order[::-1]:
                    before = _cpu_s(pids[name])
                    rate, count = _client(port, args)
                    rates[name].append(rate)
                    cpu_us[name].append((_cpu_s(pids[name]) - before) / max(count, 1) * 1e6)
                print(
                    f"round {round_ + 1}: bare {rates['bare'][-1]:8.0f}/s {cpu_us['bare'][-1]:6.0f} us CPU each   "
                    f"ours {rates['ours'][-1]:8.0f}/s {cpu_us['ours'][-1]:6.0f} us CPU each",
                    flush=True,
                )
            b, o = statistics.median(rates["bare"]), statistics.median(rates["ours"])
            cb, co = statistics.median(cpu_us["bare"]), statistics.median(cpu_us["ours"])
            print(
                f"median appends/s over HTTP ({args.threads} connections): bare endpoint {b:.0f}, "
                f"session-actors {o:.0f} (durable) -> {o / b:.2f}x (goal >= 0.9x); "
                f"server CPU per append: bare {cb:.0f} us, ours {co:.0f} us -> {cb / co:.2f}x"
            )
        finally:
            bare.terminate()
            bare.wait(30)
            if bare.stdout:
                bare.stdout.close()
            ours.stop()


def defaults() -> argparse.Namespace:
    return _parser().parse_args([])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=32, help="client connections (threads)")
    parser.add_argument("--sessions", type=int, default=64, help="sessions the appends spread over")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are compared")
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = _parser().parse_args()
    if args.bare:
        serve_bare()
    elif args.client is not None:
        rate, count = load(args.client, args.threads, args.sessions, args.seconds)
        print(f"{rate:.1f} {count}")
    else:
        compare(args)


if __name__ == "__main__":
    main()

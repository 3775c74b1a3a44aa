"""``serve --workers 2`` on one PostgreSQL database: two processes accept on one socket,
each request goes to either; a turn opened through one goes on and closes through
both while the other requests to the session wait; a worker killed with -9 is started
again."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from .client import Server, start_server, token_file

pytestmark = pytest.mark.postgres


def _workers(server: Server) -> list[int]:
    """The pids of the supervisor's children (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == server.process.pid:
                found.append(int(entry.name))
    return sorted(found)


def _until(check, what: str, within: float = 60.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {within}s")


def test_two_workers_share_the_socket_and_a_turn_goes_on_through_either(pg_url, tmp_path):
    path = tmp_path / "tokens.txt"
    secrets = token_file(path, {"bot": ("read,write", None)})
    server = start_server(pg_url, path, "--workers", "2", "--drain", "5", tokens_by_name=secrets)
    try:
        first = _until(lambda: len(_workers(server)) == 2 and _workers(server), "two workers")
        _until(lambda: server.call("GET", "/readyz").status == 200, "ready")
        assert server.call("PUT", "/v1/sessions/w/1", {}, as_="bot").status == 201
        tid = server.call("POST", "/v1/sessions/w/1/turns", {}, as_="bot").body["turn"]
        held: list = []
        other = {"role": "user", "content": "double text"}
        waiting = threading.Thread(
            target=lambda: held.append(server.call("POST", "/v1/sessions/w/1/messages", other, as_="bot"))
        )
        for n in range(10):  # each on a new connection: either worker answers
            message = {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}"}
            answer = server.call("POST", f"/v1/sessions/w/1/messages?turn={tid}", message, as_="bot")
            assert answer.status == 201, answer.body
            if n == 0:
                waiting.start()
        assert not held  # held behind the turn, whichever worker took it
        assert server.call("DELETE", f"/v1/sessions/w/1/turns/{tid}", as_="bot").status == 200
        waiting.join(60)
        assert held and held[0].status == 201, held
        contents = [m["content"] for m in server.call("GET", "/v1/sessions/w/1/messages", as_="bot").body["messages"]]
        assert contents == [f"turn {n}" for n in range(10)] + ["double text"]

        os.kill(first[0], 9)  # a worker dies: the supervisor starts another
        _until(lambda: len(_workers(server)) == 2 and first[0] not in _workers(server), "a new worker")
        for n in range(6):
            answer = server.call(
                "POST", "/v1/sessions/w/1/messages", {"role": "user", "content": f"after {n}"}, as_="bot"
            )
            assert answer.status == 201, answer.body
    finally:
        code = server.stop()
    assert code == 0, "".join(server.stderr)


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie nobody reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def test_the_workers_end_with_their_supervisor_killed_with_9(pg_url, tmp_path):
    path = tmp_path / "tokens.txt"
    secrets = token_file(path, {"bot": ("read,write", None)})
    server = start_server(pg_url, path, "--workers", "2", "--drain", "5", tokens_by_name=secrets)
    workers: list[int] = []
    try:
        workers = _until(lambda: len(_workers(server)) == 2 and _workers(server), "two workers")
        _until(lambda: server.call("GET", "/readyz").status == 200, "ready")
        server.process.kill()
        server.process.wait(30)
        _until(lambda: not any(_alive(pid) for pid in workers), "the workers ended with their supervisor", 30)
    finally:
        for pid in workers:  # without the fix they serve on: do not leak them
            if _alive(pid):
                os.kill(pid, 9)
        server.stop()

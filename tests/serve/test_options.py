"""serve's options: lease lifetime, the longest turn, the ask timeout, automatic
compaction (off unless asked) and the compressor, an LLM one configured by the
environment as ``session-actors compact``'s is."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .client import Server, start_server

DEADLINE_S = 30.0


def _poll(check, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {DEADLINE_S}s")


def _turn_lease_left(server: Server) -> float:
    assert server.call("PUT", "/v1/sessions/l", {}).status in (200, 201)
    tid = server.call("POST", "/v1/sessions/l/turns", {}).body["turn"]
    locks = server.call("GET", "/v1/locks").body
    [lease] = locks["turns"]
    assert server.call("DELETE", f"/v1/sessions/l/turns/{tid}").status == 200
    return lease["expires_at"] - locks["now"]


def test_turn_leases_live_15_s_unless_lease_ttl_s_says_otherwise(server: Server, tmp_path):
    assert 5.0 < _turn_lease_left(server) <= 15.0
    longer = start_server(str(tmp_path / "long.db"), None, "--lease-ttl-s", "45")
    try:
        assert 30.0 < _turn_lease_left(longer) <= 45.0
    finally:
        assert longer.stop() == 0


def test_max_turn_s_closes_a_forgotten_turn_and_lets_the_held_append_in(tmp_path):
    server = start_server(str(tmp_path / "s.db"), None, "--max-turn-s", "1", "--drain", "5")
    try:
        assert server.call("PUT", "/v1/sessions/f", {}).status == 201
        tid = server.call("POST", "/v1/sessions/f/turns", {}).body["turn"]
        assert (
            server.call("POST", f"/v1/sessions/f/messages?turn={tid}", {"role": "user", "content": "ask"}).status == 201
        )
        began = time.monotonic()
        held = server.call("POST", "/v1/sessions/f/messages", {"role": "user", "content": "later"})
        assert held.status == 201 and time.monotonic() - began < 20  # not the default 120 s
        contents = [m["content"] for m in server.call("GET", "/v1/sessions/f/messages").body["messages"]]
        assert contents[-1] == "later"
    finally:
        assert server.stop() == 0


class _FakeLLM(BaseHTTPRequestHandler):
    asked: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).asked.append(self.path)
        body = json.dumps({"choices": [{"message": {"content": "FAKE LLM SUMMARY of the talk"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_compact_at_tokens_compacts_on_its_own_with_the_llm_compressor_the_environment_names(tmp_path, monkeypatch):
    llm = ThreadingHTTPServer(("127.0.0.1", 0), _FakeLLM)
    threading.Thread(target=llm.serve_forever, daemon=True).start()
    monkeypatch.setenv("SESSION_ACTORS_LLM_BASE_URL", f"http://127.0.0.1:{llm.server_address[1]}/v1")
    monkeypatch.setenv("SESSION_ACTORS_LLM_MODEL", "fake-model")
    options = ["--compressor", "llm", "--compact-at-tokens", "300", "--keep-last", "2", "--target-tokens", "100"]
    server = start_server(str(tmp_path / "s.db"), None, *options)
    try:
        assert server.call("PUT", "/v1/sessions/auto", {}).status == 201
        for n in range(12):
            message = {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}: " + "words " * 30}
            assert server.call("POST", "/v1/sessions/auto/messages", message).status == 201
        records = _poll(lambda: server.call("GET", "/v1/sessions/auto/compactions").body["compactions"], "a compaction")
        assert 1 <= records[0]["tail_count"] <= 2 and "/v1/chat/completions" in _FakeLLM.asked
        live = server.call("GET", "/v1/sessions/auto/messages").body["messages"]
        assert any("FAKE LLM SUMMARY" in str(m["content"]) for m in live)
    finally:
        assert server.stop() == 0
        llm.shutdown()
        llm.server_close()


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--ask-timeout-s", "0"], "ask_timeout_s"),
        (["--max-turn-s", "-1"], "max_turn_s"),
        (["--lease-ttl-s", "nan"], "lease_ttl_s"),
        (["--compact-at-tokens", "0"], "max_tokens"),
        (["--compressor", "llm"], "SESSION_ACTORS_LLM_BASE_URL"),
    ],
)
def test_bad_options_stop_the_start_with_exit_2(tmp_path, monkeypatch, extra, words):
    for name in ("SESSION_ACTORS_LLM_BASE_URL", "OPENAI_BASE_URL", "SESSION_ACTORS_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    db = tmp_path / "s.db"
    done = subprocess.run(
        [sys.executable, "-m", "actors.cli", "serve", "--db", str(db), "--port", "0", "--insecure-local", *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not db.exists()

"""``/v1/events``: open as long as its client listens (no body or idle timeout), a
comment heartbeat every ``--events-heartbeat-s``, numbered events, a resume from
``Last-Event-ID`` out of a bounded buffer, and no traceback for a client that left."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import time

from actors.serve._events import EventHub
from protocol import CompressionOutcome, CompressionStatus

from .client import Server, start_server

DEADLINE_S = 30.0


class _Stream:
    def __init__(self, server: Server, as_: str = "reader", last_event_id: str | None = None) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=DEADLINE_S)
        headers = {"Authorization": f"Bearer {server.tokens[as_]}"} if server.tokens else {}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", "/v1/events", headers=headers)
        self.response = self.conn.getresponse()
        assert self.response.status == 200

    def block(self) -> list[str]:
        """The next block of lines (up to a blank line)."""
        lines: list[str] = []
        while True:
            line = self.response.readline().decode()
            assert line, "the stream ended"
            if line == "\n":
                return lines
            lines.append(line.rstrip("\n"))

    def event(self) -> tuple[str | None, str, dict]:
        """The next event (heartbeats and comments skipped): its id, kind and data."""
        while True:
            fields = [line.partition(": ") for line in self.block() if not line.startswith(":")]
            found = {name: value for name, _, value in fields}
            if "event" in found:
                return found.get("id"), found["event"], json.loads(found.get("data", "null"))

    def close(self) -> None:
        self.conn.close()


def _subscribers(server: Server) -> int:
    text = server.call("GET", "/metrics").body
    found = re.search(r"^session_actors_event_subscribers (\d+)$", text, re.M)
    assert found is not None
    return int(found.group(1))


def _until(check, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {DEADLINE_S}s")
        time.sleep(0.02)


def test_a_stream_outlives_the_body_timeout_with_heartbeats_and_its_leaving_logs_no_traceback(tmp_path):
    server = start_server(str(tmp_path / "s.db"), None, "--body-timeout", "1", "--events-heartbeat-s", "0.1")
    try:
        stream = _Stream(server)
        began = time.monotonic()
        beats = 0
        while time.monotonic() - began < 3.0:  # three body timeouts
            beats += stream.block() == [": heartbeat"]
        assert beats >= 10
        stream.close()
        _until(lambda: _subscribers(server) == 0, "the server lets the stream go")
        assert server.call("GET", "/healthz").status == 200
    finally:
        assert server.stop() == 0
    log = "".join(server.stderr)
    assert "Traceback" not in log and "ERROR" not in log, log


def _compact(server: Server, sid: str) -> dict:
    answer = server.call("POST", f"/v1/sessions/{sid}/compact", {"force": True})
    assert answer.status == 200, answer.body
    return answer.body


def test_events_are_numbered_and_a_reconnect_with_last_event_id_gets_the_missed_ones(server: Server):
    assert server.call("PUT", "/v1/sessions/ev", {}).status == 201
    for n in range(8):
        server.call(
            "POST",
            "/v1/sessions/ev/messages",
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"m{n} " * 30},
        )
    stream = _Stream(server)
    assert stream.block()[0] == ": subscribed"
    _compact(server, "ev")
    _compact(server, "ev")
    first_id, kind, data = stream.event()
    second_id, _, _ = stream.event()
    assert kind == "compaction" and data["session_id"] == "ev"
    assert first_id and second_id and first_id != second_id
    stream.close()
    missed = [_compact(server, "ev")["status"] for _ in range(2)]  # while nobody listens

    again = _Stream(server, last_event_id=first_id)
    resumed = [again.event() for _ in range(3)]
    assert resumed[0][0] == second_id
    assert [e[2]["status"] for e in resumed[1:]] == missed
    assert len({e[0] for e in resumed}) == 3
    again.close()

    stranger = _Stream(server, last_event_id="another-run:7")  # the server restarted since: a gap first
    gap_id, gap, _ = stranger.event()
    assert (gap_id, gap) == (None, "gap")
    assert stranger.event()[0] == first_id  # then everything kept
    stranger.close()


def test_a_source_limited_stream_resumes_with_its_own_sources_events_only(server: Server):
    for sid, source in (("w:1", "web"), ("d:1", "discord")):
        assert server.call("PUT", f"/v1/sessions/{sid}", {"source": source}).status == 201
    stream = _Stream(server, as_="discord")
    stream.block()
    _compact(server, "w:1")
    _compact(server, "d:1")
    seen_id, _, data = stream.event()
    assert data["session_id"] == "d:1"
    stream.close()
    _compact(server, "w:1")
    _compact(server, "d:1")
    again = _Stream(server, as_="discord", last_event_id=seen_id)
    _, _, data = again.event()
    assert data["session_id"] == "d:1"
    again.close()


def test_the_buffer_is_bounded_and_a_resume_past_it_starts_with_a_gap():
    async def run() -> tuple[list[str], list[str]]:
        hub = EventHub(lambda session_id: None, heartbeat_s=0.05, buffer=2)
        hub.bind(asyncio.get_running_loop())
        live = hub.stream(None)
        assert (await anext(live)).startswith(": subscribed")
        for n in range(1, 6):
            hub.publish(CompressionOutcome(CompressionStatus.UNCHANGED, f"s{n}"))
        seen = [await anext(live) for _ in range(5)]
        await live.aclose()
        resumed = hub.stream(None, seen[0].split("\n")[0].removeprefix("id: "))
        again = [await anext(resumed) for _ in range(5)]
        await resumed.aclose()
        return seen, again

    seen, again = asyncio.run(run())
    assert [json.loads(block.split("data: ")[1])["session_id"] for block in seen] == ["s1", "s2", "s3", "s4", "s5"]
    assert again[0].startswith(": subscribed")
    assert again[1].startswith("event: gap")  # s2 and s3 are no longer kept
    assert again[2:4] == seen[3:5]  # the two kept: s4 and s5, as first sent
    assert again[4] == ": heartbeat\n\n"

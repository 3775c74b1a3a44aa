"""Every valid session id on every per-session route (``/`` included, raw or
``%2F``-encoded), strict percent-decoding, and odd bodies answered with a typed
error, never a 500."""

from __future__ import annotations

import pytest

from .client import Server

SLASHED = "slack/T1/C2"
#: The same id, its slashes raw, encoded, and mixed.
SPELLINGS = ["slack/T1/C2", "slack%2FT1%2FC2", "slack%2fT1/C2"]


def test_an_id_with_slashes_works_on_every_per_session_route(server: Server):
    created = server.call("PUT", "/v1/sessions/slack/T1/C2", {"source": "slack"})
    assert (created.status, created.body["id"]) == (201, SLASHED), created.body
    for spelling in SPELLINGS:
        base = f"/v1/sessions/{spelling}"
        got = server.call("GET", base)
        assert (got.status, got.body["id"], got.body["live_id"]) == (200, SLASHED, SLASHED), (spelling, got.body)
        assert server.call("PUT", base, {}).status == 200
        appended = server.call("POST", f"{base}/messages", {"role": "user", "content": spelling})
        assert appended.status == 201 and appended.body["messages"][0]["session_id"] == SLASHED
    patched = server.call("PATCH", "/v1/sessions/slack%2FT1%2FC2", {"metadata": {"team": "T1"}})
    assert (patched.status, patched.body["metadata"]) == (200, {"team": "T1"})
    read = server.call("GET", "/v1/sessions/slack/T1/C2/messages").body
    assert read["session_id"] == SLASHED and [m["content"] for m in read["messages"]] == SPELLINGS

    turn = server.call("POST", "/v1/sessions/slack/T1/C2/turns", {})
    assert turn.status == 201 and turn.body["session_id"] == SLASHED
    tid = turn.body["turn"]
    inside = server.call(
        "POST", f"/v1/sessions/slack%2FT1%2FC2/messages?turn={tid}", {"role": "assistant", "content": "a"}
    )
    assert inside.status == 201
    assert server.call("GET", f"/v1/sessions/slack/T1/C2/turns/{tid}").body["interrupted"] is False
    assert server.call("DELETE", f"/v1/sessions/slack/T1/C2/turns/{tid}").status == 200
    assert server.call("POST", "/v1/sessions/slack/T1/C2/retract").body["retracted"]["seq"] == 4
    assert server.call("POST", "/v1/sessions/slack/T1/C2/interrupt").body == {"cancelled": False}
    for i in range(10):
        server.call("POST", "/v1/sessions/slack/T1/C2/messages", {"role": "user", "content": f"filler {i} " * 20})
    outcome = server.call("POST", "/v1/sessions/slack/T1/C2/compact", {"force": True})
    assert (outcome.status, outcome.body["status"]) == (200, "compacted"), outcome.body
    [record] = server.call("GET", "/v1/sessions/slack/T1/C2/compactions").body["compactions"]
    assert record["session_id"] == SLASHED
    assert server.call("GET", "/v1/sessions/slack/T1/C2/lineage").body["root"] == SLASHED
    archived = server.call("GET", "/v1/sessions/slack%2FT1%2FC2/messages?archived=true").body["messages"]
    assert archived and {m["session_id"] for m in archived} == {SLASHED}
    assert server.call("GET", f"/v1/usage?session_id={SLASHED.replace('/', '%2F')}").status == 200
    assert server.call("DELETE", "/v1/sessions/slack/T1/C2").status == 200
    assert server.call("GET", "/v1/sessions/slack%2FT1%2FC2").status == 404


def test_an_id_ending_in_a_route_word_is_reached_with_its_slashes_encoded(server: Server):
    assert server.call("PUT", "/v1/sessions/a%2Fmessages", {}).body["id"] == "a/messages"
    assert server.call("PUT", "/v1/sessions/a", {}).body["id"] == "a"
    assert server.call("GET", "/v1/sessions/a%2Fmessages").body["id"] == "a/messages"
    assert server.call("GET", "/v1/sessions/a/messages").body == {"session_id": "a", "messages": []}


@pytest.mark.parametrize("bad", ["a%zz", "a%2", "a%", "a%ff", "a%C3%28", "%ED%A0%80"])
def test_an_invalid_percent_encoding_is_400_and_never_aliases_another_id(server: Server, bad: str):
    for method, path, body in [
        ("PUT", f"/v1/sessions/{bad}", {}),
        ("GET", f"/v1/sessions/{bad}", None),
        ("POST", f"/v1/sessions/{bad}/messages", {"role": "user", "content": "x"}),
        ("GET", f"/v1/sessions/{bad}/messages", None),
        ("GET", f"/v1/usage?session_id={bad}", None),
        ("GET", f"/v1/sessions?after={bad}", None),
    ]:
        answer = server.call(method, path, body)
        assert (answer.status, answer.body["error"]) == (400, "InvalidSessionIdError"), (method, path, answer.body)
    assert server.call("GET", "/v1/sessions").body["sessions"] == []  # nothing was created


ODD_BODIES = [
    b"[" * 100_000,
    b'{"role": "user", "content": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"metadata": ' + b'{"a": ' * 500 + b"1" + b"}" * 501,
    b'{"role": "user", "content": NaN}',
    b'{"role": "user", "content": 1e999}',
    b'{"role": "user", "content": ' + b"9" * 5000 + b"}",
    b'{"role": 5, "content": "x"}',
    b'{"role": "user", "content": "x", "meta": 5}',
    b'{"role": "user", "content": "x", "usage": "lots"}',
    b'{"role": "user", "content": "x", "usage": {"input_tokens": "a"}}',
    b'{"role": "user", "content": "x", "key": 5}',
    b'{"role": "user", "content": "x", "name": {"a": 1}}',
    b'{"role": "user", "content": "\\ud800"}',
    b'[{"role": "user", "content": "x"}, 5]',
    b'"a string"',
    b"123",
    b"null",
    b"\xff\xfe\x00",
    b'{"metadata": 5, "source": ["x"]}',
    b'{"on_busy": ["x"], "force": "yes", "mode": 5, "wait": "no", "source": 3}',
]
#: The bodies no route could take: not JSON, too deep, out of range, not an object.
STRUCTURAL = ODD_BODIES[:6] + ODD_BODIES[13:18] + ODD_BODIES[19:]


def test_odd_bodies_are_typed_4xx_on_every_route_that_reads_one(server: Server):
    assert server.call("PUT", "/v1/sessions/odd", {}).status == 201
    routes = [
        ("POST", "/v1/sessions/odd/messages", ODD_BODIES),
        ("PATCH", "/v1/sessions/odd", ODD_BODIES),
        ("PUT", "/v1/sessions/odd2", [*STRUCTURAL, ODD_BODIES[18]]),
        ("POST", "/v1/sessions/odd/turns", STRUCTURAL),
        ("POST", "/v1/sessions/odd/compact", STRUCTURAL),
    ]
    for method, path, bodies in routes:
        for raw in bodies:
            answer = server.call(method, path, raw=raw)
            assert answer.status in (400, 413, 422), (method, path, raw[:60], answer.status, answer.body)
            assert set(answer.body) == {"error", "message"} and answer.body["error"] != "InternalError"
    assert server.call("GET", "/v1/sessions/odd/messages").body["messages"] == []
    assert server.call("GET", "/v1/sessions/odd2").status == 404

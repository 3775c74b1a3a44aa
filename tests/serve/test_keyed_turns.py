"""Keyed turns over HTTP: ``POST .../turns`` with ``Idempotency-Key: K`` opens
``handle.turn(key=K)``; once turn K was completed, the same request opens nothing and
answers 200 with the messages that turn stored."""

from __future__ import annotations

from .client import Server


def _turn(server: Server, sid: str, key: str, as_: str = "bot", body: dict | None = None):
    return server.call("POST", f"/v1/sessions/{sid}/turns", body, headers={"Idempotency-Key": key}, as_=as_)


def test_a_completed_keyed_turn_is_replayed_with_its_messages_and_opens_nothing(server: Server):
    assert server.call("PUT", "/v1/sessions/k", {}).status == 201
    opened = _turn(server, "k", "discord-msg-1")
    assert opened.status == 201 and opened.body["replayed"] is False, opened.body
    tid = opened.body["turn"]
    for role, content in (("user", "What is 2+2?"), ("assistant", "4")):
        path = f"/v1/sessions/k/messages?turn={tid}"
        assert server.call("POST", path, {"role": role, "content": content}, as_="bot").status == 201
    assert server.call("DELETE", f"/v1/sessions/k/turns/{tid}", as_="bot").status == 200

    replay = _turn(server, "k", "discord-msg-1")
    assert replay.status == 200 and replay.body["replayed"] is True, replay.body
    assert "turn" not in replay.body  # nothing to append through
    assert [(m["seq"], m["role"], m["content"]) for m in replay.body["messages"]] == [
        (1, "user", "What is 2+2?"),
        (2, "assistant", "4"),
    ]
    assert server.call("GET", "/v1/locks").body["turns"] == []  # the replay opened no turn
    # a plain append goes in at once: nothing holds the session
    assert server.call("POST", "/v1/sessions/k/messages", {"role": "user", "content": "next"}).status == 201

    blind = _turn(server, "k", "discord-msg-1", as_="writer")
    assert blind.status == 200 and blind.body["replayed"] is True
    assert [(m["id"], m["seq"]) for m in blind.body["messages"]] == [
        (m["id"], m["seq"]) for m in replay.body["messages"]
    ]
    assert all("content" not in m and "role" not in m for m in blind.body["messages"])
    assert "What is 2+2?" not in str(blind.body)

    other = _turn(server, "k", "discord-msg-2")  # another key: a new turn
    assert other.status == 201 and other.body["replayed"] is False
    assert server.call("DELETE", f"/v1/sessions/k/turns/{other.body['turn']}", as_="bot").status == 200


def test_a_keyed_turn_still_open_makes_a_rejecting_redelivery_409_and_a_bad_key_400(server: Server):
    assert server.call("PUT", "/v1/sessions/o", {}).status == 201
    tid = _turn(server, "o", "m1").body["turn"]
    busy = _turn(server, "o", "m1", body={"on_busy": "reject"})
    assert busy.status == 409, busy.body
    assert server.call("DELETE", f"/v1/sessions/o/turns/{tid}", as_="bot").status == 200
    assert _turn(server, "o", "m1").status == 200
    bad = _turn(server, "o", "k" * 1000)
    assert (bad.status, bad.body["error"]) == (400, "InvalidMessageError")
    assert server.call("GET", "/v1/locks").body["turns"] == []

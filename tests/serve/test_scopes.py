"""A ``write``-only token never receives stored content: its answers carry ids, seqs,
keys and statuses. ``/metrics`` is admin's."""

from __future__ import annotations

from .client import Server

#: What a write-only token may see of a stored message, and of a session.
MESSAGE_FIELDS = {"id", "session_id", "seq", "state", "key"}
SESSION_FIELDS = {"id", "live"}


def test_put_and_patch_of_an_existing_session_show_a_write_only_token_no_metadata(server: Server):
    created = server.call("PUT", "/v1/sessions/s", {"source": "web", "metadata": {"secret": "diary"}})
    assert created.status == 201
    again = server.call("PUT", "/v1/sessions/s", {}, as_="writer")
    assert again.status == 200 and set(again.body) == SESSION_FIELDS and again.body["id"] == "s"
    patched = server.call("PATCH", "/v1/sessions/s", {"metadata": {"lang": "en"}}, as_="writer")
    assert patched.status == 200 and set(patched.body) == SESSION_FIELDS, patched.body
    new = server.call("PUT", "/v1/sessions/t", {"metadata": {"x": 1}}, as_="writer")
    assert new.status == 201 and set(new.body) == SESSION_FIELDS
    # a token that reads sees the whole row, as before
    full = server.call("PATCH", "/v1/sessions/s", {"metadata": {"plan": 1}}, as_="bot")
    assert full.body["metadata"] == {"secret": "diary", "lang": "en", "plan": 1}


def test_a_replayed_idempotency_key_does_not_hand_a_write_only_token_the_stored_message(server: Server):
    assert server.call("PUT", "/v1/sessions/k", {}).status == 201
    first = server.call(
        "POST", "/v1/sessions/k/messages", {"role": "user", "content": "my secret"}, headers={"Idempotency-Key": "m1"}
    )
    assert first.status == 201
    replay = server.call(
        "POST",
        "/v1/sessions/k/messages",
        {"role": "user", "content": "guess"},
        headers={"Idempotency-Key": "m1"},
        as_="writer",
    )
    assert replay.status == 200
    [stored] = replay.body["messages"]
    assert set(stored) == MESSAGE_FIELDS and "my secret" not in str(replay.body)
    assert (stored["id"], stored["seq"], stored["key"]) == (first.body["messages"][0]["id"], 1, "m1")
    fresh = server.call(
        "POST", "/v1/sessions/k/messages", [{"role": "user", "content": "x", "key": "m2"}], as_="writer"
    )
    assert fresh.status == 201 and [set(m) for m in fresh.body["messages"]] == [MESSAGE_FIELDS]


def test_retract_shows_a_write_only_token_where_the_message_was_not_what_it_said(server: Server):
    assert server.call("PUT", "/v1/sessions/r", {}).status == 201
    assert server.call("POST", "/v1/sessions/r/messages", {"role": "user", "content": "private"}).status == 201
    taken = server.call("POST", "/v1/sessions/r/retract", as_="writer")
    assert taken.status == 200 and set(taken.body["retracted"]) == MESSAGE_FIELDS
    assert taken.body["retracted"]["seq"] == 1 and "private" not in str(taken.body)
    assert server.call("POST", "/v1/sessions/r/retract", as_="writer").body == {"retracted": None}

"""Every session operation over HTTP, against a real ``serve`` subprocess on SQLite."""

from __future__ import annotations

import http.client
import json
import threading

from .client import Server, call, compacted_twice


def _created(server: Server, sid: str, **body) -> dict:
    answer = server.call("PUT", f"/v1/sessions/{sid}", body)
    assert answer.status == 201, answer.body
    return answer.body


def _append(server: Server, sid: str, body, **kw):
    return server.call("POST", f"/v1/sessions/{sid}/messages", body, **kw)


def test_put_creates_once_then_gets_and_patch_merges_metadata(server):
    first = _created(server, "web:1", source="web", metadata={"tier": "gold", "lang": "en"})
    assert (first["id"], first["source"], first["live"]) == ("web:1", "web", True)
    again = server.call("PUT", "/v1/sessions/web:1", {"source": "web"})
    assert again.status == 200 and again.body["incarnation"] == first["incarnation"]
    patched = server.call("PATCH", "/v1/sessions/web:1", {"metadata": {"lang": None, "plan": 3}})
    assert patched.status == 200 and patched.body["metadata"] == {"tier": "gold", "plan": 3}
    got = server.call("GET", "/v1/sessions/web:1")
    assert got.body["live_id"] == "web:1" and got.body["metadata"] == {"tier": "gold", "plan": 3}


def test_list_filters_on_source_and_metadata_and_pages_by_keyset(server):
    for i in range(5):
        _created(server, f"s{i}", source="web" if i % 2 else "cli", metadata={"n": i, "odd": bool(i % 2)})
    web = server.call("GET", "/v1/sessions?source=web").body["sessions"]
    assert sorted(s["id"] for s in web) == ["s1", "s3"]
    odd = server.call("GET", "/v1/sessions?meta.odd=true").body["sessions"]
    assert sorted(s["id"] for s in odd) == ["s1", "s3"]
    seen, after = [], None
    while True:
        page = server.call("GET", "/v1/sessions?limit=2" + (f"&after={after}" if after else "")).body
        seen += [s["id"] for s in page["sessions"]]
        assert len(page["sessions"]) <= 2
        after = page["next"]
        if after is None:
            break
    assert sorted(seen) == [f"s{i}" for i in range(5)] and len(seen) == 5
    assert server.call("GET", "/v1/sessions?limit=0").status == 400


def test_appends_one_or_many_with_keys_are_stored_once_and_read_back_in_order(server):
    _created(server, "a")
    _created(server, "batch")
    one = _append(server, "a", {"role": "user", "content": "hi"}, headers={"Idempotency-Key": "m1"})
    assert one.status == 201 and [m["seq"] for m in one.body["messages"]] == [1]
    replay = _append(server, "a", {"role": "user", "content": "hi"}, headers={"Idempotency-Key": "m1"})
    assert replay.status == 200 and replay.body["messages"] == one.body["messages"]
    batch = [{"role": "assistant", "content": "hello", "key": "m2"}, {"role": "user", "content": "bye", "key": "m3"}]
    assert _append(server, "a", batch).status == 201
    assert _append(server, "a", batch).status == 200  # every one already stored
    # a batch under Idempotency-Key K: message i is keyed K:i, a message's own key wins
    keyed = [{"role": "user", "content": "b1"}, {"role": "assistant", "content": "b2", "key": "own"}]
    first = _append(server, "batch", keyed, headers={"Idempotency-Key": "K"})
    assert first.status == 201 and [m["key"] for m in first.body["messages"]] == ["K:1", "own"]
    assert _append(server, "batch", keyed, headers={"Idempotency-Key": "K"}).body == first.body
    plain = _append(server, "a", {"role": "assistant", "content": "no key"})
    assert plain.status == 201
    read = server.call("GET", "/v1/sessions/a/messages").body["messages"]
    assert [(m["seq"], m["content"], m.get("key")) for m in read] == [
        (1, "hi", "m1"),
        (2, "hello", "m2"),
        (3, "bye", "m3"),
        (4, "no key", None),
    ]
    assert [m["seq"] for m in server.call("GET", "/v1/sessions/a/messages?limit=2").body["messages"]] == [3, 4]


def test_bad_input_gets_a_typed_error_and_writes_nothing(server):
    _created(server, "b")
    cases = [
        ({"role": "nobody", "content": "x"}, None, 400, "InvalidMessageError"),
        ([], None, 400, "InvalidMessageError"),
        ([{"role": "user", "content": "x"}], {"Idempotency-Key": "k" * 199}, 400, "InvalidMessageError"),  # k...:1
        ({"role": "user", "content": "x"}, {"Idempotency-Key": "k" * 201}, 400, "InvalidMessageError"),
        ({"role": "user", "content": "x", "key": " padded "}, None, 400, "InvalidMessageError"),
    ]
    for body, headers, status, kind in cases:
        answer = _append(server, "b", body, headers=headers)
        assert (answer.status, answer.body["error"]) == (status, kind), (body, answer.body)
    unparseable = _append(server, "b", None, raw=b"{not json")
    assert (unparseable.status, unparseable.body["error"]) == (422, "UnparseableBody")
    missing = _append(server, "nobody-here", {"role": "user", "content": "x"})
    assert (missing.status, missing.body["error"]) == (404, "SessionNotFoundError")
    assert server.call("GET", "/v1/sessions/b/messages").body["messages"] == []
    assert server.call("GET", "/v1/sessions/nobody-here").status == 404  # and no session was created


def test_a_turn_keeps_its_appends_together_and_holds_the_others_until_it_closes(server):
    _created(server, "t")
    turn = server.call("POST", "/v1/sessions/t/turns", {"on_busy": "enqueue"})
    assert turn.status == 201
    tid = turn.body["turn"]
    assert server.call("POST", f"/v1/sessions/t/messages?turn={tid}", {"role": "user", "content": "ask"}).status == 201
    held: list = []
    outside = threading.Thread(
        target=lambda: held.append(_append(server, "t", {"role": "user", "content": "double text"}))
    )
    outside.start()
    # the turn's own appends go in while the other one waits (it is answered only after the close)
    assert (
        server.call("POST", f"/v1/sessions/t/messages?turn={tid}", {"role": "assistant", "content": "answer"}).status
        == 201
    )
    assert not held
    assert server.call("GET", f"/v1/sessions/t/turns/{tid}").body["interrupted"] is False
    assert server.call("DELETE", f"/v1/sessions/t/turns/{tid}").status == 200
    outside.join(30)
    assert held and held[0].status == 201
    contents = [m["content"] for m in server.call("GET", "/v1/sessions/t/messages").body["messages"]]
    assert contents == ["ask", "answer", "double text"]
    again = server.call("DELETE", f"/v1/sessions/t/turns/{tid}")  # closed already: its lease is gone
    assert (again.status, again.body["error"]) == (409, "TurnLostError")
    unknown = server.call("DELETE", f"/v1/sessions/t/turns/{tid[:-4]}AAAA")  # no server minted it
    assert (unknown.status, unknown.body["error"]) == (404, "TurnNotFound")


def test_reject_answers_409_while_another_turn_is_open(server):
    _created(server, "r")
    tid = server.call("POST", "/v1/sessions/r/turns", {}).body["turn"]
    busy = server.call("POST", "/v1/sessions/r/turns", {"on_busy": "reject"})
    assert (busy.status, busy.body["error"]) == (409, "SessionBusyError")
    assert server.call("POST", "/v1/sessions/r/turns", {"on_busy": "sometimes"}).status == 400
    assert server.call("DELETE", f"/v1/sessions/r/turns/{tid}").status == 200


def test_compact_rotates_and_the_records_lineage_and_archive_show_it(server):
    _created(server, "c")
    for i in range(12):
        _append(server, "c", {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20})
    outcome = server.call("POST", "/v1/sessions/c/compact", {"force": True, "mode": "rotate"})
    assert outcome.status == 200 and outcome.body["status"] == "rotated", outcome.body
    child = outcome.body["session_id"]
    assert child != "c" and outcome.body["previous_session_id"] == "c"
    records = server.call("GET", "/v1/sessions/c/compactions").body["compactions"]
    assert len(records) == 1 and records[0]["child_session_id"] == child
    lineage = server.call("GET", f"/v1/sessions/{child}/lineage").body
    assert lineage["root"] == "c" and lineage["live_id"] == child and not lineage["forked"]
    assert [s["id"] for s in lineage["sessions"]] == ["c", child]
    assert server.call("GET", "/v1/sessions/c").body["live_id"] == child
    # appends to the root id follow the lineage to the live session
    assert _append(server, "c", {"role": "user", "content": "after"}).body["messages"][0]["session_id"] == child
    archived = server.call("GET", "/v1/sessions/c/messages?archived=true").body["messages"]
    assert archived and {m["state"] for m in archived} == {"compacted"} and {m["session_id"] for m in archived} == {"c"}
    bad = server.call("POST", "/v1/sessions/c/compact", {"mode": "sideways"})
    assert (bad.status, bad.body["error"]) == (400, "InvalidArgumentError")


def test_retract_interrupt_and_erase(server):
    _created(server, "e")
    _append(server, "e", {"role": "user", "content": "oops"})
    taken = server.call("POST", "/v1/sessions/e/retract").body["retracted"]
    assert taken["content"] == "oops"
    assert server.call("POST", "/v1/sessions/e/retract").body["retracted"] is None
    assert server.call("POST", "/v1/sessions/e/interrupt").body == {"cancelled": False}
    assert server.call("DELETE", "/v1/sessions/e", as_="bot").status == 403  # erasure is admin's
    assert server.call("DELETE", "/v1/sessions/e").body == {"erased_messages": 1}
    assert server.call("GET", "/v1/sessions/e").status == 404
    assert _append(server, "e", {"role": "user", "content": "x"}).status == 404


def test_the_event_stream_sends_one_compaction_event_per_outcome(server):
    _created(server, "ev")
    for i in range(8):
        _append(server, "ev", {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i} " * 30})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", "/v1/events", headers={"Authorization": f"Bearer {server.tokens['reader']}"})
    stream = conn.getresponse()
    assert stream.status == 200 and stream.getheader("content-type").startswith("text/event-stream")
    assert stream.readline() == b": subscribed\n"  # the subscription is in place before the compaction
    outcome = server.call("POST", "/v1/sessions/ev/compact", {"force": True}).body
    lines = []
    while not lines or lines[-1] != b"\n" or not any(line.startswith(b"data:") for line in lines):
        lines.append(stream.readline())
    conn.close()
    fields = dict(
        line.decode().rstrip("\n").split(": ", 1) for line in lines if line.strip() and not line.startswith(b":")
    )
    assert fields["event"] == "compaction" and fields["id"]
    data = json.loads(fields["data"])
    assert (data["status"], data["session_id"]) == (outcome["status"], outcome["session_id"])


def test_health_readiness_metrics_and_the_schema(server):
    assert call(server.port, "GET", "/healthz").body == {"status": "ok"}
    assert call(server.port, "GET", "/readyz").body == {"status": "ready"}
    assert call(server.port, "GET", "/metrics").status == 401
    _created(server, "m")
    for role in ("reader", "bot", "discord"):  # the counters of every source: admin's alone
        refused = server.call("GET", "/metrics", as_=role)
        assert (refused.status, refused.body["error"]) == (403, "Forbidden"), role
    metrics = server.call("GET", "/metrics")
    assert metrics.status == 200
    assert (
        "session_actors_resident " in metrics.body
        and 'session_actors_http_responses_total{status="201"}' in metrics.body
    )
    schema = call(server.port, "GET", "/openapi.json").body
    for path in ("/v1/sessions", "/v1/sessions/{session_id}/messages", "/v1/sessions/{session_id}/turns", "/v1/events"):
        assert path in schema["paths"], path
    assert call(server.port, "GET", "/docs").status == 404  # no page that loads assets from a CDN


def test_usage_sums_what_the_messages_recorded_per_model(server):
    _created(server, "u:1", source="web")
    _created(server, "u:2", source="cli")
    recorded = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "usage": {"input_tokens": 100, "output_tokens": 7, "model": "m1"}},
        {"role": "assistant", "content": "b", "usage": {"input_tokens": 50, "output_tokens": 3, "model": "m2"}},
    ]
    assert _append(server, "u:1", recorded).status == 201
    assert _append(server, "u:2", recorded[1]).status == 201
    one = server.call("GET", "/v1/usage?session_id=u:1").body
    assert (one["session_id"], one["usage"]["input_tokens"], one["usage"]["total_tokens"]) == ("u:1", 150, 160)
    assert one["usage"]["by_model"]["m1"] == {"input_tokens": 100, "output_tokens": 7, "model": "m1"}
    assert server.call("GET", "/v1/usage?source=cli").body["usage"]["input_tokens"] == 100
    assert server.call("GET", "/v1/usage").body["usage"]["input_tokens"] == 250
    assert server.call("GET", "/v1/usage?session_id=nope").status == 404


def test_search_finds_a_message_two_compactions_kept_once_at_its_live_copy(server):
    live_id = compacted_twice(server, "walk")
    hits = server.call("GET", "/v1/search?q=sintra").body["hits"]
    assert [(h["session_id"], h["archived"]) for h in hits] == [(live_id, False)], hits
    transcript = server.call("GET", f"/v1/sessions/{live_id}/messages").body["messages"]
    assert transcript[hits[0]["seq"] - transcript[0]["seq"]]["content"] == "Plan a walk in Sintra"


def test_search_finds_live_and_archived_text_and_a_compaction_shows_what_it_did(server):
    _created(server, "trip", source="web")
    texts = ["Book the Hotel Miradouro", "Booked Miradouro, two nights", *(f"filler {n}" for n in range(12))]
    for n, text in enumerate(texts):
        assert _append(server, "trip", {"role": "user" if n % 2 == 0 else "assistant", "content": text}).status == 201
    outcome = server.call("POST", "/v1/sessions/trip/compact", {"force": True, "mode": "rotate"}).body
    assert outcome["status"] == "rotated", outcome
    found = server.call("GET", "/v1/search?q=miradouro")
    assert found.status == 200 and found.body["query"] == "miradouro"
    hits = {(h["session_id"], h["seq"], h["archived"]) for h in found.body["hits"]}
    assert ("trip", 2, True) in hits  # the answer was summarized away; the head's copy is live
    assert all("[Miradouro]" in h["snippet"] for h in found.body["hits"] if h["session_id"] == "trip")
    live_only = server.call("GET", "/v1/search?q=miradouro&archived=false&session_id=trip").body["hits"]
    assert all(not h["archived"] and h["session_id"] == outcome["session_id"] for h in live_only)
    assert server.call("GET", "/v1/search?q=miradouro&limit=1").body["hits"][0] == found.body["hits"][0]

    [record] = server.call("GET", "/v1/sessions/trip/compactions").body["compactions"]
    detail = server.call("GET", f"/v1/compactions/{record['id']}")
    assert detail.status == 200 and detail.body["complete"] is True
    assert detail.body["compaction"]["id"] == record["id"]
    assert [m["seq"] for m in detail.body["replaced"]] == [m["seq"] for m in detail.body["replaced"]]
    replaced = [m["content"] for m in detail.body["replaced"]]
    assert "Booked Miradouro, two nights" in replaced
    written = [m["session_id"] for m in detail.body["summary"] + detail.body["carried"]]
    assert written and set(written) == {outcome["session_id"]}

    for path, status, error in [
        ("/v1/search", 400, "InvalidArgumentError"),
        ("/v1/search?q=%21%21", 400, "InvalidArgumentError"),
        ("/v1/search?q=a&limit=0", 400, "InvalidArgumentError"),
        ("/v1/search?q=a&session_id=nope", 404, "SessionNotFoundError"),
        ("/v1/compactions/999999", 404, "CompactionNotFoundError"),
        ("/v1/compactions/0", 400, "InvalidArgumentError"),
    ]:
        answer = server.call("GET", path)
        assert (answer.status, answer.body["error"]) == (status, error), (path, answer.body)

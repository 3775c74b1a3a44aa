"""A scripted flow against the live server with the pydantic models datamodel-code-generator
made from /openapi.json: ``python -m tests.serve.openapi_clients.flow MODELS.py PORT TOKEN``.
Request bodies are built and checked by the generated ``Message``, ``SessionCreate``,
``TurnOpen`` and ``CompactRequest`` models, and every answer is parsed by its model."""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any
from urllib.parse import quote

from ..client import call


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("session_actors_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' forward references through it
    spec.loader.exec_module(module)
    return module


def main() -> None:
    models, port, token = _load(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    base = f"/v1/sessions/{quote('py/flow', safe='')}"

    def send(method: str, path: str, body: Any = None, **headers: str) -> Any:
        data = None if body is None else json.loads(body.model_dump_json(exclude_none=True))
        return call(port, method, path, data, token=token, headers=headers or None)

    created = send("PUT", base, models.SessionCreate(source="py", metadata={"team": "ops"}))
    assert created.status == 201 and models.SessionInfo.model_validate(created.body).id == "py/flow", created.body
    ask = models.Message(role=models.Role.user, content="hello from Python")
    first = send("POST", f"{base}/messages", ask, **{"Idempotency-Key": "py-1"})
    again = send("POST", f"{base}/messages", ask, **{"Idempotency-Key": "py-1"})
    assert (first.status, again.status) == (201, 200), (first.body, again.body)
    assert models.Messages.model_validate(again.body).messages[0].key == "py-1"
    opened = send("POST", f"{base}/turns", models.TurnOpen(on_busy="reject"))
    turn = models.Turn.model_validate(opened.body)
    assert opened.status == 201 and turn.turn, opened.body
    reply = models.Message(role=models.Role.assistant, content="hi")
    assert send("POST", f"{base}/messages?turn={turn.turn}", reply).status == 201
    assert send("DELETE", f"{base}/turns/{turn.turn}").status == 200
    outcome = send("POST", f"{base}/compact", models.CompactRequest(force=True))
    assert outcome.status == 200, outcome.body
    models.Outcome.model_validate(outcome.body)
    live = models.Messages.model_validate(send("GET", f"{base}/messages").body)
    assert any(m.content == "hi" or getattr(m.content, "root", None) == "hi" for m in live.messages), live
    sys.stdout.write(json.dumps({"messages": len(live.messages)}) + "\n")


if __name__ == "__main__":
    main()

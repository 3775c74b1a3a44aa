"""A client process of the kill -9 test: ``python -m tests.serve.chaos_client PORT TOKEN
NAME SESSIONS APPENDS``. It appends APPENDS messages to each of its SESSIONS sessions
(round robin), each with its own ``Idempotency-Key``, and retries every one (a
refused connection, a cut answer, a 503) until it is acknowledged, whatever happens
to the server meanwhile. Prints one JSON line: the acknowledgements (``[session, key,
seq, id]``), the failed attempts, and the longest error window (seconds from a
message's first failed attempt to its acknowledgement)."""

from __future__ import annotations

import http.client
import json
import sys
import time

from .client import call

#: Give up on one message after this long (the test fails: a message never acknowledged).
PATIENCE_S = 120.0
#: A request the server does not answer within this is retried (a killed server's socket).
REQUEST_TIMEOUT_S = 10.0
RETRY_PAUSE_S = 0.02


def _until_acknowledged(port: int, token: str, method: str, path: str, body: dict, key: str | None) -> tuple:
    first_failure: float | None = None
    failures = 0
    began = time.monotonic()
    while time.monotonic() - began < PATIENCE_S:
        try:
            headers = {"Idempotency-Key": key} if key else None
            answer = call(port, method, path, body, token=token, headers=headers, timeout=REQUEST_TIMEOUT_S)
        except (OSError, http.client.HTTPException):
            answer = None
        if answer is not None and answer.status in (200, 201):
            window = 0.0 if first_failure is None else time.monotonic() - first_failure
            return answer.body, failures, window
        if answer is not None and answer.status != 503:
            raise AssertionError(f"{method} {path}: {answer.status} {answer.body}")
        failures += 1
        first_failure = first_failure if first_failure is not None else time.monotonic()
        time.sleep(RETRY_PAUSE_S)  # a refused connection answers at once: do not spin
    raise AssertionError(f"{method} {path} ({key}): never acknowledged within {PATIENCE_S}s")


def main() -> None:
    port, token, name = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    sessions, appends = int(sys.argv[4]), int(sys.argv[5])
    sids = [f"{name}/{n}" for n in range(sessions)]
    acks: list[list] = []
    failures, longest = 0, 0.0
    for sid in sids:
        _, failed, window = _until_acknowledged(port, token, "PUT", f"/v1/sessions/{sid}", {"source": "chaos"}, None)
        failures, longest = failures + failed, max(longest, window)
    for i in range(appends):
        for sid in sids:
            key = f"{sid.replace('/', '.')}.{i}"
            message = {"role": "user" if i % 2 == 0 else "assistant", "content": f"{sid} #{i}"}
            body, failed, window = _until_acknowledged(
                port, token, "POST", f"/v1/sessions/{sid}/messages", message, key
            )
            stored = body["messages"][0]
            acks.append([sid, stored["key"], stored["seq"], stored["id"]])
            failures, longest = failures + failed, max(longest, window)
    sys.stdout.write(json.dumps({"acks": acks, "failures": failures, "longest_window_s": longest}) + "\n")


if __name__ == "__main__":
    main()

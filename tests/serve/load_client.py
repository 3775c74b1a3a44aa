"""A gateway in another process: ``python -m tests.serve.load_client PORT TOKEN SESSIONS
APPENDS THREADS``. Each session's appends go in order, each with its own key; every
third one first loses its acknowledgement (the request is sent, the connection
dropped before the answer) and is then retried with the same key until it is
acknowledged. Prints one JSON line: the acknowledgements it got, per session."""

from __future__ import annotations

import json
import socket
import sys
from concurrent.futures import ThreadPoolExecutor

from .client import call


def _lose_ack(port: int, token: str, sid: str, body: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = (
            f"POST /v1/sessions/{sid}/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)


def _session(port: int, token: str, sid: str, appends: int) -> list[list]:
    assert call(port, "PUT", f"/v1/sessions/{sid}", {"source": "load"}, token=token).status in (200, 201)
    acks = []
    for i in range(appends):
        message = {"role": "user" if i % 2 == 0 else "assistant", "content": f"{sid} #{i}", "key": f"{sid}-{i}"}
        if i % 3 == 0:
            _lose_ack(port, token, sid, json.dumps(message).encode())
        for _attempt in range(50):
            answer = call(port, "POST", f"/v1/sessions/{sid}/messages", message, token=token)
            if answer.status in (200, 201):
                stored = answer.body["messages"][0]
                acks.append([stored["key"], stored["seq"], stored["id"]])
                break
            if answer.status != 503:
                raise AssertionError(f"{sid} #{i}: {answer.status} {answer.body}")
        else:
            raise AssertionError(f"{sid} #{i}: never acknowledged")
    return acks


def main() -> None:
    port, token, sessions, appends, threads = int(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:6])
    with ThreadPoolExecutor(threads) as pool:
        futures = {f"load:{n}": pool.submit(_session, port, token, f"load:{n}", appends) for n in range(sessions)}
        acks = {sid: future.result() for sid, future in futures.items()}
    sys.stdout.write(json.dumps(acks) + "\n")


if __name__ == "__main__":
    main()

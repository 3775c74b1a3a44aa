"""The gateway pattern end to end: exactly-once turns under redelivery.

A chat gateway runs several worker processes. Each handles platform events for
shared sessions (one per channel, ``chat:{channel}``) with the OpenAI Agents SDK's
``Runner.run`` against a real chat-completions server (`tests.llm_server`, behaviour
``"converse"``), through `on_event`: exactly the documented pattern, a turn keyed by
the platform's message id. The platform (this process) routes every event to a
random worker, one event at a time per channel (the next once the previous is
acknowledged), and REDELIVERS some events to a different worker: at once (both in
flight: the second waits for the first's turn, then replays it) or after the first
acknowledgement (the channel's next event may be in flight). Workers also compact
the sessions: the platform asks a random worker to rotate a channel's session now
and then (``compress(force=True, mode="rotate")``, `HeadTailCompressor`), and the
policy compacts in place past ``max_tokens``. Some asks hold `TOOL_MARKER`: the model
calls the agent's one tool first, so a turn is ask, tool call, tool result, answer.

Afterwards `count` reads the server's requests and the database (the public store
API) and reports `Figures`; `Figures.violations` must all be 0:

- ``double_answers``: events whose ask the model answered more than once (final
  answers the server gave, per event);
- ``duplicate_asks_live``: events whose ask is in the live transcript more than once;
  ``duplicate_asks_stored``: events whose ask was appended more than once (the rows
  of the whole lineage less those compactions wrote, `Store.compaction_detail`);
  ``answers_stored_twice``: the same for final answers;
- ``without_history``: model requests of a channel's later event that carried neither
  the previous event's ask nor a compaction summary;
- ``lost``: acknowledged answers no longer in the conversation: in the lineage
  (every session's transcript and archive) neither live at the tip, nor summarized
  by a compaction, nor carried by one (a superseded row whose copy is kept);
  ``differing_answers``: events whose deliveries were acknowledged with different
  answers; ``unanswered``: events never acknowledged;
- ``split_turns``: events whose rows are not contiguous, among the appended rows of
  each session in seq order or in the live transcript;
- ``errors``: deliveries a worker failed.

``python -m tests.actors.integrations.gateway_workload --backend sqlite|postgres
--turns N --workers W`` runs it at any size and prints the figures (``--without-key``:
the same gateway with an unkeyed turn, which answers redelivered events twice;
``SESSION_ACTORS_GATEWAY_LOG=1``: the workers log the library's INFO on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import logging
import os
import random
import re
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from persistence import open_store
from protocol import SUMMARY_PREFIX, StoredMessage
from tests.llm_server import TOOL_MARKER, converse_reply, running_llm_server

__all__ = [
    "Event",
    "Figures",
    "Workload",
    "answer_of",
    "count",
    "on_event",
    "on_event_without_key",
    "plan",
    "run_workload",
]

_ROOT = str(Path(__file__).resolve().parents[3])
SESSION_PREFIX = "chat:"
_EVENT_ID = re.compile(r"evt-\d{5}")


# -- the gateway (what each worker process runs) ----------------------------------------------


def answer_of(messages: Sequence[StoredMessage]) -> str:
    """The answer of a completed turn: its last assistant message that calls no tool."""
    for message in reversed(messages):
        if message.role == "assistant" and not message.tool_calls:
            return message.text
    raise LookupError("the turn holds no answer")


async def on_event(registry: Any, agent: Any, event_id: str, channel_id: str, text: str) -> str:
    """The documented gateway pattern: one turn per platform message, keyed by its id."""
    from agents import Runner

    from actors.integrations.openai_agents import AgentsSession

    session = AgentsSession(registry, f"chat:{channel_id}")
    async with session.turn(key=event_id) as turn:  # the platform's message id
        if turn.replayed:  # this event was answered already
            return answer_of(turn.messages)  # the stored answer, nothing runs again
        result = await Runner.run(agent, text, session=session)
        return result.final_output


async def on_event_without_key(registry: Any, agent: Any, event_id: str, channel_id: str, text: str) -> str:
    """The same gateway with an unkeyed turn: a redelivered event runs again."""
    from agents import Runner

    from actors.integrations.openai_agents import AgentsSession

    session = AgentsSession(registry, f"chat:{channel_id}")
    async with session.turn():
        result = await Runner.run(agent, text, session=session)
        return result.final_output


def _emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


async def _serve(url: str, base_url: str, name: str, *, keyed: bool, keep_last: int, max_tokens: int | None) -> None:
    """A worker: one task per line read from stdin, one line on stdout per answer."""
    from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    from actors import CompactionPolicy, HeadTailCompressor, SessionRegistry

    set_tracing_disabled(True)
    if os.environ.get("SESSION_ACTORS_GATEWAY_LOG"):  # the library's own account, on stderr
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"{name} %(name)s: %(message)s")

    @function_tool
    def lookup(topic: str) -> str:
        """Look a topic up."""
        return f"found for «{topic}»"

    client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    agent = Agent(
        name="gateway",
        instructions="Answer the chat.",
        model=OpenAIChatCompletionsModel(model="fake-gateway", openai_client=client),
        tools=[lookup],
    )
    handler = on_event if keyed else on_event_without_key
    policy = CompactionPolicy(max_tokens=max_tokens, keep_last=keep_last, cooldown_s=0, lease_ttl_s=10)
    store = open_store(url)
    registry = SessionRegistry(store, compressor=HeadTailCompressor(keep_last), policy=policy, holder=name)

    async def handle(op: dict[str, Any]) -> dict[str, Any]:
        if op["op"] == "event":
            answer = await handler(registry, agent, op["event"], op["channel"], op["text"])
            return {"answer": answer}
        handle = await registry.session_async(SESSION_PREFIX + op["channel"])
        outcome = await handle.compress_async(force=True, mode="rotate")
        return {"status": outcome.status.value}

    async def answer(op: dict[str, Any]) -> None:
        try:
            reply = {"delivery": op["delivery"], "ok": True, **await handle(op)}
        except Exception as exc:  # reported to the platform, which counts it
            reply = {"delivery": op["delivery"], "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        _emit(reply)

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: set[asyncio.Task[None]] = set()
    try:
        _emit({"ready": name})
        while line := await reader.readline():
            op = json.loads(line)
            if op["op"] == "stop":
                break
            task = asyncio.create_task(answer(op))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
    finally:
        transport.close()
        registry.close()
        store.close()
        await client.close()
    _emit({"bye": name})


# -- the platform (this process) -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    turns: int = 40
    workers: int = 3
    channels: int = 4
    redeliver: float = 0.2  # share of events delivered twice
    compact: float = 0.15  # chance, after each acknowledged event, of a rotation of its channel
    tool_share: float = 0.35  # share of asks that make the model call the tool
    keep_last: int = 4
    max_tokens: int | None = 600  # in-place compaction past this (None: only the rotations)
    keyed: bool = True
    seed: int = 7
    deadline_s: float = 150.0

    def __post_init__(self) -> None:
        if self.workers < 2 or self.channels < 1 or self.turns < 1:
            raise ValueError("a gateway needs 2 workers or more, a channel and a turn")


@dataclass(frozen=True, slots=True)
class Event:
    id: str
    channel: str
    text: str
    position: int  # in its channel: 0 is the channel's first event
    redelivery: str | None  # None, "concurrent" (both in flight) or "late" (after the first ack)


def plan(workload: Workload) -> list[Event]:
    """The platform's events, in the order each channel receives them (seeded)."""
    rng = random.Random(workload.seed)
    positions: collections.Counter[str] = collections.Counter()
    events = []
    for n in range(workload.turns):
        channel = f"ch-{rng.randrange(workload.channels)}"
        event_id = f"evt-{n:05d}"
        tool = f" {TOOL_MARKER}" if rng.random() < workload.tool_share else ""
        redelivery = rng.choice(("concurrent", "late")) if rng.random() < workload.redeliver else None
        events.append(
            Event(event_id, channel, f"{event_id} in {channel}: question {n}{tool}", positions[channel], redelivery)
        )
        positions[channel] += 1
    return events


@dataclass(slots=True)
class Ledger:
    """What the platform sent and what it was answered."""

    acks: dict[str, list[str]] = field(default_factory=dict)  # event id -> answers acknowledged
    deliveries: int = 0
    redeliveries: collections.Counter[str] = field(default_factory=collections.Counter)  # by timing
    retries: int = 0  # deliveries after a failed one
    errors: list[str] = field(default_factory=list)
    compactions: collections.Counter[str] = field(default_factory=collections.Counter)  # outcome status
    unanswered: list[str] = field(default_factory=list)


class _Worker:
    def __init__(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.proc = proc
        self.buffer = b""

    def send(self, payload: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(payload) + "\n").encode())
        self.proc.stdin.flush()


class Platform:
    """Routes the events to random workers, redelivers some, asks for rotations."""

    MAX_ATTEMPTS = 3  # deliveries of an event that fail before the platform gives up on it

    def __init__(self, workload: Workload, url: str, base_url: str, events: list[Event]) -> None:
        self.workload = workload
        self.url = url
        self.base_url = base_url
        self.rng = random.Random(workload.seed + 1)
        self.by_channel: dict[str, list[Event]] = collections.defaultdict(list)
        for event in events:
            self.by_channel[event.channel].append(event)
        self.events = events
        self.ledger = Ledger()
        self.pending: dict[int, tuple[str, Event | None, int]] = {}  # delivery -> (op, event, worker)
        self.failures: collections.Counter[str] = collections.Counter()
        self.settled: set[str] = set()  # acknowledged or given up
        self.workers: list[_Worker] = []
        self._numbers = iter(range(1, 1 << 62))

    # -- running ----------------------------------------------------------------------------

    def run(self) -> Ledger:
        deadline = time.monotonic() + self.workload.deadline_s
        with self._spawned() as selector:
            self._wait_for(selector, deadline, lambda line, w: "ready" in line, len(self.workers))
            for events in self.by_channel.values():
                self._deliver_first(events[0])
            while self.pending:
                for line, worker in self._lines(selector, deadline):
                    self._answered(line, worker)
            for worker in self.workers:
                worker.send({"op": "stop"})
            self._wait_for(selector, deadline, lambda line, w: "bye" in line, len(self.workers))
            for worker in self.workers:
                worker.proc.wait(max(1.0, deadline - time.monotonic()))
        self.ledger.unanswered = sorted(e.id for e in self.events if e.id not in self.ledger.acks)
        return self.ledger

    @contextmanager
    def _spawned(self) -> Iterator[selectors.BaseSelector]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_ROOT, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
        command = [
            sys.executable,
            "-m",
            "tests.actors.integrations.gateway_workload",
            "worker",
            self.url,
            self.base_url,
        ]
        options = ["--keep-last", str(self.workload.keep_last)]
        if self.workload.max_tokens is not None:
            options += ["--max-tokens", str(self.workload.max_tokens)]
        if not self.workload.keyed:
            options.append("--without-key")
        selector = selectors.DefaultSelector()
        try:
            for n in range(self.workload.workers):
                name = f"gateway-{n}"
                proc = subprocess.Popen(
                    [*command, name, *options], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_ROOT, env=env
                )
                worker = _Worker(name, proc)
                self.workers.append(worker)
                assert proc.stdout is not None
                os.set_blocking(proc.stdout.fileno(), False)
                selector.register(proc.stdout, selectors.EVENT_READ, worker)
            yield selector
        finally:
            selector.close()
            for worker in self.workers:
                if worker.proc.poll() is None:
                    worker.proc.kill()
                worker.proc.wait(30)
                for stream in (worker.proc.stdin, worker.proc.stdout):
                    if stream is not None:
                        try:
                            stream.close()
                        except BrokenPipeError:
                            pass

    def _wait_for(self, selector: selectors.BaseSelector, deadline: float, wanted: Any, count: int) -> None:
        seen = 0
        while seen < count:
            for line, worker in self._lines(selector, deadline):
                if not wanted(line, worker):
                    raise RuntimeError(f"{worker.name} said {line!r} out of turn")
                seen += 1

    def _lines(self, selector: selectors.BaseSelector, deadline: float) -> Iterator[tuple[dict[str, Any], _Worker]]:
        """The next lines any worker wrote (waits for at least one, until ``deadline``)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"the workload missed its deadline; outstanding deliveries: {self._outstanding()}")
        for key, _ in selector.select(remaining):
            worker: _Worker = key.data
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                selector.unregister(key.fileobj)
                raise RuntimeError(f"{worker.name} exited (status {worker.proc.wait(30)})")
            worker.buffer += chunk
            *lines, worker.buffer = worker.buffer.split(b"\n")
            for line in lines:
                yield json.loads(line), worker

    def _outstanding(self) -> list[str]:
        return [f"{op} {event.id if event else ''} at {self.workers[w].name}" for op, event, w in self.pending.values()]

    # -- routing ----------------------------------------------------------------------------

    def _send(self, op: str, worker: int, event: Event | None, channel: str) -> None:
        delivery = next(self._numbers)
        self.pending[delivery] = (op, event, worker)
        payload: dict[str, Any] = {"op": op, "delivery": delivery, "channel": channel}
        if event is not None:
            payload |= {"event": event.id, "text": event.text}
            self.ledger.deliveries += 1
        self.workers[worker].send(payload)

    def _other_than(self, worker: int) -> int:
        return (worker + 1 + self.rng.randrange(self.workload.workers - 1)) % self.workload.workers

    def _deliver_first(self, event: Event) -> None:
        worker = self.rng.randrange(self.workload.workers)
        self._send("event", worker, event, event.channel)
        if event.redelivery == "concurrent":
            self._redeliver(event, worker)

    def _redeliver(self, event: Event, first: int) -> None:
        self.ledger.redeliveries[event.redelivery or ""] += 1
        self._send("event", self._other_than(first), event, event.channel)

    def _answered(self, line: dict[str, Any], worker: _Worker) -> None:
        op, event, at = self.pending.pop(line["delivery"])
        if op == "compact":
            self.ledger.compactions[line["status"] if line["ok"] else "error"] += 1
            if not line["ok"]:
                self.ledger.errors.append(f"compact at {worker.name}: {line['error']}")
            return
        assert event is not None
        if not line["ok"]:
            self.ledger.errors.append(f"{event.id} at {worker.name}: {line['error']}")
            self.failures[event.id] += 1
            if event.id not in self.settled and not any(e is event for _, e, _ in self.pending.values()):
                if self.failures[event.id] < self.MAX_ATTEMPTS:  # the platform delivers it again
                    self.ledger.retries += 1
                    self._send("event", self._other_than(at), event, event.channel)
                else:
                    self._settle(event, at)
            return
        self.ledger.acks.setdefault(event.id, []).append(line["answer"])
        if event.id not in self.settled:
            self._settle(event, at)

    def _settle(self, event: Event, at: int) -> None:
        """The event is acknowledged (or given up): its channel's next one goes out."""
        self.settled.add(event.id)
        if event.redelivery == "late":
            self._redeliver(event, at)
        following = self.by_channel[event.channel]
        if event.position + 1 < len(following):
            self._deliver_first(following[event.position + 1])
        if self.rng.random() < self.workload.compact:
            self._send("compact", self.rng.randrange(self.workload.workers), None, event.channel)


# -- the figures -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Figures:
    backend: str = ""
    turns: int = 0
    workers: int = 0
    channels: int = 0
    deliveries: int = 0
    redeliveries: int = 0
    concurrent_redeliveries: int = 0
    replays: int = 0  # deliveries acknowledged without a run of the model
    llm_requests: int = 0
    tool_turns: int = 0
    rotations: int = 0  # rotate requests that committed
    compactions: int = 0  # committed compactions in the store (rotations and in place)
    seconds: float = 0.0
    double_answers: int = 0
    duplicate_asks_live: int = 0
    duplicate_asks_stored: int = 0
    answers_stored_twice: int = 0
    differing_answers: int = 0
    without_history: int = 0
    lost: int = 0
    split_turns: int = 0
    unanswered: int = 0
    errors: int = 0
    examples: list[str] = field(default_factory=list)

    VIOLATIONS = (
        "double_answers",
        "duplicate_asks_live",
        "duplicate_asks_stored",
        "answers_stored_twice",
        "differing_answers",
        "without_history",
        "lost",
        "split_turns",
        "unanswered",
        "errors",
    )

    def violations(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.VIOLATIONS}

    def line(self) -> str:
        shown = {k: v for k, v in asdict(self).items() if k not in ("examples", "backend")}
        shown["seconds"] = round(self.seconds, 1)
        return f"gateway[{self.backend}] " + " ".join(f"{k}={v}" for k, v in shown.items())


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _event_of_row(row: StoredMessage) -> str | None:
    """The event a stored row belongs to (None for a compaction summary)."""
    if row.meta.get("compaction") or row.text.startswith(SUMMARY_PREFIX):
        return None
    found = _EVENT_ID.search(row.text + (json.dumps(row.tool_calls) if row.tool_calls else ""))
    return found.group() if found else None


def _is_summary(message: dict[str, Any]) -> bool:
    return _text(message.get("content")).startswith(SUMMARY_PREFIX)


def _count_requests(figures: Figures, previous: dict[str, Event], requests: list[dict]) -> int:
    """Count the model's work per event; the number of runs (requests made for an ask)."""
    runs: collections.Counter[str] = collections.Counter()
    answers: collections.Counter[str] = collections.Counter()
    for request in requests:
        messages = request.get("messages") or []
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users:
            figures.examples.append(f"a model request without a user ask: {messages!r:.200}")
            continue
        found = _EVENT_ID.findall(_text(messages[users[-1]].get("content")))
        if not found:
            figures.examples.append(f"a model request for no event: {messages!r:.200}")
            continue
        event_id = found[-1]
        figures.llm_requests += 1
        if users[-1] == len(messages) - 1:
            runs[event_id] += 1
        reply = converse_reply(request, 0)["choices"][0]["message"]
        if reply.get("tool_calls"):
            figures.tool_turns += 1
        else:
            answers[event_id] += 1
        before = previous.get(event_id)
        if before is not None:
            history = messages[: users[-1]]
            if not any(before.text in _text(m.get("content")) or _is_summary(m) for m in history):
                figures.without_history += 1
                if len(figures.examples) < 20:
                    figures.examples.append(f"{event_id} asked without {before.id} nor a summary")
    figures.double_answers = sum(1 for n in answers.values() if n > 1)
    figures.examples += [f"{e} answered {n} times" for e, n in answers.items() if n > 1][:5]
    return sum(runs.values())


def _lineage(store: Any, root: str) -> list[str]:
    sessions, pending = [], [root]
    while pending:
        sid = pending.pop()
        if sid not in sessions:
            sessions.append(sid)
            pending += [child.id for child in store.children(sid)]
    return sessions


def _split(rows: Sequence[StoredMessage]) -> set[str]:
    """Events whose rows are not contiguous in ``rows`` (in order)."""
    positions: dict[str, list[int]] = collections.defaultdict(list)
    for index, row in enumerate(rows):
        event_id = _event_of_row(row)
        if event_id is not None:
            positions[event_id].append(index)
    return {e for e, found in positions.items() if found[-1] - found[0] != len(found) - 1}


def _accounted(row: StoredMessage, tip: str, copies: dict[int, list[StoredMessage]], depth: int = 0) -> bool:
    """Is ``row`` still in the conversation: live at the tip, summarized (compacted),
    or superseded by a copy that is (a tail carried by a compaction)?"""
    if row.state == "compacted":
        return True
    if row.state == "live":
        return row.session_id == tip
    if row.state == "superseded" and depth < 1000:
        return any(_accounted(copy, tip, copies, depth + 1) for copy in copies.get(row.id, []))
    return False  # retracted, pruned


def _count_store(figures: Figures, url: str, events: list[Event], ledger: Ledger) -> None:
    store = open_store(url)
    try:
        split: set[str] = set()
        for channel in sorted({e.channel for e in events}):
            root = SESSION_PREFIX + channel
            if store.get_session(root) is None:
                continue
            rows: list[StoredMessage] = []
            written: set[int] = set()  # rows a compaction wrote: its summary and carried copies
            for sid in _lineage(store, root):
                for record in store.compactions(sid):
                    figures.compactions += 1
                    detail = store.compaction_detail(record.id)
                    written |= {m.id for m in (*detail.summary, *detail.carried)}
                rows += [*store.transcript(sid), *store.archive(sid)]
            appended = sorted((r for r in rows if r.id not in written), key=lambda r: (r.session_id, r.seq))
            for _, session_rows in itertools.groupby(appended, key=lambda r: r.session_id):
                split |= _split(list(session_rows))
            tip = store.resolve(root)
            live = store.transcript(tip)
            split |= _split(live)
            asks_live = collections.Counter(e for r in live if r.role == "user" and (e := _event_of_row(r)))
            figures.duplicate_asks_live += sum(1 for n in asks_live.values() if n > 1)
            asks = collections.Counter(e for r in appended if r.role == "user" and (e := _event_of_row(r)))
            figures.duplicate_asks_stored += sum(1 for n in asks.values() if n > 1)
            finals = collections.Counter(
                e for r in appended if r.role == "assistant" and not r.tool_calls and (e := _event_of_row(r))
            )
            figures.answers_stored_twice += sum(1 for n in finals.values() if n > 1)
            copies: dict[int, list[StoredMessage]] = collections.defaultdict(list)
            by_text: dict[str, list[StoredMessage]] = collections.defaultdict(list)
            for row in rows:
                if row.origin_id is not None:
                    copies[row.origin_id].append(row)
                if row.role == "assistant":
                    by_text[row.text].append(row)
            for event in (e for e in events if e.channel == channel):
                for answer in set(ledger.acks.get(event.id, [])):
                    if not any(_accounted(row, tip, copies) for row in by_text.get(answer, [])):
                        figures.lost += 1
                        figures.examples.append(f"lost: {event.id}'s answer {answer!r}")
        figures.split_turns = len(split)
        figures.examples += [f"split: {e}" for e in sorted(split)[:5]]
    finally:
        store.close()


def count(
    workload: Workload, backend: str, url: str, events: list[Event], ledger: Ledger, requests: list[dict]
) -> Figures:
    figures = Figures(backend=backend, turns=len(events), workers=workload.workers, channels=workload.channels)
    figures.deliveries = ledger.deliveries
    figures.redeliveries = sum(ledger.redeliveries.values())
    figures.concurrent_redeliveries = ledger.redeliveries["concurrent"]
    figures.rotations = ledger.compactions["rotated"]
    figures.errors = len(ledger.errors)
    figures.unanswered = len(ledger.unanswered)
    figures.differing_answers = sum(1 for answers in ledger.acks.values() if len(set(answers)) > 1)
    figures.examples += ledger.errors[:10]
    previous: dict[str, Event] = {}
    last: dict[str, Event] = {}
    for event in events:
        if event.channel in last:
            previous[event.id] = last[event.channel]
        last[event.channel] = event
    runs = _count_requests(figures, previous, requests)
    figures.replays = sum(len(answers) for answers in ledger.acks.values()) - runs
    _count_store(figures, url, events, ledger)
    return figures


def run_workload(workload: Workload, backend: str, url: str) -> Figures:
    """Run the gateway on the database at ``url`` (empty) and count."""
    events = plan(workload)
    started = time.monotonic()
    with running_llm_server() as server:
        server.behaviour = "converse"
        ledger = Platform(workload, url, server.base_url, events).run()
        requests = [r for r in server.requests if r["path"].endswith("/chat/completions")]
    figures = count(workload, backend, url, events, ledger, requests)
    figures.seconds = time.monotonic() - started
    return figures


# -- command line --------------------------------------------------------------------------------


@contextmanager
def _database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="gateway-") as folder:
            yield str(Path(folder) / "state.db")
    else:
        from tests.pg import isolated_postgres_url

        with isolated_postgres_url() as url:
            yield url


def main(argv: list[str]) -> int:
    if argv[:1] == ["worker"]:
        parser = argparse.ArgumentParser(prog="gateway_workload worker")
        parser.add_argument("url")
        parser.add_argument("base_url")
        parser.add_argument("name")
        parser.add_argument("--keep-last", type=int, default=4)
        parser.add_argument("--max-tokens", type=int, default=None)
        parser.add_argument("--without-key", action="store_true")
        args = parser.parse_args(argv[1:])
        asyncio.run(
            _serve(
                args.url,
                args.base_url,
                args.name,
                keyed=not args.without_key,
                keep_last=args.keep_last,
                max_tokens=args.max_tokens,
            )
        )
        return 0
    defaults = Workload()
    parser = argparse.ArgumentParser(prog="python -m tests.actors.integrations.gateway_workload")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--turns", type=int, default=defaults.turns)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--channels", type=int, default=defaults.channels)
    parser.add_argument("--redeliver", type=float, default=defaults.redeliver)
    parser.add_argument("--compact", type=float, default=defaults.compact)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--deadline", type=float, default=900.0)
    parser.add_argument("--without-key", action="store_true", help="an unkeyed turn: redeliveries run again")
    args = parser.parse_args(argv)
    workload = Workload(
        turns=args.turns,
        workers=args.workers,
        channels=args.channels,
        redeliver=args.redeliver,
        compact=args.compact,
        seed=args.seed,
        keyed=not args.without_key,
        deadline_s=args.deadline,
    )
    with _database(args.backend) as url:
        figures = run_workload(workload, args.backend, url)
    print(figures.line())
    for example in figures.examples[:20]:
        print("  " + example)
    bad = {k: v for k, v in figures.violations().items() if v}
    print("violations: " + (", ".join(f"{k}={v}" for k, v in bad.items()) if bad else "none"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The two layers ``simulate`` can drive: session actors, or the naive upstream code.

`ActorGateway` goes through a `SessionRegistry` (mailbox per session, lease with a
fencing token). `NaiveGateway` reproduces the upstream incident on purpose: every
path reads the transcript, summarizes it, ends the parent and creates its own child,
with no lease and no serialization, and writes wherever its cached id points, with
no turns (another path's message may land inside a turn, even between a tool call
and its result).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import cast

from persistence import Store, open_store
from protocol import END_REASON_COMPRESSION, Message, SessionEndedError, StoredMessage
from protocol._records import CompactionMode

from .. import SessionHandle, SessionRegistry
from ..compaction._policy import CompactionPolicy, bind_compressor
from ..compressors import Compressor
from ..session.liveness import default_holder
from ._check import NAIVE_WATERMARK_KEY
from ._config import STEP_TIMEOUT_S, WorkerConfig, make_compressor, make_policy

__all__ = ["ActorGateway", "NaiveGateway", "open_gateway"]

log = logging.getLogger("session_actors.simulate.gateways")

#: How often the interrupting path retries while the compression has not started yet.
_INTERRUPT_POLL_S = 0.001
#: A naive path follows at most this many rotations before giving up on one append.
_MAX_REDIRECTS = 50


class ActorGateway:
    """Every call goes through the registry's handles, as a gateway worker would."""

    def __init__(self, registry: SessionRegistry) -> None:
        self.registry = registry
        self._local = threading.local()  # this thread's open turn: {root: handle}

    def append(self, root: str, messages: Sequence[Message], *, review: bool = False) -> list[StoredMessage]:
        handle = self.registry.review(root) if review else self._main_handle(root)
        return handle.append(list(messages))

    @contextmanager
    def turn(self, root: str) -> Iterator[None]:
        """One handle for the turn's appends, inside its ``turn()``: other paths wait."""
        handle = self.registry.session(root, source="sim")
        turns = self._turns()
        turns[root] = handle
        try:
            with handle.turn():
                yield
        finally:
            del turns[root]

    def _main_handle(self, root: str) -> SessionHandle:
        handle = self._turns().get(root)
        return handle if handle is not None else self.registry.session(root, source="sim")

    def _turns(self) -> dict[str, SessionHandle]:
        if not hasattr(self._local, "turns"):
            self._local.turns = {}
        return self._local.turns

    def compress(self, root: str, mode: str) -> str:
        return self.registry.session(root, source="sim").compress(mode=cast(CompactionMode, mode)).status.value

    def compress_and_interrupt(self, root: str, mode: str) -> tuple[str, bool]:
        """Start a forced compression on one thread and interrupt it from this one."""
        handle = self.registry.session(root, source="sim")
        done = threading.Event()
        box: dict[str, object] = {}

        def compress() -> None:
            try:
                box["status"] = handle.compress(force=True, mode=cast(CompactionMode, mode)).status.value
            except Exception as exc:  # re-raised on the caller's thread
                box["error"] = exc
            finally:
                done.set()

        thread = threading.Thread(target=compress, name="sim-compress")
        thread.start()
        won = False
        while not done.is_set():
            if handle.interrupt():
                won = True
                break
            done.wait(_INTERRUPT_POLL_S)
        thread.join(STEP_TIMEOUT_S)
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return str(box.get("status", "no_outcome")), won

    def after_turn(self, root: str) -> None:
        """Auto-compaction is the actor's own business (checked after appends)."""


class NaiveGateway:
    """The upstream code path: no actor, no lease, no fencing."""

    def __init__(self, store: Store, compressor: Compressor, policy: CompactionPolicy) -> None:
        self.store = store
        self.compressor = compressor
        self.policy = policy
        self._lock = threading.Lock()
        self._current: dict[str, str] = {}  # the gateway's cached id per session (SessionEntry)

    def _cached(self, root: str) -> str:
        with self._lock:
            return self._current.get(root, root)

    def _follow(self, root: str, session_id: str) -> None:
        with self._lock:
            self._current[root] = session_id

    def append(self, root: str, messages: Sequence[Message], *, review: bool = False) -> list[StoredMessage]:
        session_id = self._cached(root)
        for _ in range(_MAX_REDIRECTS):
            try:
                return self.store.append(session_id, list(messages))
            except SessionEndedError as exc:
                # Upstream follows whichever child it can find, the newest one: with
                # two children this is how writes go to the orphan.
                kids = self.store.children(session_id)
                successor = exc.successor_id or (kids[-1].id if kids else None)
                if successor is None:
                    raise
                session_id = successor
                self._follow(root, session_id)
        raise SessionEndedError(session_id, message=f"gave up following rotations of {root!r}")

    def compress(self, root: str, mode: str) -> str:
        """Read, summarize, end the parent, create a child: each path on its own."""
        parent = self._cached(root)
        snapshot = self.store.transcript(parent)
        if len(snapshot) < 2:
            return "skipped"
        compacted = list(
            self.compressor.compress(snapshot, target_tokens=self.policy.target_tokens, cancel=threading.Event())
        )
        if not compacted:
            return "skipped"
        first = compacted[0]
        compacted[0] = Message(
            first.role,
            first.content,
            first.name,
            first.tool_call_id,
            first.tool_calls,
            {**first.meta, NAIVE_WATERMARK_KEY: snapshot[-1].seq},
        )
        self.store.end_session(parent, END_REASON_COMPRESSION)  # idempotent: both paths pass
        child = f"{root}~n{uuid.uuid4().hex[:10]}"
        self.store.create_session(child, source="sim", parent_session_id=parent)
        self.store.append(child, compacted)
        self._follow(root, child)
        return "rotated"

    def compress_and_interrupt(self, root: str, mode: str) -> tuple[str, bool]:
        return self.compress(root, mode), False  # upstream has no way to interrupt

    def turn(self, root: str) -> AbstractContextManager[None]:
        return nullcontext()  # upstream has no turns: other paths land anywhere

    def after_turn(self, root: str) -> None:
        if self.policy.over_budget(self.store.transcript(self._cached(root))):
            self.compress(root, self.policy.mode)


@contextmanager
def open_gateway(config: WorkerConfig) -> Iterator[ActorGateway | NaiveGateway]:
    """The gateway a worker drives; its store (and registry) are closed on exit."""
    store = open_store(config.db)
    try:
        policy = make_policy(config)
        compressor = make_compressor(config)
        if config.naive:
            bound = bind_compressor(compressor, policy)
            assert bound is not None  # make_compressor always makes one
            yield NaiveGateway(store, bound, policy)
            return
        holder = f"sim-w{config.worker}:{default_holder()}"
        with SessionRegistry(store, compressor=compressor, policy=policy, holder=holder) as registry:
            yield ActorGateway(registry)
    finally:
        store.close()

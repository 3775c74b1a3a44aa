"""compact: one compaction through a session actor, from the command line."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from actors.cli import _compact as cli_compact
from persistence import open_store
from protocol import SUMMARY_PREFIX, LeaseLostError, Message
from tests.cli.helpers import run_cli
from tests.llm_server import FakeLLM

pytestmark = pytest.mark.timeout(60)

SESSION = "tg:42"


@pytest.fixture
def db(store_url: str) -> str:
    store = open_store(store_url)
    try:
        store.create_session(SESSION, source="telegram")
        store.append(SESSION, [Message("system", "sys"), Message("user", "first ask")])
        for i in range(12):
            store.append(SESSION, Message("assistant" if i % 2 == 0 else "user", f"turn {i}"))
    finally:
        store.close()
    return store_url


def compact(capsys, db: str, *extra: str) -> tuple[int, dict]:
    result = run_cli(capsys, "--db", db, "compact", SESSION, "--json", *extra)
    assert "Traceback" not in result.err
    return result.code, json.loads(result.out)["outcome"]


def test_compact_in_place(capsys, db: str) -> None:
    code, outcome = compact(capsys, db)
    assert code == 0
    assert outcome["status"] == "compacted" and outcome["session_id"] == SESSION
    assert outcome["messages_before"] == 14 and outcome["messages_after"] < 14
    store = open_store(db)
    try:
        live = store.transcript(SESSION)
        assert any(m.text.startswith(SUMMARY_PREFIX) for m in live)
        assert len(store.archive(SESSION)) == 14  # nothing deleted
        assert store.leases() == []  # the lease was released
    finally:
        store.close()


def test_compact_rotate_then_the_lineage_shows_the_child(capsys, db: str) -> None:
    code, outcome = compact(capsys, db, "--mode", "rotate")
    assert code == 0 and outcome["status"] == "rotated"
    child = outcome["session_id"]
    assert child != SESSION and outcome["record"]["child_session_id"] == child
    tree = json.loads(run_cli(capsys, "--db", db, "lineage", SESSION, "--json").out)
    assert tree["live_tip"] == child
    # compacting the ended id again works on its live continuation
    code, again = compact(capsys, db, "--mode", "in_place")
    assert code == 0 and again["session_id"] == child
    assert again["status"] in ("compacted", "unchanged")


def test_cooldown_skips_unless_forced(capsys, db: str) -> None:
    store = open_store(db)
    try:
        store.arm_cooldown(SESSION, 3600, "earlier failure")
    finally:
        store.close()
    code, outcome = compact(capsys, db)
    assert code == 0 and outcome["status"] == "skipped" and outcome["reason"] == "cooldown"
    code, forced = compact(capsys, db, "--force")
    assert code == 0 and forced["status"] == "compacted"


def test_compact_table_output(capsys, db: str) -> None:
    result = run_cli(capsys, "compact", SESSION, "--db", db)
    assert result.code == 0
    assert result.out.startswith("compacted") and SESSION in result.out


def test_compact_with_the_llm_compressor(capsys, db: str, llm_server: FakeLLM) -> None:
    code, outcome = compact(
        capsys, db, "--compressor", "llm", "--llm-base-url", llm_server.base_url, "--llm-model", "tiny"
    )
    assert code == 0 and outcome["status"] == "compacted"
    assert outcome["record"]["compressor"] == "llm:tiny"
    assert llm_server.requests and llm_server.requests[0]["model"] == "tiny"
    store = open_store(db)
    try:
        summary = [m for m in store.transcript(SESSION) if m.text.startswith(SUMMARY_PREFIX)]
        assert len(summary) == 1 and "They planned a trip." in summary[0].text
    finally:
        store.close()


def test_llm_failure_is_a_failed_outcome_exit_0(capsys, db: str, llm_server: FakeLLM) -> None:
    # Exit 1 is only for fsck/simulate finding damage: a failed outcome is a result.
    llm_server.behaviour = "error"
    code, outcome = compact(
        capsys, db, "--compressor", "llm", "--llm-base-url", llm_server.base_url, "--llm-model", "tiny"
    )
    assert code == 0 and outcome["status"] == "failed"
    assert outcome["error"]
    store = open_store(db)
    try:
        assert store.cooldown(SESSION) is not None  # the failure armed the cooldown
        assert len(store.archive(SESSION)) == 0  # nothing written
    finally:
        store.close()
    # the table output says so too, with the same exit status (the cooldown is forced past)
    result = run_cli(
        capsys,
        "compact",
        SESSION,
        "--db",
        db,
        "--force",
        "--compressor",
        "llm",
        "--llm-base-url",
        llm_server.base_url,
        "--llm-model",
        "tiny",
    )
    assert result.code == 0 and result.out.startswith("failed") and "error:" in result.out


class _FencedOffStore:
    """The real store, except that every commit is fenced off (a lease taken over)."""

    def __init__(self, store) -> None:
        self.inner = store

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def commit_compaction(self, lease, **_kwargs):
        raise LeaseLostError(lease.session_id, lease.holder, lease.token)


def test_lease_lost_outcome_is_exit_0(capsys, db: str, monkeypatch) -> None:
    real_open_existing = cli_compact.open_existing

    @contextmanager
    def fenced_open_existing(args):
        with real_open_existing(args) as store:
            yield _FencedOffStore(store)

    monkeypatch.setattr(cli_compact, "open_existing", fenced_open_existing)
    code, outcome = compact(capsys, db)
    assert code == 0 and outcome["status"] == "lease_lost"
    store = open_store(db)
    try:
        assert len(store.archive(SESSION)) == 0 and len(store.transcript(SESSION)) == 14
    finally:
        store.close()


def test_unconfigured_llm_is_exit_2(capsys, db: str, monkeypatch) -> None:
    monkeypatch.delenv("SESSION_ACTORS_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("SESSION_ACTORS_LLM_MODEL", raising=False)
    result = run_cli(capsys, "--db", db, "compact", SESSION, "--compressor", "llm")
    assert result.code == 2 and "SESSION_ACTORS_LLM" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_keep_last_and_target_tokens_decide_how_much_is_kept(capsys, db: str) -> None:
    code, outcome = compact(capsys, db, "--keep-last", "20")  # longer than the session
    assert code == 0 and outcome["status"] == "unchanged"
    table = run_cli(capsys, "--db", db, "compact", SESSION, "--keep-last", "20")
    reason = next(line for line in table.out.splitlines() if line.startswith("reason: "))
    assert "unchanged" in reason and "keep-last 20" in reason  # a reason even without one in the outcome
    code, outcome = compact(capsys, db, "--keep-last", "2", "--target-tokens", "100")
    assert outcome["status"] == "compacted"
    store = open_store(db)
    try:
        live = store.transcript(SESSION)
    finally:
        store.close()
    assert [m.text for m in live[-2:]] == ["turn 10", "turn 11"]  # exactly the last two kept verbatim
    assert len(next(m for m in live if m.text.startswith(SUMMARY_PREFIX)).text) <= 400
    bad = run_cli(capsys, "--db", db, "compact", SESSION, "--keep-last", "-1")
    assert bad.code == 2 and "keep_last" in bad.err and "Traceback" not in bad.err


@pytest.mark.parametrize("fmt", ["csv", "ndjson", "table"])
def test_every_outcome_prints_its_reason(capsys, db: str, fmt: str) -> None:
    result = run_cli(capsys, "--db", db, "compact", SESSION, "--format", fmt)
    assert result.code == 0
    assert "compacted" in result.out and "summarized" in result.out

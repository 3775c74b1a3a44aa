"""Hypothesis strategies of harness scenarios, so a failing scenario shrinks.

A `Scenario` is a few paths, each a list of `Step`: appends, turns of appends, tool
runs (a call and its result), compress, interrupt, retract. It prints as the code
it runs, so a shrunk failure reads as a test to paste::

    from hypothesis import given
    from actors.testing import Harness, strategies

    @given(strategies.scenarios())
    def test_never_forks(scenario):
        with Harness(compressor=..., prefill=...) as harness:
            harness.explore(scenario.paths, review=scenario.review, schedules=5).assert_ok()

Needs the ``hypothesis`` package (in the ``test`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from protocol import Message, TurnHeldError

from ._paths import PathHandle

__all__ = ["Scenario", "Step", "paths", "scenarios", "steps"]

MODES = ("in_place", "rotate")


@dataclass(frozen=True)
class Step:
    """One thing a path does. ``kind``: append, turn, tool_run, compress, interrupt,
    retract; ``size``: messages in a turn; ``mode``/``force``: of a compress."""

    kind: str
    size: int = 1
    mode: str = "rotate"
    force: bool = True

    def run(self, h: PathHandle, name: str, index: int) -> None:
        text = f"{name} {index}"
        if self.kind == "append":
            h.append("user", text)
        elif self.kind == "turn":
            with h.turn():
                for i in range(self.size):
                    h.append("user" if i % 2 == 0 else "assistant", f"{text}.{i}")
        elif self.kind == "tool_run":
            with h.turn():  # a call and its result travel together
                call_id = f"c-{name}-{index}"
                call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                h.append(Message("assistant", None, tool_calls=[call]))
                h.append(Message("tool", f"result {text}", tool_call_id=call_id))
        elif self.kind == "compress":
            h.compress(force=self.force, mode=self.mode)
        elif self.kind == "interrupt":
            h.interrupt()
        elif self.kind == "retract":
            try:
                h.retract()
            except TurnHeldError:  # another path's turn holds the session: expected
                pass
        else:
            raise ValueError(f"unknown step kind {self.kind!r}")

    def __repr__(self) -> str:
        if self.kind == "turn":
            return f"turn({self.size})"
        if self.kind == "compress":
            return f"compress({self.mode}{', force' if self.force else ''})"
        return f"{self.kind}()"


@dataclass(frozen=True)
class _Path:
    name: str
    steps: tuple[Step, ...]

    def __call__(self, h: PathHandle) -> None:
        for index, step in enumerate(self.steps):
            step.run(h, self.name, index)

    def __repr__(self) -> str:
        return f"{self.name}: {list(self.steps)}"


@dataclass(frozen=True)
class Scenario:
    """Paths to give `Harness.explore` (``paths``, ``review``)."""

    paths: dict[str, _Path] = field(default_factory=dict)
    review: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return "Scenario(" + "; ".join(repr(p) for p in self.paths.values()) + f"; review={sorted(self.review)})"


def steps(*, review: bool = False) -> st.SearchStrategy[Step]:
    """A step; a review path never compresses or interrupts."""
    writes = [
        st.just(Step("append")),
        st.builds(Step, st.just("turn"), st.integers(1, 3)),
        st.just(Step("tool_run")),
        st.just(Step("retract")),
    ]
    if not review:
        writes += [
            st.builds(Step, st.just("compress"), mode=st.sampled_from(MODES), force=st.booleans()),
            st.just(Step("interrupt")),
        ]
    return st.one_of(writes)


def paths(name: str, *, review: bool = False, max_steps: int = 3) -> st.SearchStrategy[_Path]:
    return st.builds(_Path, st.just(name), st.lists(steps(review=review), min_size=1, max_size=max_steps).map(tuple))


def scenarios(*, max_paths: int = 2, max_steps: int = 3, review: bool = True) -> st.SearchStrategy[Scenario]:
    """One main path, up to ``max_paths - 1`` more, and (``review``) maybe a review path."""

    @st.composite
    def build(draw: st.DrawFn) -> Scenario:
        count = draw(st.integers(1, max_paths))
        drawn = {f"p{i}": draw(paths(f"p{i}", max_steps=max_steps)) for i in range(count)}
        reviewers: frozenset[str] = frozenset()
        if review and draw(st.booleans()):
            drawn["review"] = draw(paths("review", review=True, max_steps=max_steps))
            reviewers = frozenset({"review"})
        return Scenario(drawn, reviewers)

    return build()

"""What a check can conclude about a property, and what vLLM does about a violation.

Two vocabularies, each written once:

  Verdict   what the prover concludes (or the matrix expects) for a property under a
            configuration: proved, violated, bounded (no counterexample within the
            search depth, no proof claimed), a frontier in the draft count K (proved for
            every K < N, violated at K = N), or unknown (the solver did not decide: a
            failure, never a pass).
  Reaction  what vLLM does at a violating step: crash (one of its asserts kills the
            engine), hang (nothing fires and a request never runs again: the engine
            keeps stepping with no progress), silent (the property is violated and nothing fires), holds
            (nothing is violated), or could-not-run (the step, arm or trace could not be
            run at all: never a pass, never fixed).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from vllm_contract.spec.errors import SpecError


class Kind(str, Enum):
    PROVED = "proved"
    VIOLATED = "violated"
    BOUNDED = "bounded"
    FRONTIER = "frontier"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Verdict:
    """A verdict or an expectation; `str()` is how summary.json and spec/matrix.py spell it."""

    kind: Kind
    k: int | None = None  # the frontier: proved for K < k, violated at K = k

    def __str__(self) -> str:
        return f"frontier:K={self.k}" if self.kind is Kind.FRONTIER else self.kind.value

    @property
    def decided(self) -> bool:
        """A definite answer (unknown is not one)."""
        return self.kind is not Kind.UNKNOWN

    @property
    def searches(self) -> bool:
        """Checked by a counterexample search (violated and bounded are both searched)."""
        return self.kind in (Kind.VIOLATED, Kind.BOUNDED)

    @staticmethod
    def parse(text: object, expectation: bool = False) -> Verdict:
        """The verdict a string spells; an expectation may not be `unknown`. Raises SpecError."""
        if isinstance(text, Verdict):
            return text
        if isinstance(text, str):
            if text.startswith("frontier:K="):
                bound = text.removeprefix("frontier:K=")
                if bound.isdigit() and int(bound) >= 1:
                    return Verdict(Kind.FRONTIER, int(bound))
                raise SpecError(
                    f"a frontier reads 'frontier:K=N' (proved for K < N, violated at K = N, N >= 1); got {text!r}"
                )
            try:
                kind = Kind(text)
            except ValueError:
                kind = None
            if kind is not None and kind is not Kind.FRONTIER and not (expectation and kind is Kind.UNKNOWN):
                return Verdict(kind)
        allowed = "'proved', 'violated', 'bounded' or 'frontier:K=N'" + ("" if expectation else " or 'unknown'")
        raise SpecError(f"a verdict is {allowed}, got {text!r}")


PROVED, VIOLATED, BOUNDED, UNKNOWN = (Verdict(k) for k in (Kind.PROVED, Kind.VIOLATED, Kind.BOUNDED, Kind.UNKNOWN))


def frontier(k: int) -> Verdict:
    return Verdict(Kind.FRONTIER, k)


class Reaction(str, Enum):
    """What vLLM does about a case, a trace or a step (value: how JSON spells it)."""

    CRASH = "crash"
    HANG = "hang"
    SILENT = "silent"
    HOLDS = "holds"
    ERROR = "error"
    COULD_NOT_RUN = "could not run"

    @property
    def label(self) -> str:
        """The short word tables use."""
        return _LABELS[self]

    @property
    def meaning(self) -> str:
        return _REACTION_MEANINGS[self]

    @property
    def violated(self) -> bool:
        """A property is violated (with or without an assert firing)."""
        return self in (Reaction.CRASH, Reaction.HANG, Reaction.SILENT)


_LABELS = {
    Reaction.CRASH: "CRASH",
    Reaction.HANG: "HANG",
    Reaction.SILENT: "SILENT",
    Reaction.HOLDS: "holds",
    Reaction.ERROR: "ERROR",
    Reaction.COULD_NOT_RUN: "COULD NOT RUN",
}
_REACTION_MEANINGS = {
    Reaction.CRASH: "an assert kills the engine at that step",
    Reaction.HANG: "nothing fires, and the engine loop, run on with no further fault, never runs a request again",
    Reaction.SILENT: "the property is violated and nothing fires",
    Reaction.HOLDS: "nothing is violated",
    Reaction.ERROR: "vLLM raised an exception that is none of its asserts (the exception is given)",
    Reaction.COULD_NOT_RUN: "it could not be run (the cause is given); not a pass",
}


@dataclass(frozen=True)
class Fired:
    """vLLM's reaction at a trace's last step as summary.json records it: "crash: <assert>",
    "hang" (shown by running the engine loop on, model/hang.py) or "silent"."""

    assert_name: str | None = None
    hang: bool = False

    @property
    def reaction(self) -> Reaction:
        if self.assert_name:
            return Reaction.CRASH
        return Reaction.HANG if self.hang else Reaction.SILENT

    def __str__(self) -> str:
        if self.assert_name:
            return f"crash: {self.assert_name}"
        return "hang" if self.hang else "silent"

    @staticmethod
    def parse(text: str | None) -> Fired:
        text = text or ""
        if text.startswith("crash"):
            return Fired(text.split(": ", 1)[1] if ": " in text else "?")
        return Fired(None, hang=text == "hang")

"""What a fuzz campaign counts: a trace the target could not play is its own outcome."""

from __future__ import annotations

from spec.errors import TargetUnavailable
from targets.fuzz import fuzz_config
from targets.fuzz_presets import PRESETS


class CannotBuild:
    """A target that cannot build any engine (a tree missing a piece, say)."""

    name = "cannot-build"

    def reset(self, cfg, init):
        raise TargetUnavailable("this tree cannot build an engine with 2 draft tokens")

    def step(self, event, args, model):  # pragma: no cover - never reached
        raise AssertionError("stepped a target that could not be built")


def test_traces_the_target_cannot_play_are_counted_apart_with_their_cause():
    cfg = next(iter(PRESETS.values()))
    rep = fuzz_config(cfg, 4, 6, seed=1, target=CannotBuild(), log=lambda line: None)
    assert rep.cases == 4
    assert rep.could_not_run == {"this tree cannot build an engine with 2 draft tokens": 4}
    assert not rep.divergences and not rep.signatures  # never a divergence, never a clean replay

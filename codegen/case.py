"""The case format: a trace as data, the arms it is checked on, and what the model predicts on each.

A case is a trace (init picks and steps) plus, per *arm* (every vLLM release profile as
it is, with the seed's clamp and with the step-reservation guard; a historical profile
also as itself), the model's prediction: its `Expect` -- how many steps run (a fatal
assert ends the engine; a step the profile does not allow ends the replay), which vLLM
assert fires and where, where the case's property and every other property are first
violated, how many tokens a guard drops. Generated modules hold this data and one call;
targets/harness.py plays it on a target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from vllm_contract.model import hang
from vllm_contract.model.interpreter import nested
from vllm_contract.model.run import Played, Run
from vllm_contract.spec import expectations
from vllm_contract.spec.config import Config
from vllm_contract.spec.profiles import PROFILES, RELEASES
from vllm_contract.spec.properties import PROPERTIES, properties_for
from vllm_contract.spec.verdicts import Reaction


@dataclass(frozen=True)
class Expect:
    """What one arm of a case does, as the model predicts it (or as a target was seen to)."""

    runs: int  # steps that run (the replay stops at a fatal assert or a disabled step)
    fired: tuple | None = None  # (assert, step) of the vLLM assert that fires, if any; steps count from 1
    violations: tuple = ()  # steps at which the case's property fails
    others: tuple = ()  # (property, first step) of every other property this arm violates
    dropped: int = 0  # tokens the clamp dropped
    completed: bool = False  # some request finished on a stop token after decoding
    stuck: tuple = ()  # (request, why) the engine's own last steps never ran (model/hang.py)

    @property
    def reaction(self) -> Reaction:
        """What vLLM does about the case: an assert fires (crash), the engine runs on and
        never runs a request again (hang), a property is violated and nothing fires
        (silent), or nothing is violated (holds)."""
        if self.fired:
            return Reaction.CRASH
        if self.stuck:
            return Reaction.HANG
        return Reaction.SILENT if self.violations or self.others else Reaction.HOLDS


@dataclass(frozen=True)
class Case:
    name: str
    config: Mapping[str, Any]
    init: Mapping[str, Any]
    steps: tuple  # ((event, {arg: value}), ...)
    kind: str  # "violation" | "witness" | "divergence" (a fuzz trace vLLM differed from the model on)
    property: str | None
    arms: Mapping[str, tuple]  # label -> (overrides, Expect)
    path: str = ""  # the generated module, for replay commands
    # the last steps are the engine loop's own, run on with no fault to show a hang (model/hang.py)
    engine_steps: int = 0

    def config_for(self, overrides: Mapping[str, Any]) -> Config:
        return expectations.from_record({**self.config, **overrides})


@dataclass(frozen=True)
class TargetName:
    """A target a case can be played on (`--target=NAME`); targets/registry.py builds it."""

    name: str
    mark: str  # the pytest marker its tests carry
    vllm: bool = False  # drives a vLLM tree (the tree is loaded and preflighted first)
    runner: bool = False  # drives vLLM's own model runner too (built and checked first)
    doc: str = ""


TARGETS: tuple[TargetName, ...] = (
    TargetName("reference", "reference", doc="the spec's own interpreter"),
    TargetName("vllm", "vllm", vllm=True, doc="vLLM's AsyncScheduler, the model deciding what the runner returns"),
    TargetName("vllm-clamp", "vllm", vllm=True, doc="the same with the seed's clamp as a scheduler_cls"),
    TargetName("vllm-guard", "vllm", vllm=True, doc="the same with the step-reservation guard (the +guard arms)"),
    TargetName("runner", "vllm", vllm=True, runner=True, doc="vLLM's scheduler with vLLM's own V1/V2 model runner"),
    TargetName("runner-clamp", "vllm", vllm=True, runner=True, doc="the same with the seed's clamp"),
    TargetName("kernel", "kernel", doc="the V2 discard decision as Triton kernels"),
)
TARGET_NAMES = tuple(t.name for t in TARGETS)


def arm_label(profile: str, clamp: bool, guard: str = "none") -> str:
    return profile + ("+clamp" if clamp else "") + ("+guard" if guard != "none" else "")


def arms_for(
    profile: str, clamp: bool, guard: str = "none", v1: bool = False, releases: tuple[str, ...] = ()
) -> dict[str, dict]:
    """The arms a case is checked on: every release as it is, with the seed's clamp and
    with the step-reservation guard; a historical profile also on itself, as found. A
    case on vLLM's own V1 runner (`v1`) has no arm on a release without it (0.34.0 on); a
    plugin's runner only on the releases it is checked against (`releases`)."""
    arms = {}
    if PROFILES[profile].historical:
        arms[arm_label(profile, clamp, guard)] = {"profile": profile, "clamp": clamp, "guard": guard}
    for release in RELEASES:
        if (v1 and not release.has_v1_runner) or (releases and release.release not in releases):
            continue
        for on, fix in ((False, "none"), (True, "none"), (False, "step-reservation")):
            arms[arm_label(release.name, on, fix)] = {"profile": release.name, "clamp": on, "guard": fix}
    return arms


def watched(cfg: Config, case_property: str | None) -> list[str]:
    """The properties an arm reports. That a guard dropped a token is its job under a
    fault (the arm says how many it dropped); it is a finding only where a case is about
    it (on a healthy path: never-drops). A progress property runs the engine on from
    every state, so it is read only where the case is about it."""
    return [
        p
        for p in properties_for(cfg)
        if p == case_property or (p != "never-drops" and PROPERTIES[p].kind != "progress")
    ]


class Tally:
    """What an arm does, step by step: the steps run, where each watched property is
    first violated (and every step the case's own property is), the assert that fired."""

    def __init__(self, cfg: Config, case_property: str | None, engine_steps: int = 0):
        self.cfg = cfg
        self.case_property = case_property
        self.engine_steps = engine_steps
        self.played: list[tuple[str, Mapping]] = []  # (event, state) of every step run
        self.watched = watched(cfg, case_property)
        self.runs = 0
        self.violations: list[int] = []
        self.first: dict[str, int] = {}
        self.fired: tuple | None = None
        self.state: Mapping | None = None

    def add(self, played: Played, interp) -> None:
        self.runs = played.number
        self.state = played.state
        self.played.append((played.event, played.state))
        state_props = None
        for prop in self.watched:
            if PROPERTIES[prop].kind == "transition":
                broken = played.result.checks.get(prop, True) is False
            elif PROPERTIES[prop].kind == "progress":  # the engine, run on from here, leaves a request
                broken = bool(hang.shown(interp, played.state)[1])
            else:
                if state_props is None:
                    state_props = interp.state_properties(played.state)
                broken = not state_props[prop]
            if broken:
                if prop == self.case_property:
                    self.violations.append(played.number)
                self.first.setdefault(prop, played.number)
        if played.fired:
            self.fired = (played.fired[0], played.number)

    def engine_run(self, total: int) -> list[tuple[str, Mapping]]:
        """The engine's own last steps, (event, state), when every step of the case ran."""
        if not self.engine_steps or self.runs != total:
            return []
        return self.played[-self.engine_steps :]

    def stuck(self, total: int) -> tuple:
        run = self.engine_run(total)
        if not run:
            return ()
        return hang.stuck(self.cfg, [e for e, _ in run], [s for _, s in run], hang.busy_in(self.cfg, run[-1][1]))

    def expect(self, final_state: Mapping, total: int) -> Expect:
        """The arm's outcome; `total` is the number of steps the case has."""
        view = nested(final_state)
        others = tuple((p, step) for p, step in self.first.items() if p != self.case_property)
        return Expect(
            runs=self.runs,
            fired=self.fired,
            violations=tuple(self.violations),
            others=others,
            dropped=sum(view.get("clamp_dropped", [0])) + sum(view.get("guard_dropped", [0])),
            completed=any(view["completed"]),
            stuck=self.stuck(total),
        )


def predict(case_property: str | None, cfg: Config, init: Mapping, steps, engine_steps: int = 0) -> Expect:
    """Run the steps on the reference interpreter and summarise what happens."""
    run = Run(cfg, init, steps, until_disabled=True)
    tally = Tally(cfg, case_property, engine_steps)
    for played in run:
        tally.add(played, run.interp)
    return tally.expect(run.state, len(steps))

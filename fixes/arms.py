"""The generated cases against a vLLM tree that carries a fix natively (fixes/<fix>/).

    python -m vllm_contract.adapter.child vllm_contract.fixes.arm_child guard|rollback \
        --vllm=TREE [--expect fixed|control|minus] [--cases GLOB,...] [--json FILE]

TREE is a release (0.32.0, 0.33.0) or the root of a patched tree (fixes/trees.py), with
VLLM_PROFILE=<release> for the latter. One tree per process (adapter/tree.py).

guard: every generated case's `+guard` arm of the tree's release, played by the tree's
  own AsyncScheduler (`native_guard_target`), not by the scheduler_cls class
  (adapter/guard_scheduler.py) the vllm-guard target loads. The tokens the tree's guard
  drops are read from its per-occurrence debug line, the only trace the patch leaves.
rollback: every generated V2 case's plain arm of the tree's release with the runner
  swapped for `v2-rollback-history` and the scheduler's `release_skipped` on (the model
  of fixes/v2-recompute-rollback), played by vLLM's own V2 model runner
  (targets/real_runner/) beside the tree's scheduler.

Each arm is checked against the model's prediction for it, computed now from spec/ (a
generated module's recorded expectation may predate the fix's arms; one that differs is
reported as stale). The fix *acts* on an arm when, over the steps the arm plays, the
model's run of the trace with the fix differs from its run on the release as it is (a
state or an assert fired; `fix_acts`). --expect fixed: every arm holds.
--expect control (the release as it is): the arms where the fix acts fail, all others
hold. --expect minus (the fix minus its key line): some arm where the fix acts fails,
all others hold. Exit 0 when the expectation is met, 1 when not, 4 when the tree or the
target cannot run (no arm ran).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from pathlib import Path

from vllm_contract.codegen.generate import CASES, generated_cases

SCHEDULER_LOGGER = "vllm.v1.core.sched.scheduler"
# the patch's debug line (fixes/step-reservation-guard): request id, returned, reserved, dropped
GUARD_DEBUG = "Request %s: the model runner returned %d token(s) for a step that reserved %d; dropped %d."


# ------------------------------------------------------------------ the cases


def load_cases(root: Path = CASES) -> list:
    """Every generated module's CASE, in path order (the modules import only the harness)."""
    return [case for _, case in generated_cases(root)]


@dataclasses.dataclass
class ArmResult:
    case: str
    arm: str
    acts: bool  # the model's run of the trace differs with the fix and without it
    holds: bool
    stale: bool  # the generated module records another expectation for this arm
    detail: str = ""
    violated: tuple = ()  # the properties the model says this arm violates
    before: tuple = ()  # ... and the same trace on the release as it is
    faulted: bool = False  # the case injects a fault (outside every fix's proved scope)

    def row(self) -> str:
        verdict = "holds" if self.holds else "FAILS"
        notes = ["the fix acts" if self.acts else "the fix does not act"] + (
            ["recorded arm stale"] if self.stale else []
        )
        if self.before != self.violated:
            notes.append(f"violates {list(self.before) or 'nothing'} -> {list(self.violated) or 'nothing'}")
        line = f"{verdict:6} {self.case} [{self.arm}] ({'; '.join(notes)})"
        return line + (f"\n         {self.detail}" if self.detail else "")


def fix_acts(case, fixed: dict, baseline: dict, prediction=None) -> bool:
    """Whether the fix's arm can tell the fix from the release as it is: the arm's test
    (the model's prediction with the fix, played by the harness, run-on included) fails
    on the model of the release as it is. A fix that changes only what the arm never
    plays does not act. `prediction`: the fixed arm's, where the caller has made it."""
    from vllm_contract.model.interpreter import Disabled

    try:
        holds, _, _ = _replay(case, "fixed", fixed, _release_as_it_is(case.config_for(baseline)), prediction)
    except Disabled:  # the release as it is cannot even take one of the arm's steps
        return True
    return not holds


def _release_as_it_is(cfg):
    """The reference target held to `cfg` whatever arm it is asked to play."""
    from vllm_contract.targets.reference import ReferenceTarget

    class ReleaseAsItIs(ReferenceTarget):
        def reset(self, _cfg, init) -> None:
            super().reset(cfg, init)

    return ReleaseAsItIs()


# what each fix claims (spec/matrix.py: guard-*, v2-rollback-history), within its proved scope
CLAIMS = {
    "guard": ("counter-nonnegative", "no-token-while-prefilling"),
    "rollback": (
        "predicates-agree",
        "counter-nonnegative",
        "no-token-while-prefilling",
        "placeholder-accounting",
        "history-agrees",
    ),
}
# claims proved only without injected faults: under a stale slot read (a fault) the slot's
# total_len is another request's, with the fix or without it
FAULT_FREE_CLAIMS = {"rollback": ("placeholder-accounting", "history-agrees")}


def claimed(result: ArmResult, check: str, names: tuple | None = None) -> list[str]:
    """The properties among `names` (default: the arm's violations with the fix) that the
    fix claims for this arm: all of CLAIMS, less FAULT_FREE_CLAIMS on an arm with a fault."""
    names = result.violated if names is None else names
    out_of_scope = FAULT_FREE_CLAIMS.get(check, ()) if result.faulted else ()
    return [n for n in names if n in CLAIMS[check] and n not in out_of_scope]


def _violated(case, expect) -> tuple:
    """The properties an arm's prediction violates, sorted (the case's own included)."""
    names = {p for p, _ in expect.others}
    if expect.violations:
        names.add(case.property)
    return tuple(sorted(names))


def _predict(case, overrides: dict):
    """The model's prediction for one arm of a case, made now from spec/."""
    from vllm_contract.codegen.case import predict

    return predict(case.property, case.config_for(overrides), case.init, case.steps, case.engine_steps)


def _replay(case, label: str, overrides: dict, target, fresh=None) -> tuple[bool, str, object]:
    """Replay one arm against the model's prediction made now (or `fresh`, that prediction
    already made); (holds, why not, prediction)."""
    from vllm_contract.targets.harness import Divergence, replay_case

    if fresh is None:
        fresh = _predict(case, overrides)
    one = dataclasses.replace(case, arms={label: (overrides, fresh)})
    try:
        replay_case(one, target)
    except Divergence as exc:
        keys = ", ".join(str(k) for k in list(exc.diff)[:4])
        return False, f"diverges after step {exc.step} ({exc.event}): {keys}", fresh
    except AssertionError as exc:
        return False, str(exc).splitlines()[0], fresh
    return True, "", fresh


# ------------------------------------------------------------------ guard


class _DropLog(logging.Handler):
    """Counts the tokens the tree's guard drops, from its per-occurrence debug line."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.target = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == GUARD_DEBUG and self.target is not None:
            req_id, _returned, _reserved, dropped = record.args
            self.target.sched.guard_dropped[req_id] += dropped


_DROP_LOG = _DropLog()


def watch_drops(target) -> None:
    """Give target.sched (a tree's plain scheduler) the `guard_dropped` counter the vLLM
    target projects, fed by the patch's per-occurrence debug line."""
    target.sched.guard_dropped = defaultdict(int)
    logger = logging.getLogger(SCHEDULER_LOGGER)
    if _DROP_LOG not in logger.handlers:
        logger.addHandler(_DROP_LOG)
    logger.setLevel(logging.DEBUG)  # only this logger: vLLM's own handler stays at its level
    _DROP_LOG.target = target


def native_guard_target():
    """The vLLM target on the loaded tree's plain AsyncScheduler, playing the +guard arms."""
    from vllm_contract.targets.vllm_target import VllmTarget

    class NativeGuardTarget(VllmTarget):
        """The tree's own AsyncScheduler plays the step-reservation guard's arms: a tree
        that carries fixes/step-reservation-guard needs no scheduler_cls."""

        def __init__(self):
            super().__init__(guard=True, native_guard=True)
            self.name = "vllm-native-guard"

        def reset(self, cfg, init) -> None:
            super().reset(cfg, init)
            watch_drops(self)

    return NativeGuardTarget()


def check_guard(cases, target, profile: str) -> list[ArmResult]:
    results = []
    for case in cases:
        for label, (overrides, recorded) in case.arms.items():
            if overrides.get("guard", "none") == "none" or overrides.get("profile") != profile:
                continue
            baseline = {**overrides, "guard": "none"}
            fresh = _predict(case, overrides)
            acts = fix_acts(case, dict(overrides), baseline, fresh)
            # an arm another target plays (the V2 recompute fix's scheduler, a plugin's patch)
            elsewhere = target.accepts(case.config_for(overrides))
            if elsewhere is not None:
                results.append(ArmResult(case.name, label, acts, False, False, f"skipped: {elsewhere}"))
                continue
            holds, why, _ = _replay(case, label, dict(overrides), target, fresh)
            before = _predict(case, baseline)
            results.append(
                ArmResult(
                    case.name,
                    label,
                    acts=acts,
                    holds=holds,
                    stale=recorded != fresh,
                    detail=why,
                    violated=_violated(case, fresh),
                    before=_violated(case, before),
                )
            )
    return results


# ------------------------------------------------------------------ rollback


def runner_target():
    """vLLM's scheduler with vLLM's own V2 model runner (targets/real_runner.py), which
    here also plays `v2-rollback-history` with `release_skipped`: the loaded tree's
    runner and scheduler are taken to carry fixes/v2-recompute-rollback (on a tree
    without it, the control arms fail)."""
    from vllm_contract.spec.errors import TargetUnavailable

    try:
        from vllm_contract.targets.real_runner import RealRunnerTarget
        from vllm_contract.targets.vllm_target import VllmTarget
    except ImportError as exc:
        raise TargetUnavailable(f"targets.real_runner is not available ({exc})") from exc

    class NativeRollbackRunner(RealRunnerTarget):
        def accepts(self, cfg):
            """The patched tree implements the whole recompute fix (v2-rollback-history) natively."""
            if cfg.run.rolls_back and cfg.run.follows_scheduler:
                return VllmTarget.accepts(self, cfg)
            return super().accepts(cfg)

        def __init__(self):
            super().__init__()
            self.name = "runner-native-rollback"
            self.releases_skipped = True  # the patched scheduler's half

    return NativeRollbackRunner()


# the model of the whole patch: the V2 runner with the whole recompute fix, and the
# scheduler that releases a skipped step (spec/matrix.py: v2-rollback-history)
FIXED_V2 = {"runner": "v2-rollback-history", "release_skipped": True}
FIXED_LABEL = "+v2-rollback-history"


def check_rollback(cases, target, profile: str) -> list[ArmResult]:
    from vllm_contract.spec.errors import TargetUnavailable

    results = []
    for case in cases:
        if not str(case.config.get("runner", "")).startswith("v2"):
            continue
        for label, (overrides, _recorded) in case.arms.items():
            if (
                overrides.get("profile") != profile
                or overrides.get("clamp")
                or overrides.get("guard", "none") != "none"
            ):
                continue
            swapped = {**overrides, **FIXED_V2}
            baseline = {**overrides, "runner": "v2"}
            fresh = _predict(case, swapped)
            acts = fix_acts(case, swapped, baseline, fresh)
            before = _predict(case, baseline)
            try:
                holds, why, _ = _replay(case, label + FIXED_LABEL, swapped, target, fresh)
            except TargetUnavailable as exc:  # e.g. a pick real code cannot realise
                results.append(ArmResult(case.name, label + FIXED_LABEL, acts, False, False, f"skipped: {exc}"))
                continue
            results.append(
                ArmResult(
                    case.name,
                    label + FIXED_LABEL,
                    acts,
                    holds,
                    stale=False,
                    detail=why,
                    violated=_violated(case, fresh),
                    before=_violated(case, before),
                    faulted=bool(case.config.get("faults")),
                )
            )
    return results


# ------------------------------------------------------------------ verdict


def verdict(results: list[ArmResult], expect: str) -> tuple[bool, list[str]]:
    """Whether the results are what `expect` says, and the lines that say why not.

    fixed:   every arm holds (the tree does what the model of the fix does);
    control: the release as it is: an arm fails exactly where the fix acts;
    minus:   the fix minus its key line: some arm where the fix acts fails (the line is
             needed), and every arm where it does not act holds (nothing else broke)."""
    ran = [r for r in results if not r.detail.startswith("skipped:")]
    acting = [r for r in ran if r.acts]
    if expect == "fixed":
        bad = [r for r in ran if not r.holds]
        return bool(ran) and not bad, [r.row() for r in bad]
    if expect == "control":
        bad = [r for r in ran if r.holds == r.acts]
        return bool(acting) and not bad, [r.row() for r in bad]
    bad = [r for r in ran if not r.acts and not r.holds]
    needed = any(not r.holds for r in acting)
    lines = [r.row() for r in bad] + (
        [] if needed else ["every arm where the fix acts holds: the key line is not needed"]
    )
    return needed and not bad, lines


def summary(results: list[ArmResult], check: str) -> dict:
    ran = [r for r in results if not r.detail.startswith("skipped:")]

    return {
        "arms": len(results),
        "skipped": len(results) - len(ran),
        "holds": sum(r.holds for r in ran),
        "fails": sum(not r.holds for r in ran),
        "acts": sum(r.acts for r in ran),
        "acts_and_fails": sum(r.acts and not r.holds for r in ran),
        "quiet_and_holds": sum((not r.acts) and r.holds for r in ran),
        "stale_recorded": sum(r.stale for r in ran),
        # the fix's claimed properties, in the model: arms violating one without and with the fix
        "claims_violated_before": sum(bool(claimed(r, check, r.before)) for r in ran),
        "claims_violated_after": sum(bool(claimed(r, check)) for r in ran),
    }

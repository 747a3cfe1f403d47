"""What the real runner computes that the model does not say yet: positions and input ids.

For every scheduled request of every `schedule` step, the real-runner target
(targets/real_runner.py) reports the positions the runner fed to the forward pass and
the input ids, beside what the scheduler asked for (num_computed_tokens before the step,
num_scheduled_tokens). This module replays traces (the generated cases and the fuzzer's
random traces), joins each such observation with the model's state before and after the
step, and checks candidate conditions, stated over the spec's variables, against every
observation: each condition is printed with how often it held and the first trace where
it did not.

    vllm-contract bench runner-measure [--vllm 0.32.0|0.33.0] [--cases N] [--config NAME ...]

Quantities (per request r, state s before the step, spec names):
  c0 = s.num_computed_tokens[r], n = q_scheduled, ks = q_spec of the new step,
  L = s.num_prompt_tokens[r], T = s.num_tokens[r], P = s.num_output_placeholders[r];
  g = the V2 row's num_computed (v2_num_computed[r] after the step's add_requests);
  pend = drafts the scheduler still has to roll back for r: over the in-flight steps i
    of the current epoch (q_epoch[i, r] == epoch[r]) in which r was sampled,
    q_spec[i, r] - accepted_i, where accepted_i = q_sampled[i, r] - 1 - extra_i
    (extra_i is the over-delivery pick of that step; 0 without the fault);
  lag = the request's in-flight delivered-or-not difference, see `conditions`.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from vllm_contract.model.interpreter import flat, nested
from vllm_contract.model.run import Run
from vllm_contract.spec.config import Config
from vllm_contract.spec.vocabulary import Status

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Obs:
    """One scheduled request of one schedule step, with what the model says around it."""

    where: str  # preset/seed or case[arm], and the step (1-based)
    cfg: Config
    r: int
    before: dict  # model state before the step (flat keys)
    after: dict  # after
    row: dict | None  # the runner rule's row (v1_rows / v2_rows)
    seen: dict  # the target's measurement (real_runner.RealRunnerTarget._measure)
    pend: int  # in-flight drafts still to be rolled back (see module docstring)
    last: tuple | None  # r in the last non-empty step: (runner start, n, ks, accepted, sampled), else None
    kv_since_add: bool  # a KV-load failure rolled r back since its slot was written / it entered the batch
    stale_since_add: bool  # the slot's last write was a stale read (V2 fault)
    entered_at: int  # T when r last entered V1's persistent batch: the runner holds real ids below it
    trace: list = field(default_factory=list)  # the steps up to this one, for reports

    @property
    def c0(self) -> int:
        return self.seen["sched_start"]

    @property
    def n(self) -> int:
        return self.seen["sched_length"]

    @property
    def ks(self) -> int:
        return self.seen["spec"]

    @property
    def start(self) -> int:
        return self.seen["start"]

    @property
    def admitted(self) -> bool:
        return bool(self.after[("q_admitted", self.after[("queue_len",)] - 1, self.r)])


def observe(cfg: Config, init: dict, steps: list, target, where: str) -> list[Obs]:
    """Replay a trace on the model and the target together and collect Obs; stops at a
    fired assert, a target error, a step the model does not allow, or a state beyond the
    real runner's contract."""
    from vllm_contract.targets.real_runner import beyond_runner_contract

    run = Run(cfg, init, steps, until_disabled=True)
    target.reset(cfg, flat(run.init))
    flights: list[dict] = []  # per in-flight step: {r: (epoch, ks, accepted, sampled)}
    last: dict[int, tuple] = {}
    kv_since: set[int] = set()
    stale_since: set[int] = set()
    entered_at: dict[int, int] = {}
    out: list[Obs] = []
    done: list = []
    state = run.initial
    for played in run:
        index, event, args, result = played.number - 1, played.event, played.args, played.result
        outcome = target.step(event, args, played)
        done.append((event, nested(args)))
        if outcome.fired or outcome.error is not None:
            break
        if event == "schedule":
            pos = result.state[("queue_len",)] - 1
            step, now = {}, {}
            rows = result.observed.get("v2_rows") or result.observed.get("v1_rows")
            for req_id, seen in outcome.facts.get("runner", {}).items():
                r = int(req_id[1:])
                admitted = result.state[("q_admitted", pos, r)]
                if admitted:
                    kv_since.discard(r)
                    stale_since.discard(r)
                    if args.get(("stale_read", r), False):
                        stale_since.add(r)
                if admitted or (cfg.is_v1 and not state[("v1_in_batch", r)]):
                    # a new (or updated) request's prompt; a cached one is rebuilt to T + P
                    new = admitted and state[("status", r)] == Status.WAITING
                    entered_at[r] = state[("num_tokens", r)] + (0 if new else state[("num_output_placeholders", r)])
                    if cfg.is_v1:
                        kv_since.discard(r)
                extra = args.get(("extra", r), 0)
                sampled = result.state[("q_sampled", pos, r)]
                accepted = max(sampled - 1 - extra, 0)
                ks = result.state[("q_spec", pos, r)]
                step[r] = (state[("epoch", r)], ks, accepted, sampled > 0)
                now[r] = (seen["start"], seen["sched_length"], ks, accepted, sampled > 0)
                pend = sum(f[r][1] - f[r][2] for f in flights if r in f and f[r][3] and f[r][0] == state[("epoch", r)])
                out.append(
                    Obs(
                        f"{where} step {index + 1}",
                        cfg,
                        r,
                        dict(state),
                        dict(result.state),
                        rows[r] if rows else None,
                        seen,
                        pend,
                        last.get(r),
                        r in kv_since,
                        r in stale_since,
                        entered_at.get(r, 0),
                        list(done),
                    )
                )
            if now:
                last = {r: v for r, v in now.items() if v[4]}
            flights.append(step)
        elif event == "deliver":
            flights.pop(0)
            if args.get(("kv_fail_req",), -1) >= 0:
                kv_since.add(args[("kv_fail_req",)])
        state = result.state
        if beyond_runner_contract(cfg, state):
            break
    return out


# ------------------------------------------------------------------ conditions


@dataclass(frozen=True)
class Condition:
    name: str
    statement: str  # over the spec's variables
    applies: Callable[[Obs], bool]
    holds: Callable[[Obs], bool]


def _stays(o: Obs) -> bool:
    """V1: r stays in the persistent batch (v1_in_batch[r] before the step, not admitted)
    and was sampled in the last non-empty step: V1's prev_req_id_to_index holds it."""
    return bool(o.before[("v1_in_batch", o.r)]) and not o.admitted and o.last is not None


def _v1_start(o: Obs) -> int:
    """V1's first position: with async spec decoding, a request that stays and had drafts
    in its last step continues from that step's GPU count plus its valid sampled count
    (update_num_computed_tokens_for_batch_change); otherwise the scheduler's c0."""
    if _stays(o) and o.last[2] > 0:
        start, n, ks, accepted, _ = o.last
        return start + 1 + accepted
    return o.c0


def _v1_inputs(o: Obs) -> list:
    """What V1 feeds, index by index (None: the drafter's proposal, ours): the token ids
    it holds at the runner's positions (the scheduler's below `entered_at`, -1 from there),
    the previous step's sampled token at the last non-draft index when r stays, and the
    scheduler's -1 drafts when it does not."""
    tokens, stays = o.seen["tokens"], _stays(o)
    out = []
    for i in range(o.n):
        q = o.start + i
        if i >= o.n - o.ks:
            out.append(None if stays else -1)
        elif stays and i == o.n - o.ks - 1:
            out.append(SAMPLED)
        else:
            out.append(tokens[q] if q < min(o.entered_at, len(tokens)) else -1)
    return out


def _nondraft_placeholders(o: Obs) -> list[int]:
    return [p for p in o.seen["placeholder_at"] if p < o.c0 + o.n - o.ks]


def _same(fed, predicted) -> bool:
    return len(fed) == len(predicted) and all(p is None or f == p for f, p in zip(fed, predicted))


def _model_positions_agree(o: Obs) -> bool:
    from vllm_contract.spec.engine import pending_rejections
    from vllm_contract.spec.ops import INT_OPS
    from vllm_contract.spec.state import View

    pend = pending_rejections(View(o.cfg, o.before), o.cfg, INT_OPS, o.r)
    return o.row["num_computed"] == o.before[("num_computed_tokens", o.r)] - pend


def V1(o) -> bool:
    return o.cfg.is_v1


def V2(o) -> bool:
    return o.cfg.is_v2


SAMPLED = 11  # the stub forward pass's token (real_runner.SAMPLED_ID)

CONDITIONS: tuple[Condition, ...] = (
    Condition(
        "contiguous",
        "every runner feeds positions start, start+1, ..., start+n-1 (n the scheduler's)",
        lambda o: True,
        lambda o: o.seen["contiguous"] and o.seen["length"] == o.n,
    ),
    Condition(
        "v2-start",
        "V2: start = g, the slot's num_computed after add_requests (v2_num_computed[r] as the step's row reads it)",
        V2,
        lambda o: o.start == o.row["num_computed"],
    ),
    Condition(
        "v1-start",
        "V1: start = last.start + 1 + last.accepted if r stays in the batch and had drafts in "
        "its last step (async spec decode), else c0",
        V1,
        lambda o: o.start == _v1_start(o),
    ),
    Condition(
        "positions-agree",
        "start = c0 - pend (the scheduler's positions, net of in-flight rejections)",
        lambda o: True,
        lambda o: o.start == o.c0 - o.pend,
    ),
    Condition(
        "v2-disagree-only-after-kv-or-stale",
        "V2: g != c0 - pend only after a KV-load failure rolled r back "
        "since its slot was written, or when that write was a stale read",
        V2,
        lambda o: o.row["num_computed"] == o.c0 - o.pend or o.kv_since_add or o.stale_since_add,
    ),
    Condition(
        "v2-kv-disagrees",
        "V2: a KV-load failure since the slot was written leaves g > c0 - pend",
        lambda o: V2(o) and o.kv_since_add and not o.stale_since_add,
        lambda o: o.row["num_computed"] > o.c0 - o.pend,
    ),
    Condition(
        "v1-disagree-only-after-kv",
        "V1: start != c0 - pend only after a KV-load failure rolled r back "
        "while it stayed in the batch, with drafts in its last step",
        V1,
        lambda o: o.start == o.c0 - o.pend or (o.kv_since_add and _stays(o) and o.last[2] > 0),
    ),
    Condition(
        "v1-inputs",
        "V1 (positions as the scheduler's): the ids fed are _v1_inputs",
        lambda o: V1(o) and o.start == o.c0,
        lambda o: _same(o.seen["fed_ids"], _v1_inputs(o)),
    ),
    Condition(
        "v1-nondraft-placeholder-only-after-kv",
        "V1: -1 at a non-draft position only after a KV-load failure rolled r back since it entered the batch",
        V1,
        lambda o: not _nondraft_placeholders(o) or o.kv_since_add,
    ),
    Condition(
        "v1-draft-placeholders-iff-not-stays",
        "V1: its drafts are fed as -1 iff ks > 0 and r does not stay "
        "(admitted, not in the batch before, or not sampled in the last non-empty step)",
        V1,
        lambda o: (o.ks > 0 and not _stays(o)) == any(p >= o.c0 + o.n - o.ks for p in o.seen["placeholder_at"]),
    ),
    Condition(
        "v1-wrong-only-after-kv",
        "V1: an id other than the scheduler's token (below T) only after a KV-load "
        "failure rolled r back since it entered the batch",
        V1,
        lambda o: not o.seen["wrong_at"] or o.kv_since_add,
    ),
    Condition("v2-no-placeholder", "V2 never feeds -1", V2, lambda o: not o.seen["placeholder_at"]),
    # the spec's two runner properties, as the model predicts them step by step, against
    # what the real runner did: a difference means the model is wrong about the runner
    Condition(
        "spec-positions-agree",
        "V2: the model's positions-agree (slot count = c - pending rejections, "
        "spec/engine.py) holds exactly when the real runner started at c0 - pend",
        V2,
        lambda o: _model_positions_agree(o) == (o.start == o.c0 - o.pend),
    ),
    Condition(
        "spec-no-placeholder-input",
        "V1: the model's no-placeholder-input (spec/runners.py v1_decide) is "
        "violated exactly when the real runner fed -1 at a non-draft position",
        V1,
        lambda o: bool(o.row["placeholder_input"]) == bool(_nondraft_placeholders(o)),
    ),
    Condition(
        "v2-inputs-right-unless-misplaced",
        "V2: an input id other than the scheduler's token only when g != c0 - pend or the slot was read stale",
        V2,
        lambda o: not o.seen["wrong_at"] or o.row["num_computed"] != o.c0 - o.pend or o.stale_since_add,
    ),
)


def conditions() -> tuple[Condition, ...]:
    return CONDITIONS


# ------------------------------------------------------------------ running


def generated_traces():
    """Every generated case, arm of the loaded release, as (where, cfg, init, steps)."""
    from vllm_contract.adapter import current as vllm_env
    from vllm_contract.bench import generated_cases

    profile = vllm_env.tree().profile
    for path, case in generated_cases():
        for label, (overrides, _) in case.arms.items():
            cfg = case.config_for(overrides)
            if cfg.profile != profile or cfg.clamp or getattr(cfg, "guard", "none") != "none":
                continue
            if not cfg.run.in_vllm:
                continue
            yield f"{path} [{label}]", cfg, dict(case.init), list(case.steps)


def fuzz_traces(names, cases: int, seed: int = 0, length: int = 40):
    from vllm_contract.adapter import current as vllm_env
    from vllm_contract.model.sampler import random_trace
    from vllm_contract.targets.fuzz.differential import draw_for
    from vllm_contract.targets.fuzz.presets import PRESETS

    profile = vllm_env.tree().profile
    draw = draw_for("real")
    for name in names:
        cfg = PRESETS[name].with_(profile=profile)
        for case in range(cases):
            case_seed = seed * 100003 + case
            init, steps, _ = random_trace(cfg, random.Random(case_seed), length, draw=draw)
            yield f"{name} seed {case_seed}", cfg, init, [(e, nested(a)) for e, a in steps]


def measure(traces, target, conds=None) -> dict[str, Any]:
    """Check every condition on every observation; returns counts and first failures."""
    from vllm_contract.spec.errors import TargetUnavailable

    conds = conds or conditions()
    held, failed, first = Counter(), Counter(), {}
    total = Counter()
    for where, cfg, init, steps in traces:
        try:
            found = observe(cfg, init, steps, target, where)
        except TargetUnavailable:
            continue
        for o in found:
            total[cfg.run.family] += 1
            for c in conds:
                if not c.applies(o):
                    continue
                if c.holds(o):
                    held[c.name] += 1
                else:
                    failed[c.name] += 1
                    first.setdefault(c.name, o)
    return {"total": total, "held": held, "failed": failed, "first": first}


def report(result, conds=None) -> str:
    conds = conds or conditions()
    lines = [f"observations (scheduled request-steps): {dict(result['total'])}"]
    for c in conds:
        h, f = result["held"][c.name], result["failed"][c.name]
        lines.append(f"{'OK  ' if not f else 'FAIL'} {c.name}: held {h}, failed {f}")
        lines.append(f"     {c.statement}")
        if f:
            o = result["first"][c.name]
            lines.append(
                f"     first failure: {o.where}, r{o.r}: runner {_brief(o.seen)}, pend {o.pend}, "
                f"last {o.last}, kv_since_add {o.kv_since_add}, entered_at {o.entered_at}"
            )
            lines.append(
                "     state: "
                + ", ".join(
                    f"{k[0]}={v}"
                    for k, v in o.before.items()
                    if len(k) == 2 and k[1] == o.r and not k[0].startswith("q_")
                )
            )
            lines.append(f"     trace: {o.trace}")
    return "\n".join(lines)


def _brief(seen: dict) -> str:
    keys = (
        "start",
        "length",
        "sched_start",
        "sched_length",
        "spec",
        "known_tokens",
        "placeholder_at",
        "wrong_at",
        "prefill_len",
    )
    return str({k: seen[k] for k in keys if k in seen}) + f" fed {seen['fed_ids'][:24]}"


def main(argv=None) -> int:
    from vllm_contract.adapter import current as vllm_env
    from vllm_contract.targets.fuzz.presets import PRESETS

    ap = argparse.ArgumentParser(
        prog="vllm-contract bench runner-measure",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--vllm", default=None)
    ap.add_argument("--cases", type=int, default=50, help="fuzz traces per preset (0: generated cases only)")
    ap.add_argument("--config", action="append", help="fuzz presets (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--small",
        action="store_true",
        help="two generated traces, one fuzz trace of one preset (a check that it runs)",
    )
    ns = ap.parse_args(argv)
    if ns.small:
        ns.cases, ns.config = min(ns.cases, 1), ns.config or [next(iter(PRESETS))]
    vllm_env.select(ns.vllm)
    from vllm_contract.targets.real_runner import RealRunnerTarget

    target = RealRunnerTarget()
    print(f"{vllm_env.describe()}")
    print("== generated cases (clamp-off arm of the loaded release)")
    generated = generated_traces()
    print(report(measure(itertools.islice(generated, 2) if ns.small else generated, target)))
    if ns.cases:
        names = ns.config or list(PRESETS)
        print(f"== fuzz traces: {ns.cases} per preset over {len(names)} presets, seed {ns.seed}")
        print(report(measure(fuzz_traces(names, ns.cases, ns.seed), target)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

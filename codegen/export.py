"""A generated case as a test of vLLM's own test suite (tests/v1/core/), for a vLLM PR.

The module imports vllm, torch-free helpers of vLLM's tests (tests/v1/core/utils.py)
and pytest, never this project: the runner's per-step decisions are data (hand-built
ModelRunnerOutputs, each commented with the runner's rule evaluated), the case's
property is a plain assert at the step where the model says it breaks, and the
configuration's healthy path is the control beside it. `expected.json` beside the
modules says, per test, where it must fail on the release as it is and whether it must
pass with the step-reservation guard (fixes/export_check.py checks both on vLLM's code).
docs/export.md says what is exported and why the rest is not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from vllm_contract.codegen.case import arm_label
from vllm_contract.codegen.cases import CaseSource, runner_rule
from vllm_contract.codegen.render import cited, environment
from vllm_contract.model.run import Run
from vllm_contract.spec import citations
from vllm_contract.spec.config import Config
from vllm_contract.spec.properties import ASSERTS, PROPERTIES

GUARD = "step-reservation"
MAX_MODEL_LEN = 2048  # facebook/opt-125m's (the model vLLM's scheduler tests configure)

# the releases whose Model Runner V2 rejects the ngram_gpu drafts the exported tests use
# (VllmConfig._get_v2_model_runner_unsupported_features); 0.32.0 accepts them
V2_REFUSES_NGRAM = "v2-unsupported-ngram-gpu"


def _v2_refuses_ngram(release: str) -> str | None:
    """Where the release's V2 validation refuses ngram_gpu drafts (`vllm/FILE:LINES`, the
    citation's lines in that release), or None where it accepts them."""
    if release not in citations.load()[V2_REFUSES_NGRAM].releases():
        return None
    file, first, last, _ = citations.resolve(V2_REFUSES_NGRAM, release)
    return f"vllm/{file}:{first}-{last}"


# the properties a test asserts on the scheduler's own state; the others that vLLM
# asserts itself need no assert of ours (its assert is the check)
STATE_CHECKS = ("counter-nonnegative", "computed-nonnegative", "no-token-while-prefilling")
# the properties that are one of vLLM's scheduler asserts (a runner's is RUNNER_LEVEL's)
VLLM_ASSERTED = tuple(
    name for name, p in PROPERTIES.items() if p.asserts and all(ASSERTS[a].site == "scheduler" for a in p.asserts)
)
# runner-level properties: asserting them needs vLLM's model runner, not only the
# scheduler; where the same trace fires one of vLLM's scheduler asserts on the release,
# that is exported as the finding's scheduler-level part
RUNNER_LEVEL = {
    "predicates-agree": "a runner-level property (the runner's discard against the scheduler's "
    "reservation): it needs vLLM's model runner, not only the scheduler",
    "positions-agree": "a runner-level property (the V2 runner's slot positions): it needs vLLM's V2 model runner",
    "no-placeholder-input": "a runner-level property (the V1 runner's input ids): it needs vLLM's V1 model runner",
    "logits-covered": "a runner-level property (the V2 runner's assert on its logits rows): it needs vLLM's V2 "
    "model runner",
    "runner-tokens-agree": "a runner-level property (tpu-inference's runner's own token list): it needs the "
    "plugin's runner, not only vLLM's scheduler",
    "prefill-view-agrees": "a runner-level property (vllm-ascend's attention view of a row): it needs the "
    "plugin's runner, not only vLLM's scheduler",
}
NOT_YET = {
    "placeholder-accounting": "the expected count spans in-flight steps since the last preemption or stop: "
    "not exported yet",
    "never-drops": "a property of the guard itself (its arms only), not of a release",
    "drops-only-unreserved": "a property of the guard itself (its arms only), not of a release",
}


@dataclass
class ExportedTest:
    name: str
    doc: list[str]
    requests: list[dict]
    steps: list[dict]
    expect: dict  # what export-check requires of it


@dataclass
class Exported:
    """One module: the violation test and its healthy-path control."""

    module: str  # file name under build/export/<release>/
    case: str
    release: str
    text: str
    tests: list[ExportedTest] = field(default_factory=list)
    plugin: str = ""  # the platform plugin the module needs installed (its scheduler patch), if any


def _release_arm(src: CaseSource, release: str, guard: bool = False):
    label = arm_label(f"vllm-{release}", False, GUARD if guard else "none")
    return src.case.arms.get(label)


def why_not(src: CaseSource, release: str) -> str | None:
    """Why this case is not exported for this release (None: it is)."""
    prop = src.case.property
    if src.case.kind == "divergence":
        return "a fuzz divergence: a check of a vLLM target against the model, not a property vLLM asserts"
    if src.case.kind != "violation":
        return "a healthy path (exported as the control of its configuration's violations)"
    if prop in NOT_YET:
        return NOT_YET[prop]
    if "under-drain" in src.case.config.get("faults", ()):
        return "the under-drain fault is a platform plugin's rewrite of the scheduler output, not yet exported"
    if "lost-sample" in src.case.config.get("faults", ()):
        return "the lost-sample fault is a runner's output without a sample it made, not yet exported"
    # a plugin's runner is exported as vLLM's are: the test drives vLLM's scheduler with the
    # runner's returns as data (its rule evaluated in a comment); a plugin that also
    # patches the scheduler (Continue Decode) is exported with its patch called
    if prop not in STATE_CHECKS and prop not in VLLM_ASSERTED and prop not in RUNNER_LEVEL:
        return f"{prop}: no state assert is defined for it yet"
    arm = _release_arm(src, release)
    if arm is None or _release_arm(src, release, guard=True) is None:
        return f"the case predicts no arm for vLLM {release}, plain and with the guard"
    for ends in (arm[1].fired, _release_arm(src, release, guard=True)[1].fired):
        at = ASSERTS[ends[0]] if ends else None
        if at is not None and not at.statement:
            # a plugin runner's failure (tpu-inference's pop of an empty list) or the model's own end
            return f"it ends where the model ends the engine ({at.doc or at.name}), at no assert of vLLM's scheduler"
        if at is not None and at.site != "scheduler":
            # the test feeds the scheduler outputs of its own making: a runner's assert never runs
            return f"it ends at vLLM's {at.site} assert `{at.statement}`, which a scheduler test does not run"
    cfg = src.case.config_for(arm[0])
    if cfg.spec_tokens and "over-delivery" in cfg.faults and _accepts_beyond_drafts(src.case, cfg):
        # found by export-check 0.32.0: vLLM's tests build the scheduler with log_stats on
        return (
            f"its over-delivery returns more than 1 + {cfg.spec_tokens} tokens for a step: with log_stats on (as "
            "vLLM's tests and `vllm serve` run) the spec-decoding stats' `assert num_accepted_tokens <= "
            "self.num_spec_tokens` fires first, which the model does not cover (its targets run without stats)"
        )
    refused_at = _v2_refuses_ngram(release) if cfg.is_v2 and cfg.spec_tokens else None
    if refused_at:
        return (
            f"vLLM {release}'s Model Runner V2 refuses ngram drafts ({refused_at}) "
            "and every draft method it accepts needs a draft model"
        )
    longest = max(src.case.init["prompt_len"]) + sum(a.get("new_tokens", 0) for _, a in src.case.steps)
    if longest >= MAX_MODEL_LEN:
        return f"a request of {longest} tokens does not fit facebook/opt-125m's {MAX_MODEL_LEN}"
    if prop in RUNNER_LEVEL and not arm[1].fired:
        return f"{RUNNER_LEVEL[prop]}; on vLLM {release} the scheduler notices nothing (no assert fires)"
    if not (arm[1].fired or (arm[1].violations and prop in STATE_CHECKS)):
        # what a test can see: vLLM's assert firing, or a violation of a state the test asserts
        return f"{prop} holds on vLLM {release} as released (the case shows it on other releases)"
    return None


def _rid(r: int) -> str:
    return f"r{r}"


def _literal(value) -> str:
    """A dict, tuple or scalar as ruff format writes it (double quotes)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_literal(v) for v in value) + ")"
    if isinstance(value, str):
        return '"' + value + '"'
    return repr(value)


WIDTH = 84  # vLLM's ruff line length (88) less a function body's indent


def _wrap(text: str, indent: str = "", width: int = WIDTH - 2) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def _doc(paragraphs: list[str]) -> list[str]:
    """A test's docstring lines ("" between paragraphs): the first line leaves room
    for the opening quotes."""
    lines: list[str] = []
    for text in paragraphs:
        if not text:
            lines.append("")
        elif lines:
            lines += _wrap(text)
        else:
            head, *rest = _wrap(text, width=WIDTH - 3)
            lines += [head] + (_wrap(" ".join(rest)) if rest else [])
    return lines


def _steps(cfg: Config, src_case, check_prop: str | None, check_at: set[int]) -> list[dict]:
    """The test body, a step at a time: comments that say what the step does and why
    the runner returns what it returns, the calls, and the property's asserts at the
    steps in `check_at` (every step when `check_at` is empty and check_prop is set)."""
    out = []
    pending: list[int] = []  # schedule steps in flight, oldest first
    for played in Run(cfg, src_case.init, src_case.steps):
        n, event, args = played.number, played.event, played.named
        before, after = played.before, played.state
        comments, code = [], []
        kv = -1  # the request whose KV load fails in this step (a delivery), if any
        checked = check_prop and (not check_at or n in check_at)
        if event == "schedule":
            slot = before[("queue_len",)]
            returns = {}
            comments.append(f"step {n}: schedule with a token budget of {args['budget']}")
            for r in range(cfg.requests):
                scheduled = after[("q_scheduled", slot, r)]
                if not scheduled:
                    continue
                sampled = after[("q_sampled", slot, r)]
                reserved = after[("q_reserved", slot, r)]
                returns[_rid(r)] = sampled
                comments.append(
                    f"  r{r}: {scheduled} token(s) scheduled, {reserved} placeholder(s) reserved; "
                    f"the runner returns {sampled}"
                )
                rule = runner_rule(cfg, played.result.observed, r)
                if rule:
                    comments.append(f"  ({cfg.run.phrase}: {rule})")
            pending.append(n)
            call = f"_schedule(scheduler, budget={args['budget']}, returns={_literal(returns)})"
            if len(call) + len("in_flight.append()") <= WIDTH:
                code.append(f"in_flight.append({call})")
            else:
                code += [f"step_{n} = {call}", f"in_flight.append(step_{n})"]
        elif event == "deliver":
            source = pending.pop(0) if pending else None
            stop = {_rid(r): s for r, s in enumerate(args.get("stop") or []) if s}
            kv = args.get("kv_fail_req", -1)
            words = f"step {n}: the runner's output of step {source} arrives"
            if stop:
                words += "; " + ", ".join(f"{k} stops on its returned token {s}" for k, s in stop.items())
            if kv is not None and kv >= 0:
                words += f"; the KV load of r{kv}'s block {args['kv_fail_block']} failed"
            comments.append(words)
            grew = [
                r
                for r in range(cfg.requests)
                if after[("num_tokens", r)] > before[("num_tokens", r)]
                and before[("q_scheduled", 0, r)]
                and not before[("q_reserved", 0, r)]
            ]
            if checked and check_prop == "no-token-while-prefilling":
                code += [f"outputs_r{r} = r{r}.num_output_tokens" for r in grew]
            call = "_deliver(scheduler, in_flight.popleft()"
            if stop:
                call += f", stop={_literal(stop)}"
            if kv is not None and kv >= 0:
                call += f", kv_failed={_literal((_rid(kv), args['kv_fail_block']))}"
            code.append(call + ")")
            if checked and check_prop == "no-token-while-prefilling":
                for r in grew:
                    code.append(
                        f'assert r{r}.num_output_tokens == outputs_r{r}, "step {n}: a token from a prefill chunk"'
                    )
        elif event == "preempt":
            r = args["req"]
            drop = bool(args.get("drop", cfg.has("preempt-drop")))
            comments.append(f"step {n}: r{r} is preempted (as schedule() does under KV pressure)")
            code.append(f"scheduler.running.remove(r{r})")
            code.append(f"scheduler._preempt_request(r{r}, time.monotonic(), drop_stale_output={drop})")
        elif event == "reset_prefix_cache":
            comments.append(f"step {n}: the prefix cache is reset, running requests included")
            if played.result.observed.get("reset_fails"):
                # a session still holds blocks: vLLM raises after the preemptions, and the engine runs on
                comments.append("  (a streaming session holds KV blocks: the call raises after the preemptions)")
                code.append('with pytest.raises(RuntimeError, match="Failed to reset KV cache"):')
                code.append("    scheduler.reset_prefix_cache(reset_running_requests=True)")
            else:
                code.append("scheduler.reset_prefix_cache(reset_running_requests=True)")
        elif event == "stream_update":
            r = args["req"]
            if cfg.has("prefix-cache"):  # spec/config.py refuses the pair
                raise ValueError(f"step {n}: a streaming update under prefix caching has no prompt to export")
            comments.append(f"step {n}: a streaming update of r{r} arrives with {args['new_tokens']} new token(s)")
            code.append(f"update = _request({_literal(_rid(r))}, {args['new_tokens']}, {cfg.block_size})")
            code.append("update.resumable = True")
            code.append("scheduler.add_request(update)")
        elif event == "abort":
            r = args["req"]
            comments.append(f"step {n}: r{r} is aborted")
            code.append(f"scheduler.finish_requests({_literal(_rid(r))}, RequestStatus.FINISHED_ABORTED)")
        else:
            raise ValueError(f"step {n}: no vLLM call is known for event {event!r}")
        if checked and check_prop == "counter-nonnegative":
            for r in range(cfg.requests):
                code.append(f'assert r{r}.num_output_placeholders >= 0, f"step {n}: {{r{r}.num_output_placeholders}}"')
        if checked and check_prop == "computed-nonnegative":
            for r in range(cfg.requests):
                code.append(f'assert r{r}.num_computed_tokens >= 0, f"step {n}: {{r{r}.num_computed_tokens}}"')
        for name in played.fired:
            comments.append(f"  (the model predicts that vLLM's `{ASSERTS[name].statement}` fires here)")
        wrapped = [line for c in comments for line in _wrap(c, " " * (len(c) - len(c.lstrip()) + 2))]
        kv_failed = kv is not None and kv >= 0
        out.append({"number": n, "event": event, "comments": wrapped, "code": code, "kv_failed": kv_failed})
    return out


def _expect(arm, prop: str) -> dict:
    """What one arm predicts of the test: where it fails, or that it passes."""
    _overrides, exp = arm
    if exp.fired:
        name, step = exp.fired
        return {"outcome": "failed", "step": step, "statement": ASSERTS[name].statement}
    if exp.violations and prop in STATE_CHECKS:
        return {"outcome": "failed", "step": exp.violations[0], "statement": None}
    if exp.violations:  # a property vLLM asserts, violated without its assert firing: nothing to see
        return {"outcome": "passed", "note": f"{prop} is violated at step {exp.violations[0]} without an assert"}
    return {"outcome": "passed"}


def _requests(case, cfg: Config) -> list[dict]:
    """Each request's prompt: its length, whether it is a streaming session, and under
    prefix caching the tokens every prompt starts with (the trace's shared_prefix, 0 if
    it names none, as the vLLM target reads it: targets/vllm_target.py)."""
    resumable = case.init.get("resumable") or [False] * cfg.requests
    shared = case.init.get("shared_prefix", 0) if cfg.has("prefix-cache") else None
    return [
        {
            "index": r,
            "prompt_len": case.init["prompt_len"][r],
            "resumable": bool(resumable[r]),
            "shared_prefix": shared,
        }
        for r in range(cfg.requests)
    ]


def _scheduler_args(cfg: Config) -> list[str]:
    per_request = -(-MAX_MODEL_LEN // cfg.block_size) + 1
    args = [
        "max_num_seqs=" + str(cfg.requests),
        "max_num_batched_tokens=MAX_MODEL_LEN",
        "max_model_len=MAX_MODEL_LEN",
        f"num_blocks={cfg.requests * per_request + 1}",
        f"block_size={cfg.block_size}",
        f"long_prefill_token_threshold={cfg.long_prefill_threshold}",
        "async_scheduling=True",
    ]
    if cfg.prof.has_v1_runner:
        # up to 0.33.0 the helper chooses the runner; 0.34.0 removed V1, and with it the
        # parameter ([cite:v1-runner-removed])
        args.append(f"use_v2_model_runner={cfg.is_v2}")
    if cfg.has("prefix-cache"):
        # create_scheduler's default is off (tests/v1/core/utils.py); the vLLM target
        # builds its CacheConfig with the configuration's (adapter/construct.py)
        args.append("enable_prefix_caching=True")
    if cfg.pp > 1:
        args.append(f"pipeline_parallel_size={cfg.pp}")
    if cfg.spec_tokens:
        # ngram_gpu: accepted with async scheduling and needs no draft model
        args += [f"num_speculative_tokens={cfg.spec_tokens}", 'speculative_method="ngram_gpu"']
    return args


def _accepts_beyond_drafts(case, cfg: Config) -> bool:
    """Some step's runner returns a request that has drafts scheduled more than 1 + K
    tokens (accepted drafts plus over-delivered ones): what vLLM's stats count as
    accepted would exceed K."""
    for played in Run(cfg, case.init, case.steps):
        extra = played.named.get("extra") if played.event == "schedule" else None
        if not extra:
            continue
        slot = played.before[("queue_len",)]
        accepted = played.named.get("accepted") or [0] * cfg.requests
        for r in range(cfg.requests):
            drafts = played.state[("q_spec", slot, r)]
            if drafts and accepted[r] + extra[r] > cfg.spec_tokens:
                return True
    return False


def export(src: CaseSource, release: str, healthy: CaseSource | None) -> Exported:
    """The module for one violation case on one release, with its control."""
    case = src.case
    prop = case.property
    arm = _release_arm(src, release)
    cfg = case.config_for(arm[0])
    guard_arm = _release_arm(src, release, guard=True)
    on_release = _expect(arm, prop)
    step = on_release.get("step")
    check_at = {step} if step else set()
    # the lines of what fails: the property's, or for a runner-level property the
    # scheduler assert that shows it
    shown_by = prop
    if prop in RUNNER_LEVEL and arm[1].fired:
        shown_by = ASSERTS[arm[1].fired[0]].property
    where = cited(shown_by, release)
    if on_release["outcome"] == "failed" and on_release["statement"]:
        fails = f"fails at `{on_release['statement']}` ({where}) in step {step}"
    elif on_release["outcome"] == "failed":
        fails = f"fails at its own assert in step {step}: nothing in vLLM notices"
    else:
        fails = "passes"
    guarded = _expect(guard_arm, prop)
    with_guard = (
        "passes with the step-reservation guard"
        if guarded["outcome"] == "passed"
        else "fails with the step-reservation guard too"
    )
    doc = [
        f"On vLLM {release} as released this {fails}; it {with_guard}.",
        "",
        f"The property: {PROPERTIES[prop].doc}.",
    ]
    if prop in RUNNER_LEVEL:
        doc += [
            "",
            "That is a property of the model runner, which this test does not run; what it checks "
            "is the finding's scheduler-level part, the assert vLLM's scheduler fires.",
        ]
    tests = [
        ExportedTest(
            name="test_" + case.name,
            doc=_doc(doc),
            requests=_requests(case, cfg),
            steps=_steps(cfg, case, prop, check_at),
            expect={"release": on_release, "guard": guarded},
        )
    ]
    if healthy is not None:
        h_arm = _release_arm(healthy, release)
        h_cfg = healthy.case.config_for(h_arm[0])
        check = prop if prop in STATE_CHECKS else None
        tests.append(
            ExportedTest(
                name=f"test_{healthy.case.name}_control",
                doc=_doc(
                    [
                        f"The control: a healthy path of the same configuration ({h_cfg.scenario}), on "
                        + (
                            f"which {prop} holds at every step"
                            if check or prop in VLLM_ASSERTED
                            else "which no assert of vLLM's scheduler fires"
                        )
                        + " and a request completes; it passes with and without the guard."
                    ]
                ),
                requests=_requests(healthy.case, h_cfg),
                steps=_steps(h_cfg, healthy.case, check, set()),
                expect={"release": {"outcome": "passed"}, "guard": {"outcome": "passed"}},
            )
        )
    patch = cfg.run.scheduler_patch
    events = {s["event"] for t in tests for s in t.steps}
    prefix_cache = cfg.has("prefix-cache")
    kvfail = any(s["kv_failed"] for t in tests for s in t.steps)  # _deliver takes kv_failed only if a step uses it
    outputs = ["ModelRunnerOutput"] + (["KVConnectorOutput"] if kvfail else [])
    text = (
        environment()
        .get_template("export.py.j2")
        .render(
            summary=_wrap(_first_sentence(src.sentence).replace(src.cfg.profile, f"vllm-{release}")),
            patch=patch,
            plugin_about=_plugin_about(cfg),
            about=_wrap(
                "Generated by vllm-contract (`make export`) from its trace "
                f"{Path(src.trace_path).as_posix().split('build/prove/', 1)[-1]}. The AsyncScheduler is "
                "driven with hand-built ModelRunnerOutputs, each returning the tokens the model runner "
                "returns for that step by the runner's own rule (the comments evaluate it). They do not "
                "mirror the runner's code: a mock that reimplemented the runner's discard predicate would "
                "assume away the disagreement this test exists to catch."
            ),
            vllm_imports=_vllm_imports(outputs, cfg.is_v2, "abort" in events, prefix_cache, patch is not None),
            prefix_cache=prefix_cache,
            runner_doc=_wrap(cfg.run.doc),
            v2=cfg.is_v2,
            scheduler_args=_scheduler_args(cfg),
            kvfail=kvfail,
            # ModelRunnerOutput.req_id_to_index went with the V1 runner in 0.34.0: update_from_output
            # finds a row by its position ([cite:output-req-id-to-index], [cite:output-indexed-by-position])
            output_index=cfg.prof.has_v1_runner,
            block_size=cfg.block_size,
            tests=tests,
            needs_time="preempt" in events,
            needs_status="abort" in events,
        )
    )
    module = f"test_contract_{case.name}.py"
    return Exported(
        module=module, case=case.name, release=release, text=text, tests=tests, plugin=patch.plugin if patch else ""
    )


def _one_per_case(sources: list[CaseSource], release: str) -> list[CaseSource]:
    """A case name can stand for traces found on several releases (each module of
    generated_tests/cases/<release>/ plays every release's arms): the trace found on
    `release` itself (the report's page of that release shows it), else the first by
    module path (the oldest release's)."""
    by_name: dict[str, list[CaseSource]] = {}
    for src in sorted(sources, key=lambda s: s.module):
        by_name.setdefault(src.case.name, []).append(src)
    profile = f"vllm-{release}"
    return [
        next((s for s in group if profile in (s.cfg.profile, *s.also_found_on)), group[0])
        for _name, group in sorted(by_name.items())
    ]


def _vllm_imports(outputs: list[str], v2: bool, status: bool, prefix_cache: bool, patch: bool) -> list[str]:
    """The module's imports from vllm, in isort's order."""
    found = {
        **({"vllm.v1.core.sched.async_scheduler": ["AsyncScheduler"]} if patch else {}),
        "vllm.v1.core.sched.output": ["SchedulerOutput"],
        "vllm.v1.outputs": sorted(outputs),
        "vllm.v1.request": ["Request"] + (["RequestStatus"] if status else []),
    }
    if prefix_cache:  # _request builds each prompt (create_requests' are all alike)
        found["vllm.sampling_params"] = ["SamplingParams"]
        found["vllm.utils.hashing"] = ["sha256"]
        found["vllm.v1.core.kv_cache_utils"] = ["get_request_block_hasher", "init_none_hash"]
    if v2:
        found["vllm.triton_utils"] = ["HAS_TRITON"]
    return [f"from {module} import {', '.join(names)}" for module, names in sorted(found.items())]


def _first_sentence(text: str) -> str:
    return text.split(". ", 1)[0].rstrip(".") + "."


def healthy_of(sources: list[CaseSource]) -> dict[str, list[CaseSource]]:
    """The healthy paths of each scenario, by module path."""
    out: dict[str, list[CaseSource]] = {}
    for src in sorted(sources, key=lambda s: s.module):
        if src.case.kind == "witness":
            out.setdefault(src.cfg.scenario, []).append(src)
    return out


def _plugin_about(cfg: Config) -> list[str]:
    """What a module of a platform plugin's runner says to the plugin's CI (which runs
    vLLM's tests/v1/core), wrapped; nothing for vLLM's own runners."""
    run, patch = cfg.run, cfg.run.scheduler_patch
    if patch:
        return _wrap(
            f"For {patch.plugin}'s CI, which runs vLLM's tests/v1/core: it needs {patch.plugin} "
            f"installed, and calls its own patch of vLLM's scheduler ({patch.module}."
            f"{patch.function}) before each test, putting vLLM's classes back after. "
            "tests/v1/core/utils.py's create_scheduler passes no additional_config, so the patch "
            "keeps its default max_decode_steps for the lookahead it reserves; the tokens each step "
            f"returns are this configuration's (at most {run.continue_decode})."
        )
    if run.plugin and not run.in_vllm:
        return _wrap(
            f"For {run.plugin}'s CI, which runs vLLM's tests/v1/core: each step returns what "
            f"{run.phrase} returns by its rule, as data; the test checks what vLLM's scheduler does "
            f"with those tokens, not {run.plugin}'s runner itself, and needs nothing of {run.plugin} installed."
        )
    return []


def control_for(src: CaseSource, release: str, healthy: dict[str, list[CaseSource]]) -> CaseSource | None:
    """The first healthy path of src's scenario whose arm on the release is healthy there too
    (a scenario may run on another runner there: 0.34.0 runs V1's scheduler-level findings
    on V2; and a path healthy where it was found may break on another release: tpu-inference
    Continue Decode's with a stop inside the window, found on 0.32.0, fires the counter
    assert on 0.33.0)."""

    def healthy_on(h: CaseSource) -> bool:
        # the control asserts src's property at every step: a path that breaks it anywhere
        # (vllm-metal's witness samples a prefill chunk on its way) is no control of it
        arm = _release_arm(h, release)
        return (
            arm is not None
            and not arm[1].fired
            and not arm[1].violations
            and all(prop != src.case.property for prop, _ in arm[1].others)
        )

    return next((h for h in healthy.get(src.cfg.scenario, ()) if healthy_on(h)), None)


def exportable(src: CaseSource, release: str, healthy: dict[str, list[CaseSource]]) -> str | None:
    """Why `src` is not exported for `release` (None: it is); `healthy` as healthy_of gives."""
    reason = why_not(src, release)
    if reason is None and control_for(src, release, healthy) is None:
        reason = f"no healthy path of {src.cfg.scenario} on {release} to be its control"
    return reason


def outcome_words(mod: Exported) -> str:
    """Where the module's violation test fails on its release, and what the guard does."""
    expect = mod.tests[0].expect
    on, guard = expect["release"], expect["guard"]
    if on["outcome"] == "failed" and on["statement"]:
        words = f"fails on vLLM {mod.release} as released at vLLM's `{on['statement']}` in step {on['step']}"
    elif on["outcome"] == "failed":
        words = f"fails on vLLM {mod.release} as released at its own assert in step {on['step']} (vLLM notices nothing)"
    else:
        words = f"passes on vLLM {mod.release}"
    with_guard = "passes" if guard["outcome"] == "passed" else "still fails"
    return f"{words}, and {with_guard} with the step-reservation guard"


def as_markdown(mod: Exported) -> list[str]:
    """The module for a report page or a review comment: how to use it, then its text
    collapsed."""
    path = f"tests/v1/core/{mod.module}"
    needs = f" with {mod.plugin} installed (it calls {mod.plugin}'s patch of the scheduler)" if mod.plugin else ""
    return [
        f"`{mod.module}`: paste it into `tests/v1/core/` of a vLLM {mod.release} checkout and run "
        f"`pytest {path}` there{needs}. Its violation test {outcome_words(mod)}; its `_control` test "
        f"passes on both. `make export CASE={mod.case} RELEASE={mod.release}` writes it, and "
        "`make export-check` runs it in that release's own test tree.",
        "",
        "<details>",
        f"<summary>{mod.module} ({len(mod.text.splitlines())} lines)</summary>",
        "",
        "```python",
        mod.text.rstrip("\n"),
        "```",
        "",
        "</details>",
    ]


def case_names(prove_dir: Path) -> set[str]:
    """Every case name a prover result can give (generate's module names, from the trace
    files' names alone: nothing replayed), so a --case matching none of them is refused
    before the cases are built (a minute)."""
    from vllm_contract.codegen.cases import module_path

    names = set()
    for path in (Path(prove_dir) / "traces").rglob("*.itf.json"):
        stem = path.name.removesuffix(".itf.json")
        goal, _, index = stem.partition(".")
        kind = "witness" if goal == "witness" else "violation"
        module = module_path("any", path.parent.name.split("@")[0], kind, goal, int(index) if index.isdigit() else 0)
        names.add(Path(module).stem.removeprefix("test_"))
    return names


def export_release(sources: list[CaseSource], release: str, pattern: str = "*") -> tuple[dict[str, str], list, list]:
    """The files of build/export/<release>/: a module per exportable case, expected.json
    (what export-check requires of each test) and README.md (what was left out, and
    why). Returns (files by name, exported modules, (case, reason) left out)."""
    from fnmatch import fnmatch

    healthy = healthy_of(sources)
    done, left = [], []
    for src in _one_per_case(sources, release):
        if not fnmatch(src.case.name, pattern):
            continue
        reason = exportable(src, release, healthy)
        if reason is not None:
            if src.case.kind == "violation":
                left.append((src.case.name, reason))
            continue
        done.append(export(src, release, control_for(src, release, healthy)))
    files = {mod.module: mod.text for mod in done}
    expected = {
        f"{mod.module}::{test.name}": {
            **test.expect,
            "lines": _step_lines(mod.text, test.name),
            **({"plugin": mod.plugin} if mod.plugin else {}),
        }
        for mod in done
        for test in mod.tests
    }
    files["expected.json"] = json.dumps(expected, indent=1, sort_keys=True) + "\n"
    files["README.md"] = _readme(release, done, left)
    return files, done, left


def _step_lines(text: str, test: str) -> dict[str, int]:
    """{line number: step} of each step's calls in a test function (1-based lines), so
    a failure's frame in the test function names its step."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {test}("))
    out, step = {}, None
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.startswith("def "):
            break
        stripped = line.strip()
        if stripped.startswith("# step "):
            step = int(stripped.split()[2].rstrip(":"))
        elif step is not None and stripped and not stripped.startswith("#"):
            out[str(i + 1)] = step
    return out


def _readme(release: str, done: list, left: list) -> str:
    lines = [
        f"# vLLM {release}: the contract's counterexamples as tests of vLLM's own suite",
        "",
        "Paste a module into a vLLM checkout's `tests/v1/core/` and run",
        f"`pytest tests/v1/core/<module>` there. Each violation test fails on vLLM {release} as",
        "released where its docstring says; each `_control` test passes. `make export-check`",
        "checks both on vLLM's own code, with and without the step-reservation guard.",
        "",
        f"Exported: {len(done)} module(s).",
        "",
    ]
    for m in done:
        lines.append(f"- `{m.module}`" + (f" (for {m.plugin}'s CI: needs {m.plugin} installed)" if m.plugin else ""))
    lines += ["", f"Not exported: {len(left)} case(s).", ""]
    lines += [f"- {name}: {why}" for name, why in left]
    return "\n".join(lines) + "\n"

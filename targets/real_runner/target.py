"""The real-runner target: vLLM's scheduler and vLLM's own model runner, stepped together.

`VllmTarget` drives the real AsyncScheduler with the model deciding what the runner
returns; here every `schedule` hands the real SchedulerOutput to a real model runner of
the same tree (on CPU, Triton interpreted) and every `deliver` hands its real
ModelRunnerOutput back. What is real and what is ours: docs/real-runners.md.
"""

from __future__ import annotations

import contextlib
from typing import Any, Mapping

from vllm_contract.adapter import current as env
from vllm_contract.adapter import objects, runners
from vllm_contract.adapter.cpu import runner_config, setup
from vllm_contract.adapter.runners import PLACEHOLDER_ID, REJECTED_ID, SAMPLED_ID, build_v1, build_v2, stub_model
from vllm_contract.model.run import Run
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TargetUnavailable, TreeError
from vllm_contract.spec.runner_variants import RUNNERS
from vllm_contract.targets.real_runner.contract import UnrealisablePick
from vllm_contract.targets.vllm_target import VllmTarget, _index, _rid


class RealRunnerTarget(VllmTarget):
    """The vLLM target with the tree's own model runner deciding what is returned."""

    name = "runner"
    observes_runner_asserts = True

    def __init__(self, clamp: bool | None = None, monitor: bool = False):
        """monitor: the scheduler is the contract monitor's class, as VllmTarget's."""
        super().__init__(clamp=clamp, monitor=monitor)
        self.name = "runner-monitor" if monitor else "runner-clamp" if clamp else "runner"
        setup()
        self.log: list[dict] = []  # per step: the runner observations (see module docstring)

    def accepts(self, cfg: Config) -> str | None:
        """The scheduler side's arms (VllmTarget.accepts), for the runners this tree has
        (v2-live: real code with one patch)."""
        if not cfg.run.in_vllm:
            names = ", ".join(r.name for r in RUNNERS.values() if r.in_vllm)
            return f"{self.name} runs vLLM's own runners ({names}); {cfg.runner} is not in the tree"
        return super().accepts(cfg)

    # ---------------------------------------------------------------- reset
    def reset(self, cfg: Config, init: Mapping) -> None:
        super().reset(cfg, init)
        self.runner_config = runner_config(cfg)
        self.model = stub_model(records=cfg.is_v2)
        with self._context():
            build = build_v2 if cfg.is_v2 else build_v1
            self.runner = build(cfg, self.runner_config, self.model)
        self.log = []

    def _context(self):
        return runners.context(self.cfg.is_v2, self.runner_config)

    # ---------------------------------------------------------------- events
    def _schedule(self, args, result) -> dict:
        cfg = self.cfg
        objects.set_budget(self.sched, args[("budget",)])
        out = objects.schedule(self.sched)
        sent = self._shipped(out)
        self._write_drafts(out, args)
        fed_before = len(self.model.fed)
        try:
            with self._context(), self._faults(args), self._live():
                output, batch = runners.execute(self.runner, out, cfg.is_v2)
        except Exception as exc:  # the runner raising is an outcome of the step, said with its site
            if isinstance(exc, AssertionError) and objects.assert_name(objects.assert_site(exc)):
                raise  # an assert the contract names: the step's outcome is that it fired
            where = objects.runner_site(exc)
            self.ended = f"schedule: the model runner raised {type(exc).__name__} at {where}"
            return {
                "error": f"the model runner raised {type(exc).__name__} at {where}: {exc}",
                "num_scheduled_tokens": dict(objects.scheduled(out)),
            }
        if dict(objects.scheduled(out)) != sent["num_scheduled_tokens"]:
            raise AssertionError("the runner changed the scheduler's SchedulerOutput")  # copied in execute_model
        returns = {}
        rows = objects.rows(output)
        for req_id in objects.scheduled(out):
            r = _index(req_id)
            tokens = rows[req_id]
            extra = args.get(("extra", r), 0) if "over-delivery" in cfg.faults else 0
            if tokens and extra:
                tokens += [SAMPLED_ID] * extra  # fault: over-delivery
            returns[r] = tokens
        self.fifo.append((out, returns))
        measured = self._measure(sent, batch, self.model.fed[fed_before:])
        self._check_realisable(args, result, returns, measured)
        observed = {
            "num_scheduled_tokens": dict(objects.scheduled(out)),
            "spec": {k: len(v) for k, v in objects.scheduled_drafts(out).items()},
            "runner_returns": {r: len(t) for r, t in returns.items()},
            "model_returns": {
                r: result.state[("q_sampled", result.state[("queue_len",)] - 1, r)] for r in range(cfg.requests)
            },
            "runner": measured,
        }
        mismatches = self._runner_claims(result, measured)
        if mismatches:
            observed["mismatches"] = mismatches
        self.log.append(observed)
        return observed

    def _runner_claims(self, result, measured) -> list[str]:
        """What the model says the runner computes, against what it computed: V2's first
        position is the slot's count (positions-agree is stated over it), and V1 feeds a
        placeholder at a non-draft position exactly when the model says so
        (no-placeholder-input). A difference is the model being wrong about vLLM."""
        rows = result.observed.get("v2_rows") or result.observed.get("v1_rows") or []
        out = []
        for req_id, seen in measured.items():
            r = _index(req_id)
            row = rows[r]
            if self.cfg.is_v2:
                if seen["start"] != row["num_computed"]:
                    out.append(
                        f"r{r}: the runner started at position {seen['start']}, the model's slot count "
                        f"is {row['num_computed']}"
                    )
            else:
                first_draft = seen["sched_start"] + seen["sched_length"] - seen["spec"]
                fed = any(q < first_draft for q in seen["placeholder_at"])
                if fed != bool(row["placeholder_input"]):
                    out.append(
                        f"r{r}: the runner {'fed' if fed else 'did not feed'} a placeholder id at a "
                        f"non-draft position ({seen['placeholder_at']}); the model says it "
                        f"{'does' if row['placeholder_input'] else 'does not'}"
                    )
        return out

    def _deliver(self, args, result) -> dict:
        out, returns = self.fifo.popleft()  # the tokens vLLM's runner sampled
        return self._update_from_output(out, returns, args)

    def _run_on_returns(self, out, decided=None) -> dict:
        """Run on by itself (VllmTarget.engine_step): the scheduler alone, the runner's returns
        the model's run-on decided, else its reservation honoured (as token lists, this
        target's form); the tree's own runner is
        not stepped: what the run on checks is the scheduler's progress, and a state no runner
        can take (finding 9's position -1) would end it before any hang could show."""
        return {r: [SAMPLED_ID] * n for r, n in super()._run_on_returns(out, decided).items()}

    def _run_on_deliver(self, out, returns: dict) -> None:
        self._update_from_output(out, returns, self._no_picks())

    def _preempt(self, args, result) -> dict:
        """The model's preemption between steps stands for vLLM's preemption inside a
        schedule() call ([cite:alloc-failure-preempts]), which then schedules nothing else for the victim
        ([cite:waiting-loop]) and records the step's ids without it ([cite:prev-step-scheduled-updated]). The scheduler
        target runs only the two preempting statements; the runner also needs that
        record, or a victim the next step resumes gets no all_token_ids and V1's
        _update_states raises KeyError ([cite:v1-resumed-outputs-rebuilt]), which vLLM's own
        preemption never reaches."""
        observed = super()._preempt(args, result)
        objects.forget_previous_step(self.sched, _rid(args[("req",)]))
        return observed

    # ---------------------------------------------------------------- ours
    def _shipped(self, out) -> dict:
        """What the scheduler asked for, per request id: its computed count before the
        step, the tokens, and its token list (to tell what the runner should feed)."""
        counts = objects.scheduled(out)
        tokens = {req_id: runners.request_tokens(self.requests[_index(req_id)]) for req_id in counts}
        return {
            "num_scheduled_tokens": dict(counts),
            "c0": objects.computed_before(out),
            "tokens": tokens,
            "spec": {k: len(v) for k, v in objects.scheduled_drafts(out).items()},
        }

    def _write_drafts(self, out, args) -> None:
        """The drafter's proposal for this step (ours): SAMPLED_ID for the `accepted`
        first drafts of each request, REJECTED_ID after, where the runner reads them."""
        if not self.cfg.spec_tokens:
            return
        import torch

        with torch.inference_mode():
            self._write_drafts_now(out, args)

    def _write_drafts_now(self, out, args) -> None:
        for req_id, drafts in objects.scheduled_drafts(out).items():
            k = len(drafts)
            if not k:
                continue
            accepted = args.get(("accepted", _index(req_id)), 0)
            row = [SAMPLED_ID] * accepted + [REJECTED_ID] * (k - accepted)
            runners.write_drafts(self.runner, req_id, row, self.cfg.is_v2)

    def _faults(self, args):
        """stale-slot-read: the flagged adds' device-side writes are dropped (V2)."""
        if "stale-slot-read" not in self.cfg.faults:
            return contextlib.nullcontext()
        return runners.losing_slot_writes(self.runner, lambda req_id: bool(args.get(("stale_read", _index(req_id)))))

    def _live(self):
        """v2-live: the discard kernel's call gets total_len where it gets prefill_len."""
        if self.cfg.run.kernel != "live":
            return contextlib.nullcontext()
        return runners.live_kernel(self.runner)

    def _check_realisable(self, args, result, returns, measured) -> None:
        """A trace may accept drafts the runner itself made placeholders (padding, a
        request not in the previous batch, V2's `pos - local_pos < prefill_len`): no
        drafter output and no forward pass can make vLLM accept those, so such a trace
        cannot run on real code. Raised only where the runner's count then differs."""
        if not self.cfg.spec_tokens:
            return
        pos = result.state[("queue_len",)] - 1
        for req_id, seen in measured.items():
            r = _index(req_id)
            accepted = args.get(("accepted", r), 0)
            ks = seen["spec"]
            got = len(returns.get(r, ()))
            if not accepted or not got or got == result.state[("q_sampled", pos, r)]:
                continue  # a discarded step is the runner's discard decision, compared as such
            drafts = seen["fed_ids"][-ks:]
            why = []
            if drafts[:accepted] != [SAMPLED_ID] * accepted:
                why.append(f"it fed {drafts} at the draft positions, not the drafter's proposal")
            if seen.get("prefill_len") is not None and seen["start"] + seen["length"] - 1 - ks < seen["prefill_len"]:
                why.append(
                    f"the step's first logit position {seen['start'] + seen['length'] - 1 - ks} is below "
                    f"prefill_len {seen['prefill_len']}, so gather_draft_sampled turns the drafts into -1"
                )
            if why:
                raise UnrealisablePick(
                    f"{req_id}: the trace accepts {accepted} of {ks} draft(s), but the runner's drafts there are "
                    f"placeholders ({'; '.join(why)}): vLLM's rejection sampler rejects them whatever the "
                    f"forward pass predicts, and returns {len(returns.get(r, ()))} token(s), not "
                    f"{result.state[('q_sampled', pos, r)]}"
                )

    # ---------------------------------------------------------------- measuring
    def _measure(self, sent: dict, batch, fed: list) -> dict:
        """Per scheduled request: the positions and input ids the runner fed, against
        what the scheduler asked for."""
        if batch is None or not fed:
            return {}
        req_ids, starts = batch
        input_ids, positions = fed[-1]
        found = {}
        for b, req_id in enumerate(req_ids):
            lo, hi = starts[b], starts[b + 1]
            pos = positions[lo:hi]
            ids = input_ids[lo:hi] if input_ids is not None else []
            c0 = sent["c0"][req_id]
            n = sent["num_scheduled_tokens"][req_id]
            tokens = sent["tokens"][req_id]
            wrong = []
            for i, fed_id in enumerate(ids):
                p = c0 + i  # the position the scheduler asked for
                if 0 <= p < len(tokens) and fed_id != tokens[p]:
                    wrong.append((p, fed_id, tokens[p]))
            found[req_id] = {
                "start": pos[0] if pos else None,
                "length": len(pos),
                "contiguous": pos == list(range(pos[0], pos[0] + len(pos))) if pos else True,
                "sched_start": c0,
                "sched_length": n,
                "spec": sent["spec"].get(req_id, 0),
                "known_tokens": len(tokens),
                "placeholder_at": [c0 + i for i, x in enumerate(ids) if x == PLACEHOLDER_ID],
                "wrong_at": wrong,
                "fed_ids": ids,
                "tokens": tokens,
            }
            if self.cfg.is_v2:
                found[req_id]["prefill_len"] = runners.v2_prefill_len(self.runner, req_id)
        return found

    # ---------------------------------------------------------------- project
    def project(self) -> dict[tuple, Any]:
        out = super().project()
        cfg = self.cfg
        for i in range(cfg.queue_depth):
            returns = self.fifo[i][1] if i < len(self.fifo) else {}
            for r in range(cfg.requests):
                out[("q_sampled", i, r)] = len(returns.get(r, ()))
        if cfg.is_v2:
            out.update(self._project_v2())
        else:
            out.update(self._project_v1())
        return out

    def _project_v2(self) -> dict[tuple, Any]:
        """RequestState: presence, slot, the slot's prefill_len / GPU num_computed /
        total_len while present; the free stack and what the free slots still hold."""
        cfg, model = self.cfg, self.model_state
        slots = runners.v2_slots(self.runner)
        prefill, computed, total = slots["prefill_len"], slots["num_computed"], slots["total_len"]
        out: dict[tuple, Any] = {}
        for r in range(cfg.requests):
            slot = slots["slot"].get(_rid(r))
            out[("v2_present", r)] = slot is not None
            if slot is not None or (model is not None and model[("v2_present", r)]):
                here = slot is not None
                out[("v2_slot", r)] = slot
                out[("v2_prefill_len", r)] = prefill[slot] if here else None
                out[("v2_num_computed", r)] = computed[slot] if here else None
                out[("v2_total_len", r)] = total[slot] if here else None
        free = slots["free"]
        out[("v2_num_free",)] = len(free)
        model_free = [model[("v2_free", i)] for i in range(model[("v2_num_free",)])] if model is not None else []
        for i in range(max(len(free), len(model_free))):
            out[("v2_free", i)] = free[i] if i < len(free) else None
        for slot in set(free) | set(model_free):
            out[("v2_left_prefill_len", slot)] = prefill[slot]
            out[("v2_left_num_computed", slot)] = computed[slot]
            out[("v2_left_total_len", slot)] = total[slot]
        return out

    def _project_v1(self) -> dict[tuple, Any]:
        """CachedRequestState.num_tokens and prev_num_draft_len, and persistent-batch
        membership, for requests in the batch (the model's Nr is read only there)."""
        cfg, model = self.cfg, self.model_state
        out: dict[tuple, Any] = {}
        for r in range(cfg.requests):
            state = runners.v1_request_state(self.runner, _rid(r))
            here = state is not None
            out[("v1_in_batch", r)] = here
            if here or (model is not None and model[("v1_in_batch", r)]):
                out[("v1_num_tokens", r)] = state[0] if here else None
                out[("v1_prev_draft_len", r)] = state[1] if here else None
        return out


def preflight() -> str:
    """Build vLLM's own model runners of the loaded tree (V2, and V1 where the tree has it)
    and run one step on each; one line on success. Raises TargetUnavailable (one line:
    cause and fix) otherwise."""
    from vllm_contract.adapter import tree as vllm_tree

    t = env.tree()
    kinds = ("v1", "v2") if objects.has_v1_runner() else ("v2",)
    for runner in kinds:
        cfg = Config(f"runner-preflight-{runner}", runner=runner, requests=1, spec_tokens=1)
        try:
            target = RealRunnerTarget()
            run = Run(cfg, {"prompt_len": [2]}, [("schedule", {"budget": 2, "accepted": [0]})])
            target.reset(cfg, run.init)
            outcome = [target.step(p.event, p.args, p) for p in run][0]
        except TargetUnavailable:
            raise
        except Exception as exc:  # a runner that cannot run one step is a tree that cannot be driven
            raise TreeError(vllm_tree.import_failure(t, exc, f"cannot run vLLM's {runner} model runner")) from exc
        if outcome.error:
            raise TreeError(f"{t.title} cannot run vLLM's {runner} model runner: {outcome.error}")
    names = " and ".join(k.upper() for k in kinds)
    return f"{t.title}: {names} model runner{'s' if len(kinds) > 1 else ''} run on CPU (Triton interpreter)"

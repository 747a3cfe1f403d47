"""The vLLM target: the spec's events driven through a real vLLM AsyncScheduler.

The tree is the one the run selected (`--vllm=0.32.0|0.33.0|PATH`, adapter/tree.py);
the target plays the arms of the release profile that tree is checked against.

Each event goes through vLLM's own code path; where no public path exists, the
narrowest hook that reproduces what vLLM itself does:

  schedule(budget, ...)   set the step's token budget (scheduler.max_num_scheduled_tokens
                          and scheduler_config.max_num_batched_tokens, read at
                          [cite:step-budgets]), call schedule(), keep the SchedulerOutput in
                          our own FIFO (EngineCore's batch_queue, [cite:batch-queue-append]). What the
                          runner returns for that step is the model's decision: the
                          harness hands the model's play of the step in (q_sampled
                          of the new step).
  deliver(stop, kv_fail)  pop the oldest SchedulerOutput, build a ModelRunnerOutput
                          (one row per scheduled id, q_sampled tokens each, the stop
                          token placed so that the stop-th appended token is STOP_ID),
                          report a KV-load failure as
                          KVConnectorOutput(invalid_block_ids={...}) (without a
                          connector recompute_kv_load_failures is True, [cite:recompute-kv-load-failures]),
                          call update_from_output ([cite:engine-delivers]). Fault under-drain:
                          first lower the output's num_scheduled_tokens by `short`
                          per request, as a plugin that rewrites it does. Fault
                          lost-sample: a flagged request's row is handed over empty.
  preempt(req, drop)      HOOK (no public path): the two statements schedule() runs on
                          an allocation failure ([cite:alloc-failure-preempts]): remove the victim from
                          `scheduler.running` and call
                          `_preempt_request(victim, t, drop_stale_output=drop)`.
  reset_prefix_cache      reset_prefix_cache(reset_running_requests=True) ([cite:reset-prefix-cache]).
                          Where a session still holds blocks vLLM raises RuntimeError
                          after the preemptions ([cite:reset-raises-when-blocks-held]), which EngineCore
                          returns as a failed utility call ([cite:utility-call-failure]): the
                          step compares that outcome with the model's
                          (`observed["reset_fails"]`) and the case goes on.
  stream_update(req, u)   add_request with the same id and a resumable request of u
                          prompt tokens ([cite:add-request-streaming-update]).
  abort(req)              finish_requests("rK", FINISHED_ABORTED) ([cite:finish-requests]).

After a case's events the harness runs the engine on by itself (`engine_step`, model/hang.py's
bound): EngineCore's own loop on this tree alone, schedule while the scheduler has requests
and the queue has room, else deliver the oldest step, with a budget for every request and
no stop, no KV-load failure, no fault; the runner returns what the configuration's runner
returned for the same step in the model's run-on (handed in by the harness), and where
there is none (the two runs parted, or the target runs on alone after a state difference)
exactly what the scheduler reserved (one token for a step it reserved for, none for a
prefill chunk).

An AssertionError raised by vLLM is not propagated: the step returns
Outcome(fired=<assert>) and the case ends (the scheduler is half-updated). The assert
is recognised by its statement (the source line of the innermost vLLM frame, matched
against spec/properties.py ASSERTS), wherever the line moved between releases.

targets.harness plays the model beside the target and hands each step's decision in.
"""

from __future__ import annotations

import os
import time
import traceback
from collections import deque
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Mapping

from vllm_contract.adapter import construct as factory
from vllm_contract.adapter import current as env
from vllm_contract.adapter import objects, plugin_patch
from vllm_contract.adapter.construct import request_id, request_index
from vllm_contract.adapter.objects import assert_name, assert_site
from vllm_contract.model.interpreter import StepResult, nested
from vllm_contract.model.run import Played, is_named
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import CouldNotRun
from vllm_contract.targets import plugin_fetch
from vllm_contract.targets.protocol import Outcome


def show_traceback() -> bool:
    """SHOW_VLLM_TRACEBACK=1: print vLLM's own traceback whenever one of its asserts fires,
    also when the case expects it (a passing replay is otherwise quiet)."""
    return os.environ.get("SHOW_VLLM_TRACEBACK", "") not in ("", "0")


class CaseEnded(RuntimeError):
    """The target was stepped after an assert fired or vLLM raised."""


def status_of(status) -> int:
    """RequestStatus ([cite:request-status-enum]) -> spec.vocabulary.Status."""
    return objects.status_code(status)


def _rid(r: int) -> str:
    return request_id(r)


def _index(req_id: str) -> int:
    return request_index(req_id)


class VllmTarget:
    """Target protocol over vLLM's AsyncScheduler (or the clamp subclass)."""

    name = "vllm"
    observes_asserts = True
    observes_runner_asserts = False
    takes_run_on_decisions = True  # engine_step(decided): harness.run_target_on

    def __init__(
        self, clamp: bool | None = None, guard: bool = False, monitor: bool = False, native_guard: bool = False
    ):
        """clamp: None follows cfg.clamp; True/False forces the scheduler class
        (a second arm: the model's projection then differs where the clamp acts).
        guard: this target plays the step-reservation guard's arms (and only those).
        monitor: the scheduler is the contract monitor's class (targets/monitor/scheduler.py;
        with guard, in its drop mode), which must play every arm as vLLM's own does.
        native_guard: the guard's arms are played by the tree's own AsyncScheduler (a tree
        patched with fixes/step-reservation-guard), not by the guard's scheduler class."""
        env.load()  # TargetUnavailable if vLLM is not importable
        self.clamp_option = False if monitor and clamp is None else clamp
        self.guard_option = guard
        self.monitor_option = monitor
        self.native_guard = native_guard
        # the tree's scheduler releases a step whose output it skips for a KV-load failure
        # (fixes/v2-recompute-rollback, the release_skipped arms): set by fixes/arms.py
        self.releases_skipped = False
        self.cfg: Config | None = None
        self.plugin_tree: Path | None = None  # set per arm by reset
        self.tree = env.tree()
        self.replay_option = env.replay_option()
        self.replay_env = env.replay_env()
        if clamp is True:
            self.name = "vllm-clamp"
        if guard:
            self.name = "vllm-guard"
        if monitor:
            self.name = "vllm-monitor" + ("-drop" if guard else "")

    def accepts(self, cfg: Config) -> str | None:
        """A loaded tree plays the arms of the profile it is checked against, one clamp arm
        per target."""
        if cfg.profile != self.tree.profile:
            return (
                f"this run loads {self.tree.title} (profile {self.tree.profile}); the "
                f"{cfg.profile} arm runs with --vllm={cfg.prof.release}"
                if not cfg.prof.historical
                else f"no vLLM tree implements the historical profile {cfg.profile}"
            )
        if (cfg.guard != "none") != self.guard_option:
            return (
                f"{self.name} runs the step-reservation guard's arms"
                if self.guard_option
                else f"{self.name} does not run the guard's arms (vllm-guard does)"
            )
        if self.clamp_option is not None and cfg.clamp != self.clamp_option:
            return f"{self.name} runs the clamp-{'on' if self.clamp_option else 'off'} arm"
        if self.monitor_option and cfg.run.plugin:
            return (
                f"{self.name} records vLLM's own runner in vLLM's process; the {cfg.run.plugin} runner's arms "
                "are played by the vllm target (the monitor's traces cannot name a plugin's rule)"
            )
        if cfg.release_skipped and not self.releases_skipped:
            return (
                f"{self.name} runs the release's scheduler, which keeps the reservation of a step it skips; "
                "the scheduler of fixes/v2-recompute-rollback plays these arms (make fix-check)"
            )
        return None

    # ------------------------------------------------------------------ reset
    def reset(self, cfg: Config, init: Mapping) -> None:
        self.cfg = cfg.validate()
        self.clamp = cfg.clamp if self.clamp_option is None else self.clamp_option
        named = nested(init) if not is_named(init) else dict(init)
        self.prompt_len = list(named["prompt_len"])
        self.resumable = list(named.get("resumable", [False] * cfg.requests))
        self.model_state = None  # the model's state after the last step (handed in by step)
        self.plugin_tree = self._plugin_tree(cfg)
        with self.patched():
            self.sched = self._new_scheduler(cfg)
        self.requests = []
        for r in range(cfg.requests):
            req = factory.make_request(
                r,
                self.prompt_len[r],
                cfg.block_size,
                bool(self.resumable[r]),
                max_tokens=cfg.max_tokens,
                shared_prefix=named.get("shared_prefix", 0) if cfg.has("prefix-cache") else None,
            )
            objects.add_request(self.sched, req)  # in id order
            self.requests.append(req)
        self.fifo: deque = deque()  # (SchedulerOutput, {req index: tokens to return})
        self.ended: str | None = None

    @staticmethod
    def _plugin_tree(cfg: Config) -> Path | None:
        """The fetched plugin tree whose patch of vLLM's scheduler the arm's runner runs with
        (None for a runner without one); unfetched, the arm fails and says how to fetch it."""
        patch = cfg.run.scheduler_patch
        if patch is None:
            return None
        folder, why = plugin_fetch.tree(patch.plugin)
        if folder is None:
            raise CouldNotRun(f"{cfg.runner} runs vLLM's scheduler under {patch.plugin}'s own patch: {why}")
        return folder

    def patched(self) -> AbstractContextManager:
        """vLLM's scheduler classes as the arm's plugin patches them, for one call into the
        scheduler (adapter/plugin_patch.py: undone after, other arms share the process)."""
        if self.plugin_tree is None or self.cfg is None or self.cfg.run.scheduler_patch is None:
            return nullcontext()
        return plugin_patch.applied(self.cfg.run.scheduler_patch, self.plugin_tree)

    def _new_scheduler(self, cfg: Config):
        """The arm's scheduler: the monitor's class (its drop mode on for the guard's arms),
        the tree's own for a patched tree's guard, else the class the arm runs."""
        if self.monitor_option:
            from vllm_contract.targets.monitor.core import ENV_DROP
            from vllm_contract.targets.monitor.scheduler import MONITOR_SCHEDULER_CLS

            saved = os.environ.get(ENV_DROP)
            os.environ[ENV_DROP] = "1" if cfg.guard != "none" else "0"
            try:
                return factory.new_scheduler(cfg, MONITOR_SCHEDULER_CLS)
            finally:
                if saved is None:
                    os.environ.pop(ENV_DROP, None)
                else:
                    os.environ[ENV_DROP] = saved
        if self.native_guard:
            return factory.new_scheduler(cfg)
        return factory.new_scheduler(cfg, factory.scheduler_class(cfg, clamp=self.clamp))

    # ------------------------------------------------------------------- step
    def step(self, event: str, args: Mapping, model: Played) -> Outcome:
        """One event through vLLM's own code; what the runner returns for a scheduled step
        is the model's decision (`model`, the model's play of the same step)."""
        if self.ended is not None:
            raise CaseEnded(f"the case ended at an earlier step ({self.ended})")
        args = model.args
        result = model.result
        handler = getattr(self, "_" + event)
        try:
            with self.patched():
                facts = handler(args, result)
        except AssertionError as exc:
            site = assert_site(exc)
            name = assert_name(site)
            where = f"{site[0]}:{site[1]} `{site[2]}`" if site else "outside vLLM's scheduler and V2 runner"
            self.ended = f"{event}: assert at {where}"
            self.model_state = result.state
            if show_traceback():
                print(f"\n--- vLLM ({self.tree.title}) raised at {where} ---")
                traceback.print_exception(exc)
            if name is None:
                # an assert the contract does not name: report it as an error
                return Outcome(
                    detail=f"unknown AssertionError at {where}: {exc}",
                    error=f"AssertionError at {where}",
                    assert_site=site,
                )
            return Outcome(fired=name, detail=f"vLLM's assert fired at {where}", assert_site=site)
        except RuntimeError as exc:
            if isinstance(exc, CaseEnded):
                raise
            self.ended = f"{event}: {type(exc).__name__}"
            self.model_state = result.state
            return Outcome(detail=f"vLLM raised {type(exc).__name__}: {exc}", error=f"{type(exc).__name__}: {exc}")
        self.model_state = result.state
        error = facts.pop("error", None)
        mismatches = facts.pop("mismatches", [])
        return Outcome(error=error, mismatches=mismatches, facts=facts)

    # ------------------------------------------------------------- run on
    def engine_step(self, decided: Mapping[int, int] | None = None) -> tuple[str | None, Outcome]:
        """One step of EngineCore's own loop on this tree by itself ([cite:step-with-batch-queue]):
        schedule while has_requests() and the queue has room, else deliver the oldest step;
        (None, Outcome()) when the engine has nothing to do and waits for input. The budget
        covers every request (model/hang.py budget_for, read off this tree's counters). A
        scheduled request returns what `decided` says (the runner's decision in the model's
        run-on, harness.run_target_on), else what the scheduler reserved for it."""
        if self.ended is not None:
            raise CaseEnded(f"the case ended at an earlier step ({self.ended})")
        cfg = self.cfg
        event = None
        try:
            with self.patched():
                if objects.has_requests(self.sched) and len(self.fifo) < cfg.queue_depth:
                    event = "schedule"
                    objects.set_budget(self.sched, self._run_on_budget())
                    out = objects.schedule(self.sched)
                    self.fifo.append((out, self._run_on_returns(out, decided)))
                elif self.fifo:
                    event = "deliver"
                    out, returns = self.fifo.popleft()
                    self._run_on_deliver(out, returns)
        except AssertionError as exc:
            site = assert_site(exc)
            where = f"{site[0]}:{site[1]} `{site[2]}`" if site else "outside vLLM's scheduler and V2 runner"
            self.ended = f"{event} (run on): assert at {where}"
            name = assert_name(site)
            if name is None:
                return event, Outcome(error=f"AssertionError at {where}", assert_site=site)
            return event, Outcome(fired=name, detail=f"vLLM's assert fired at {where}", assert_site=site)
        except Exception as exc:  # what vLLM raises while running on by itself ends the engine
            self.ended = f"{event} (run on): {type(exc).__name__}"
            said = f"{type(exc).__name__}: {exc}"
            return event, Outcome(detail=f"vLLM raised {said}", error=said)
        return event, Outcome()

    def _run_on_budget(self) -> int:
        """1 + each unfinished request's tokens, drafts and placeholders (hang.budget_for on
        this tree's counters), capped at the configuration's max_num_batched_tokens."""
        cfg = self.cfg
        need = 1
        for req in self.requests:
            counters = objects.request_counters(req)
            need += max(counters["num_tokens"] + cfg.spec_tokens + counters["num_output_placeholders"], 0)
        return need if cfg.max_budget is None else min(need, cfg.max_budget)

    def _run_on_returns(self, out, decided: Mapping[int, int] | None = None) -> dict:
        """What the runner returns for each scheduled request, run on: what `decided` says
        for it (the model's run-on), else what a runner that honours the reservation returns,
        one token unless the scheduler classed the step a prefill chunk (no draft accepted)."""
        held = objects.requests(self.sched)
        returns = {}
        for req_id in objects.scheduled(out):
            r, request = _index(req_id), held.get(req_id)
            if decided is not None and r in decided:
                returns[r] = decided[r]
            else:
                returns[r] = 0 if request is None or objects.is_prefill_chunk(request) else 1
        return returns

    def _run_on_deliver(self, out, returns: dict) -> None:
        self._update_from_output(out, {r: [factory.SAMPLED_ID] * n for r, n in returns.items()}, self._no_picks())

    def _no_picks(self) -> dict:
        """A delivery's picks at their fault-free values: no stop, no KV-load failure, nothing short."""
        picks: dict = {("kv_fail_req",): -1, ("kv_fail_block",): 0}
        for r in range(self.cfg.requests):
            picks[("stop", r)] = 0
            picks[("short", r)] = 0
            picks[("lost", r)] = False
        return picks

    def queued(self) -> dict[int, bool]:
        """Per request: whether Scheduler.running or a waiting queue holds it (a request that
        waits in none is never visited by schedule())."""
        orders = objects.orders(self.sched)
        held = set(orders["running"]) | set(orders["waiting"])
        return {r: _rid(r) in held for r in range(self.cfg.requests)}

    def _schedule(self, args, result: StepResult) -> dict:
        cfg = self.cfg
        objects.set_budget(self.sched, args[("budget",)])
        out = objects.schedule(self.sched)
        pos = result.state[("queue_len",)] - 1
        returns = {r: result.state[("q_sampled", pos, r)] for r in range(cfg.requests)}
        self.fifo.append((out, returns))
        return {
            "num_scheduled_tokens": dict(objects.scheduled(out)),
            "spec": {k: len(v) for k, v in objects.scheduled_drafts(out).items()},
            "runner_returns": returns,
        }

    def _deliver(self, args, result: StepResult) -> dict:
        out, returns = self.fifo.popleft()
        return self._update_from_output(out, {r: [factory.SAMPLED_ID] * n for r, n in returns.items()}, args)

    def _update_from_output(self, out, tokens_of: dict, args) -> dict:
        """Hand the scheduler a step's output: each scheduled request's tokens (the last one
        made a stop token where the step stops it) and, for a KV-load failure, the failed block."""
        req_ids = list(objects.scheduled(out))
        sampled = []
        for req_id in req_ids:
            r = _index(req_id)
            tokens = list(tokens_of.get(r, []))
            if "lost-sample" in self.cfg.faults and args[("lost", r)]:
                tokens = []  # fault: the row reaches update_from_output empty (a pending result lost)
            stop = args[("stop", r)]
            if stop:
                if stop > len(tokens):
                    raise ValueError(f"deliver: stop={stop} for {req_id} but the runner returns {len(tokens)} tokens")
                tokens[stop - 1] = factory.STOP_ID
            sampled.append(tokens)
        failed = None
        if self.cfg.has("kvfail") and args[("kv_fail_req",)] >= 0:
            r = args[("kv_fail_req",)]
            block_ids = objects.block_ids(self.sched, _rid(r))
            index = args[("kv_fail_block",)]
            if index >= len(block_ids):
                raise ValueError(f"deliver: {_rid(r)} has {len(block_ids)} blocks, no index {index}")
            failed = [block_ids[index]]
        if "under-drain" in self.cfg.faults:
            # the fault as tpu-inference #3492's scheduler did it: the counts of the output
            # handed to update_from_output rewritten below what was scheduled
            counts = objects.scheduled(out)
            for req_id in req_ids:
                counts[req_id] -= args[("short", _index(req_id))]
        objects.deliver(self.sched, out, objects.runner_output(req_ids, sampled, failed))
        return {"sampled": dict(zip(req_ids, sampled))}

    def _preempt(self, args, result: StepResult) -> dict:
        cfg = self.cfg
        victim = self.requests[args[("req",)]]
        if cfg.has("preempt") and cfg.has("preempt-drop"):
            drop = bool(args[("drop",)])
        else:
            drop = cfg.has("preempt-drop")
        running = objects.orders(self.sched)["running"]
        was_last = bool(running) and running[-1] == victim.request_id
        objects.preempt(self.sched, victim, time.monotonic(), drop)
        return {"victim_was_last": was_last, "drop": drop}

    def _reset_prefix_cache(self, args, result: StepResult) -> dict:
        """The call, and whether it raised where the model says it fails: after the
        preemptions, a block still held makes it raise ([cite:reset-raises-when-blocks-held]);
        EngineCore answers the caller with the failure and runs on ([cite:utility-call-failure])."""
        failed = objects.reset_prefix_cache(self.sched)
        predicted = bool(result.observed.get("reset_fails", False))
        mismatches = []
        if predicted != (failed is not None):
            says = "fails (a session holds KV blocks)" if predicted else "succeeds"
            mismatches.append(f"reset_prefix_cache: the model says the call {says}; vLLM " + (failed or "returned"))
        return {"reset_failed": failed, "mismatches": mismatches}

    def _stream_update(self, args, result: StepResult) -> dict:
        r = args[("req",)]
        update = factory.make_request(r, args[("new_tokens",)], self.cfg.block_size, resumable=True)
        objects.add_request(self.sched, update)
        return {}

    def _abort(self, args, result: StepResult) -> dict:
        done = objects.abort(self.sched, _rid(args[("req",)]))
        return {"aborted": [objects.req_id(q) for q in done]}

    # ---------------------------------------------------------------- project
    def project(self) -> dict[tuple, Any]:
        cfg = self.cfg
        out: dict[tuple, Any] = {}
        stagger = cfg.is_v2 and cfg.pp > 1
        for r, req in enumerate(self.requests):
            out[("status", r)] = status_of(req.status)
            for name, value in objects.request_counters(req).items():
                out[(name, r)] = value
            if cfg.has("stream"):
                for name, value in objects.session_view(req).items():
                    out[(name, r)] = value
            if stagger:
                out[("next_decode_eligible_step", r)] = objects.decode_eligible_step(req)
            if cfg.tracks_held_blocks:
                out[("holds_blocks", r)] = objects.holds_blocks(self.sched, _rid(r))
            if cfg.clamp and self.clamp:
                out[("clamp_dropped", r)] = self.sched.clamp_dropped.get(_rid(r), 0)
            if cfg.guard != "none":
                out[("guard_dropped", r)] = self.sched.guard_dropped.get(_rid(r), 0)
        if stagger:
            out[("current_step",)] = objects.current_step(self.sched)
        out[("queue_len",)] = len(self.fifo)
        # the in-flight steps, oldest first; unused positions read 0 as in the model
        for i in range(cfg.queue_depth):
            so = self.fifo[i][0] if i < len(self.fifo) else None
            counts = objects.scheduled(so) if so is not None else {}
            drafts = objects.scheduled_drafts(so) if so is not None else {}
            order = list(counts)
            admitted = objects.admitted(so) if so is not None else set()
            for r in range(cfg.requests):
                rid = _rid(r)
                out[("q_scheduled", i, r)] = counts.get(rid, 0)
                out[("q_spec", i, r)] = len(drafts.get(rid, ()))
                out[("q_order", i, r)] = order.index(rid) if rid in order else 0
                out[("q_admitted", i, r)] = rid in admitted
        return out

    def engine_view(self) -> dict[str, Any]:
        """What EngineCore.step_with_batch_queue decides with ([cite:engine-schedules engine-defers-delivery]):
        whether the scheduler has requests (unfinished ones, or finished ids not yet
        shipped; [cite:has-finished-requests])."""
        return {"has_requests": objects.has_requests(self.sched)}

    def orders(self) -> dict[str, list[str]]:
        """The order of Scheduler.running, and of the waiting queues as the waiting loop
        drains them (the queue served first, then waiting; adapter/objects.py)."""
        return objects.orders(self.sched)

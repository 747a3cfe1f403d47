"""The vLLM target: the spec's events driven through a real vLLM AsyncScheduler.

The tree is the one the run selected (`--vllm=0.32.0|0.33.0|PATH`, targets/vllm_tree.py);
the target plays the arms of the release profile that tree is checked against.

Each event goes through vLLM's own code path; where no public path exists, the
narrowest hook that reproduces what vLLM itself does:

  schedule(budget, ...)   set the step's token budget (scheduler.max_num_scheduled_tokens
                          and scheduler_config.max_num_batched_tokens, read at
                          sched:611-614), call schedule(), keep the SchedulerOutput in
                          our own FIFO (EngineCore's batch_queue, core:753). What the
                          runner returns for that step is the model's decision: the
                          harness hands the model's play of the step in (q_sampled
                          of the new step).
  deliver(stop, kv_fail)  pop the oldest SchedulerOutput, build a ModelRunnerOutput
                          (one row per scheduled id, q_sampled tokens each, the stop
                          token placed so that the stop-th appended token is STOP_ID),
                          report a KV-load failure as
                          KVConnectorOutput(invalid_block_ids={...}) (without a
                          connector recompute_kv_load_failures is True, sched:166),
                          call update_from_output (core:783). Fault under-drain:
                          first lower the output's num_scheduled_tokens by `short`
                          per request, as a plugin that rewrites it does.
  preempt(req, drop)      HOOK (no public path): the two statements schedule() runs on
                          an allocation failure (sched:834-840): remove the victim from
                          `scheduler.running` and call
                          `_preempt_request(victim, t, drop_stale_output=drop)`.
  reset_prefix_cache      reset_prefix_cache(reset_running_requests=True) (sched:2840).
                          Where a session still holds blocks vLLM raises RuntimeError
                          after the preemptions (sched:2868-2875), which EngineCore
                          returns as a failed utility call (core:1749-1751): the
                          step compares that outcome with the model's
                          (`observed["reset_fails"]`) and the case goes on.
  stream_update(req, u)   add_request with the same id and a resumable request of u
                          prompt tokens (sched:2616-2626).
  abort(req)              finish_requests("rK", FINISHED_ABORTED) (sched:2649).

An AssertionError raised by vLLM is not propagated: the step returns
Outcome(fired=<assert>) and the case ends (the scheduler is half-updated). The assert
is recognised by its statement (the source line of the innermost vLLM frame, matched
against spec/properties.py ASSERTS), wherever the line moved between releases.

targets.harness plays the model beside the target and hands each step's decision in.
"""

from __future__ import annotations

import linecache
import os
import time
import traceback
from collections import deque
from typing import Any, Mapping

from model.interpreter import StepResult, nested
from model.run import Played, is_named
from spec import profiles
from spec.config import Config
from spec.properties import BY_STATEMENT, statement_key
from targets import vllm_env as env
from targets import vllm_factory as factory
from targets.monitor import status_code
from targets.orders import request_id
from targets.protocol import Outcome

_SCHED_DIR = "/vllm/v1/core/sched/"


def show_traceback() -> bool:
    """SHOW_VLLM_TRACEBACK=1: print vLLM's own traceback whenever one of its asserts fires,
    also when the case expects it (a passing replay is otherwise quiet)."""
    return os.environ.get("SHOW_VLLM_TRACEBACK", "") not in ("", "0")


# the per-request variables vLLM's Request exposes (spec/vocabulary.py names)
REQUEST_VARS = (
    "status",
    "num_prompt_tokens",
    "num_tokens",
    "num_computed_tokens",
    "num_output_placeholders",
    "num_in_flight_tokens",
    "num_stale_output_tokens",
    "drop_stale_output",
    "is_prefill_chunk",
    "num_spec_tokens",
)
STREAM_VARS = ("resumable", "pending_update", "pending_update_len")
QUEUE_VARS = ("q_scheduled", "q_spec", "q_order", "q_admitted")


# how vLLM's reset_prefix_cache(reset_running_requests=True) fails when a block is still held (sched:2870-2875)
RESET_FAILED = "Failed to reset KV cache even when all the running requests are preempted"


class CaseEnded(RuntimeError):
    """The target was stepped after an assert fired or vLLM raised."""


def assert_site(exc: BaseException) -> tuple[str, int, str] | None:
    """(file name, line, statement) of the innermost frame of vLLM's scheduler package."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename.replace("\\", "/")
        if _SCHED_DIR in path:
            text = frame.line or linecache.getline(frame.filename, frame.lineno)
            return path.rsplit("/", 1)[-1], frame.lineno, text.strip()
    return None


def assert_name(site: tuple[str, int, str] | None) -> str | None:
    """The spec's name for the assert at a site, recognised by its statement."""
    if site is None:
        return None
    return BY_STATEMENT.get(statement_key(site[2]))


def status_of(status) -> int:
    """RequestStatus (req:370-386) -> spec.vocabulary.Status."""
    return status_code(status, env.load().RequestStatus)


def _rid(r: int) -> str:
    return request_id(r)


def _index(req_id: str) -> int:
    return int(req_id[1:])


# what this target reads of vLLM's scheduler and of a Request, and why: a tree that lacks
# one cannot be driven (vllm_env.preflight names each before any case runs)
READS = {
    "Scheduler": {
        "schedule": "to schedule a step",
        "update_from_output": "to deliver a step's output",
        "add_request": "to add a request and a streaming update",
        "finish_requests": "to abort a request",
        "reset_prefix_cache": "for reset_prefix_cache",
        "_preempt_request": "to preempt the victim as schedule() does on an allocation failure",
        "has_requests": "to compare what the engine loop decides with",
        "running": "to compare the running queue's order",
        "waiting": "to compare the waiting queue's order",
        "kv_cache_manager": "to name the blocks a KV-load failure reports",
        "max_num_scheduled_tokens": "to set a step's token budget",
    },
    "Request": {
        "status": "the request's status",
        "num_prompt_tokens": "L, the prompt length",
        "num_tokens": "T, the tokens so far",
        "num_computed_tokens": "c, the computed tokens",
        "num_output_placeholders": "P, the placeholders reserved",
        "num_in_flight_tokens": "F, the tokens in flight",
        "num_stale_output_tokens": "S, the stale output",
        "drop_stale_output": "D, whether stale output is dropped",
        "is_prefill_chunk": "X, whether the last step was a prefill chunk",
        "spec_token_ids": "the draft tokens",
        "streaming_queue": "a streaming session's queued update",
        "resumable": "whether the request is a streaming session",
    },
}


# the waiting queue the waiting loop serves first, per profile (spec/profiles.py waiting_queues)
FRONT_QUEUE = {
    "kv-holding-first": ("kv_holding_waiting", "the requests holding KV blocks wait there"),
    "skipped-first": ("skipped_waiting", "blocked and skipped requests wait there"),
}


def front_queue() -> tuple[str, str]:
    """The Scheduler attribute of the waiting queue served first, by the tree's profile,
    and what waits there."""
    return FRONT_QUEUE[profiles.of(env.tree().profile).waiting_queues]


def missing_reads(scheduler, request, cfg: Config) -> list[str]:
    """One phrase per attribute this target reads that the tree's objects lack."""
    out = []
    queue, where = front_queue()
    wanted = {**READS, "Scheduler": {**READS["Scheduler"], queue: f"to compare the waiting queue's order ({where})"}}
    for kind, obj in (("Scheduler", scheduler), ("Request", request)):
        for name, why in wanted[kind].items():
            if not hasattr(obj, name):
                reads = "reads " + why if kind == "Scheduler" else "compares after every step: " + why
                out.append(f"this tree has no {kind}.{name}, which the target {reads}")
    return out


class VllmTarget:
    """Target protocol over vLLM's AsyncScheduler (or the clamp subclass)."""

    name = "vllm"
    observes_asserts = True

    def __init__(self, clamp: bool | None = None, guard: bool = False, monitor: bool = False):
        """clamp: None follows cfg.clamp; True/False forces the scheduler class
        (a second arm: the model's projection then differs where the clamp acts).
        guard: this target plays the step-reservation guard's arms (and only those).
        monitor: the scheduler is the contract monitor's class (targets/monitor_scheduler.py;
        with guard, in its drop mode), which must play every arm as vLLM's own does."""
        env.load()  # TargetUnavailable if vLLM is not importable
        self.clamp_option = False if monitor and clamp is None else clamp
        self.guard_option = guard
        self.monitor_option = monitor
        # the tree's scheduler releases a step whose output it skips for a KV-load failure
        # (fixes/v2-recompute-rollback, the release_skipped arms): set by fixes/arms.py
        self.releases_skipped = False
        self.cfg: Config | None = None
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
        self.sched = factory.new_scheduler(cfg, clamp=self.clamp, monitor=self.monitor_option)
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
            self.sched.add_request(req)  # sched:2616-2647, in id order
            self.requests.append(req)
        self.fifo: deque = deque()  # (SchedulerOutput, {req index: tokens to return})
        self.ended: str | None = None

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
            facts = handler(args, result)
        except AssertionError as exc:
            site = assert_site(exc)
            name = assert_name(site)
            where = f"{site[0]}:{site[1]} `{site[2]}`" if site else "outside vllm/v1/core/sched"
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

    def _schedule(self, args, result: StepResult) -> dict:
        cfg = self.cfg
        factory.set_budget(self.sched, args[("budget",)])
        out = self.sched.schedule()
        pos = result.state[("queue_len",)] - 1
        returns = {r: result.state[("q_sampled", pos, r)] for r in range(cfg.requests)}
        self.fifo.append((out, returns))
        return {
            "num_scheduled_tokens": dict(out.num_scheduled_tokens),
            "spec": {k: len(v) for k, v in out.scheduled_spec_decode_tokens.items()},
            "runner_returns": returns,
        }

    def _deliver(self, args, result: StepResult) -> dict:
        out, returns = self.fifo.popleft()
        return self._update_from_output(out, {r: [factory.SAMPLED_ID] * n for r, n in returns.items()}, args)

    def _update_from_output(self, out, tokens_of: dict, args) -> dict:
        """Hand the scheduler a step's output: each scheduled request's tokens (the last one
        made a stop token where the step stops it) and, for a KV-load failure, the failed block."""
        V = env.load()
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for req_id in req_ids:
            r = _index(req_id)
            tokens = list(tokens_of.get(r, []))
            stop = args[("stop", r)]
            if stop:
                if stop > len(tokens):
                    raise ValueError(f"deliver: stop={stop} for {req_id} but the runner returns {len(tokens)} tokens")
                tokens[stop - 1] = factory.STOP_ID
            sampled.append(tokens)
        kv_output = None
        if self.cfg.has("kvfail") and args[("kv_fail_req",)] >= 0:
            r = args[("kv_fail_req",)]
            (block_ids,) = self.sched.kv_cache_manager.get_block_ids(_rid(r))
            index = args[("kv_fail_block",)]
            if index >= len(block_ids):
                raise ValueError(f"deliver: {_rid(r)} has {len(block_ids)} blocks, no index {index}")
            kv_output = V.KVConnectorOutput(invalid_block_ids={block_ids[index]})
        if "under-drain" in self.cfg.faults:
            # the fault as tpu-inference #3492's scheduler did it: the counts of the output
            # handed to update_from_output rewritten below what was scheduled
            for req_id in req_ids:
                out.num_scheduled_tokens[req_id] -= args[("short", _index(req_id))]
        runner_output = V.ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={req_id: i for i, req_id in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=kv_output,
        )
        self.sched.update_from_output(out, runner_output)
        return {"sampled": dict(zip(req_ids, sampled))}

    def _preempt(self, args, result: StepResult) -> dict:
        cfg = self.cfg
        victim = self.requests[args[("req",)]]
        if cfg.has("preempt") and cfg.has("preempt-drop"):
            drop = bool(args[("drop",)])
        else:
            drop = cfg.has("preempt-drop")
        was_last = bool(self.sched.running) and self.sched.running[-1] is victim
        # sched:834-840: preempted_req = self.running.pop(); _preempt_request(...)
        self.sched.running.remove(victim)
        self.sched._preempt_request(victim, time.monotonic(), drop_stale_output=drop)
        return {"victim_was_last": was_last, "drop": drop}

    def _reset_prefix_cache(self, args, result: StepResult) -> dict:
        """The call, and whether it raised where the model says it fails: after the
        preemptions, a block still held makes it raise (sched:2868-2875); EngineCore
        answers the caller with the failure and runs on (core:1749-1751)."""
        try:
            self.sched.reset_prefix_cache(reset_running_requests=True)
            failed = None
        except RuntimeError as exc:
            if not str(exc).startswith(RESET_FAILED):
                raise
            failed = f"{type(exc).__name__}: {exc}"
        predicted = bool(result.observed.get("reset_fails", False))
        mismatches = []
        if predicted != (failed is not None):
            says = "fails (a session holds KV blocks)" if predicted else "succeeds"
            mismatches.append(f"reset_prefix_cache: the model says the call {says}; vLLM " + (failed or "returned"))
        return {"reset_failed": failed, "mismatches": mismatches}

    def _stream_update(self, args, result: StepResult) -> dict:
        r = args[("req",)]
        update = factory.make_request(r, args[("new_tokens",)], self.cfg.block_size, resumable=True)
        self.sched.add_request(update)
        return {}

    def _abort(self, args, result: StepResult) -> dict:
        V = env.load()
        done = self.sched.finish_requests(_rid(args[("req",)]), V.RequestStatus.FINISHED_ABORTED)
        return {"aborted": [q.request_id for q in done]}

    # ---------------------------------------------------------------- project
    def project(self) -> dict[tuple, Any]:
        cfg = self.cfg
        out: dict[tuple, Any] = {}
        for r, req in enumerate(self.requests):
            out[("status", r)] = status_of(req.status)
            out[("num_prompt_tokens", r)] = req.num_prompt_tokens
            out[("num_tokens", r)] = req.num_tokens
            out[("num_computed_tokens", r)] = req.num_computed_tokens
            out[("num_output_placeholders", r)] = req.num_output_placeholders
            out[("num_in_flight_tokens", r)] = req.num_in_flight_tokens
            out[("num_stale_output_tokens", r)] = req.num_stale_output_tokens
            out[("drop_stale_output", r)] = bool(req.drop_stale_output)
            out[("is_prefill_chunk", r)] = bool(req.is_prefill_chunk)
            out[("num_spec_tokens", r)] = len(req.spec_token_ids)
            if cfg.has("stream"):
                queue = req.streaming_queue or ()
                out[("resumable", r)] = bool(req.resumable)
                out[("pending_update", r)] = len(queue) > 0
                first = queue[0] if queue else None
                out[("pending_update_len", r)] = len(first.prompt_token_ids or ()) if first is not None else 0
            if cfg.is_v2 and cfg.pp > 1:
                out[("next_decode_eligible_step", r)] = req.next_decode_eligible_step
            if cfg.tracks_held_blocks:
                out[("holds_blocks", r)] = any(self.sched.kv_cache_manager.get_block_ids(_rid(r)))
            if cfg.clamp and self.clamp:
                out[("clamp_dropped", r)] = self.sched.clamp_dropped.get(_rid(r), 0)
            if cfg.guard != "none":
                out[("guard_dropped", r)] = self.sched.guard_dropped.get(_rid(r), 0)
        if cfg.is_v2 and cfg.pp > 1:
            out[("current_step",)] = self.sched.current_step
        out[("queue_len",)] = len(self.fifo)
        # the in-flight steps, oldest first; unused positions read 0 as in the model
        for i in range(cfg.queue_depth):
            so = self.fifo[i][0] if i < len(self.fifo) else None
            order = list(so.num_scheduled_tokens) if so is not None else []
            admitted = set()
            if so is not None:
                admitted = {d.req_id for d in so.scheduled_new_reqs}
                admitted |= set(so.scheduled_cached_reqs.resumed_req_ids)
            for r in range(cfg.requests):
                rid = _rid(r)
                n = so.num_scheduled_tokens.get(rid, 0) if so is not None else 0
                out[("q_scheduled", i, r)] = n
                out[("q_spec", i, r)] = len(so.scheduled_spec_decode_tokens.get(rid, ())) if so is not None else 0
                out[("q_order", i, r)] = order.index(rid) if rid in order else 0
                out[("q_admitted", i, r)] = rid in admitted
        return out

    def engine_view(self) -> dict[str, Any]:
        """What EngineCore.step_with_batch_queue decides with (core:724, core:754-756):
        whether the scheduler has requests (unfinished ones, or finished ids not yet
        shipped; sched:2813-2838)."""
        return {"has_requests": bool(self.sched.has_requests())}

    def orders(self) -> dict[str, list[str]]:
        """The order of Scheduler.running, and of the waiting queues as the waiting
        loop drains them: kv_holding_waiting (0.31.0 on, sched:915-918) or skipped_waiting
        (0.29.0, 0.30.0 [select-waiting-queue]) first, then waiting."""
        first = getattr(self.sched, front_queue()[0])
        return {
            "running": [q.request_id for q in self.sched.running],
            "waiting": [q.request_id for q in first] + [q.request_id for q in self.sched.waiting],
        }

"""The real-runner target: vLLM's scheduler and vLLM's own model runner, stepped together.

`VllmTarget` (targets/vllm_target.py) drives the real `AsyncScheduler`, but what the
runner returns for each step comes from the model. Here every `schedule` hands the real
`SchedulerOutput` to a real model runner of the same tree, run on CPU with Triton's
interpreter, and every `deliver` hands the runner's real `ModelRunnerOutput` back to
`update_from_output`. Which requests are sampled, how many tokens come back, the V2
slots and the V1 cached states are vLLM's own decisions; the harness compares them
with the model's after every step (`project()`), beside the scheduler's state.

Real code (the tree's, unmodified), called the way EngineCore and the worker call it:
  V2 (vllm/v1/worker/gpu/, through vllm/v1/worker/cpu/model_runner.py's CPUModelRunner)
    `GPUModelRunner.__init__`, `load_model` (Sampler, RejectionSampler, prompt-logprob
    and structured-output workers, model state), `execute_model` (finish_requests,
    free_states, add_requests -> RequestState.add_request and apply_staged_writes,
    update_requests, block tables, gather_batch_req_state, dispatch_cg_and_sync_dp with
    a CUDA-graph manager in mode NONE, prepare_inputs and its kernels, prepare_attn),
    `sample_tokens` (Sampler / RejectionSampler, the discard kernel
    get_num_sampled_and_rejected, AsyncOutput, postprocess_sampled -> post_update).
  V1 (vllm/v1/worker/cpu_model_runner.py's CPUModelRunner over gpu_model_runner.py)
    `__init__`, `execute_model` (the SchedulerOutput copy, _update_states,
    _prepare_inputs with the discard mask, _prepare_input_ids, slot mappings,
    _build_attention_metadata's common metadata), `sample_tokens` (Sampler /
    RejectionSampler, the ngram_gpu bookkeeping update_token_ids_ngram and
    valid-sampled-token counts, _bookkeeping_sync, AsyncGPUModelRunnerOutput).
  vLLM's CPU patches (vllm/v1/worker/cpu/shm.py), imported as the CPU worker does.

Ours, each as small as we could make it (and nothing else):
  1. The forward pass: `StubModel`, whose forward returns zeros and records the
     input ids and positions it is fed, and whose `compute_logits` puts all the mass
     on SAMPLED_ID. What token id comes back is therefore ours (SAMPLED_ID, or STOP_ID
     written over the trace's stop position at delivery), never how many.
  2. The KV cache and attention: `initialize_kv_cache` is not run. V2 gets vLLM's
     `BlockTables` built directly, an empty KV-cache config, no attention groups and a
     `ModelCudaGraphManager` in mode NONE; V1 gets a one-group KV-cache config with no
     attention groups (so `_build_attention_metadata` builds the common metadata the
     drafter path reads and no backend metadata). Attention backends never run.
  3. The drafter's proposal: `propose` of the speculator (V2) / NgramProposerGPU (V1)
     returns placeholders, and NgramProposerGPU's compile warm-up (`_dummy_run`) is
     skipped. Before each step, the draft tokens of a request with drafts are written
     where the runner reads them (V2 `req_states.draft_tokens[slot]`, V1
     `_draft_token_ids[previous batch index]`): SAMPLED_ID for the trace's `accepted`
     first drafts, REJECTED_ID after, so vLLM's own rejection sampler accepts exactly
     `accepted`. A draft the runner itself turns into a placeholder (V2: a step that
     starts inside prefill_len; V1: a request that was not in the previous batch) is
     rejected whatever we write: that is vLLM's decision, and it is compared.
  4. Pipeline-parallel ranks: one runner with pipeline_parallel_size=1 plays every
     stage of a pp>1 scheduler (the last rank's bookkeeping; no other rank runs).
  5. CPU shims: pinned memory requested by V1's ngram_gpu buffers is allocated
     unpinned; the memory profiler around V2's load_model (two gc.collect calls, 1 s)
     is skipped; a gloo world of one process; Triton's interpreter lists the builtins
     of triton.language once instead of at every launch (speed only).
  6. The faults the model injects (cfg.faults), at their narrowest point:
     stale-slot-read: right after RequestState.add_request of a flagged request, the
       writes it made to the slot's device state are dropped (its staged writes to
       total_len, num_computed_tokens and all_token_ids, and prefill_len's UVA
       source), so the slot reads as its previous occupant left it;
     over-delivery: `extra` SAMPLED_ID tokens appended to the request's list in the
       runner's ModelRunnerOutput, after the runner decided.
  7. `v2-live` is the V2 runner with one patch: the discard kernel's call in Sampler
     and RejectionSampler gets the slot's total_len where it gets prefill_len.
  8. The model's preemption event also removes the victim from the scheduler's record
     of the previous step's ids (`_preempt` below: what vLLM's own preempting step
     leaves), or the next step would resume it without its token ids.
The runners the target plays are "v1", "v2" and "v2-live"; the model's other runner
variants (proposed fixes) have no code in the tree and are refused (`accepts`).

The runner gets its own VllmConfig (a deep copy of the scheduler's, budget restored,
pp=1): the scheduler's per-step budget must not size the runner's buffers (the
interpreted kernels do not bound-check), and building the V1 runner switches async
scheduling off in the config it is given. A fresh runner is built per case (10-30 ms;
vLLM is imported once per process).

What the runner computes is measured too (`Outcome.observed["runner"]`, per scheduled
request id): the positions it fed (start, length, contiguous), the scheduler's
(num_computed_tokens before the step, num_scheduled_tokens), any placeholder input id
(PLACEHOLDER_ID = -1, what both releases write for unknown tokens), and the input ids
that differ from the scheduler's token at the scheduler's position. V1's ids are read
as `_preprocess` receives them: under spec decoding it then clamps -1 to 0
(gpu_model_runner.py:3311), which hides the placeholder from the model but not its
meaning. targets/real_runner_measure.py states and checks the conditions.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import tempfile
from typing import Any, Mapping

from spec.config import Config
from spec.vocabulary import Status
from targets import vllm_env as env
from targets.protocol import TargetUnavailable
from targets.vllm_target import VllmTarget, _index, _rid

SAMPLED_ID = env.SAMPLED_ID  # what the stub forward pass predicts everywhere
REJECTED_ID = 13  # a draft the target model does not predict: rejected
PLACEHOLDER_ID = -1  # vLLM's id for a token not known yet (async output, padded drafts)
HIDDEN = 8  # width of the stub's hidden states (never read)

_SETUP = False


class UnrealisablePick(TargetUnavailable):
    """The trace picks something real code cannot do (accepting a placeholder draft)."""


_RUNNER_CONFIGS: dict = {}


def drafts_are_placeholders(cfg: Config, before: Mapping, step) -> list[bool]:
    """Per request, whether the drafts a `schedule` step gives it are placeholders the
    runner fills itself, so that no drafter can make any of them accepted (measured on
    both releases; a model trace may still pick accepted > 0 there):
      * an admission (new, resumed or a streaming update): the scheduler pads it with
        -1 drafts, and V2's add_request zeroes the slot's drafts;
      * V1: a request that was not in the persistent batch the step before (v1_in_batch
        false): its drafts are the scheduler's -1 placeholders, the previous proposal is
        indexed by the previous batch (prev_req_id_to_index);
      * V2: a step whose first logit row lies inside the slot's prefill_len,
        g + n - (1 + ks) < prefill_len: gather_draft_sampled turns its drafts into -1.
    `step` is the model's StepResult of the `schedule` step, `before` the state before it."""
    state = step.state
    pos = state[("queue_len",)] - 1
    out = []
    for r in range(cfg.requests):
        ks = state[("q_spec", pos, r)]
        if not ks:
            out.append(False)
        elif state[("q_admitted", pos, r)]:
            out.append(True)
        elif cfg.is_v2:
            row = step.observed["v2_rows"][r]
            out.append(row["num_computed"] + row["query_len"] - (1 + ks) < row["prefill_len"])
        else:
            out.append(not before[("v1_in_batch", r)])
    return out


def beyond_runner_contract(cfg: Config, state: Mapping) -> str | None:
    """A state no real runner can take on as the model does, named; None otherwise.

    prompt-beyond-tokens: a streaming session whose prompt is longer than its token
    list (L > T; on 0.32.0 a KV-load failure lets a stop land below the prompt, and the
    session update keeps output up to num_computed_tokens). The V2 runner's
    RequestState.add_request then asserts `prefill_len >= prompt_len` (states.py:107)
    and the worker dies; the V1 runner trims its outputs with a negative
    num_output_tokens (gpu_model_runner.py:1409, `del output_token_ids[n:]`, which keeps
    all but the last |n|) and discards a step the model samples. The model states
    neither: the fuzzer ends a trace there (tests/test_real_runner.py shows both)."""
    for r in range(cfg.requests):
        if state[("num_prompt_tokens", r)] > state[("num_tokens", r)] and state[("status", r)] != Status.FINISHED:
            return "prompt-beyond-tokens"
    return None


# ------------------------------------------------------------------ process setup


def _setup() -> None:
    """Once per process: the tree, vLLM's CPU patches, a gloo world of one."""
    global _SETUP
    if _SETUP:
        return
    env.load()
    try:
        import vllm.v1.worker.cpu.shm  # noqa: F401  (vLLM's own CPU patches, as cpu_worker imports them)
        from vllm.config import set_current_vllm_config
        from vllm.distributed import parallel_state as ps
    except Exception as exc:  # noqa: BLE001
        raise TargetUnavailable(f"{env.tree().title}: vLLM's CPU worker patches do not import ({exc})") from exc
    _cache_interpreter_builtins()
    if not ps.model_parallel_is_initialized():
        cfg = _runner_config(Config("runner-setup", runner="v1", requests=1))
        handle, path = tempfile.mkstemp(prefix="real-runner-gloo-")
        os.close(handle)
        os.unlink(path)
        with set_current_vllm_config(cfg):
            ps.init_distributed_environment(
                world_size=1, rank=0, distributed_init_method=f"file://{path}", local_rank=0, backend="gloo"
            )
            ps.initialize_model_parallel(1, 1)
    _SETUP = True


def _cache_interpreter_builtins() -> None:
    """Speed only: at every launch and device-function call, Triton's interpreter lists
    all members of triton.language (inspect.getmembers) to wrap its builtins, and the
    launch restores them afterwards, so the list is the same each time; it is computed
    once per package. About a quarter of a V2 step's time; no kernel runs differently."""
    import inspect

    from triton.runtime import interpreter

    if getattr(interpreter, "_builtins_cached", False):
        return
    members: dict[int, list] = {}

    def patch_builtin(pkg, builder, scope):
        found = members.get(id(pkg))
        if found is None:
            found = members[id(pkg)] = [
                (name, member) for name, member in inspect.getmembers(pkg) if interpreter.tl.core.is_builtin(member)
            ]
        for name, member in found:
            interpreter._patch_attr(pkg, name, member, builder, scope)

    interpreter._patch_builtin = patch_builtin
    interpreter._builtins_cached = True


def _runner_config(cfg: Config):
    """The runner's own VllmConfig: the scheduler's shape with pp=1 and no clamp, deep
    copied so that neither side's mutations reach the other, the budget restored."""
    shape = dataclasses.replace(env.Shape.of(cfg, clamp=False), pp=1)
    if shape not in _RUNNER_CONFIGS:
        config = copy.deepcopy(env.vllm_config(shape))
        config.scheduler_config.max_num_batched_tokens = env.MAX_MODEL_LEN
        config.scheduler_config.async_scheduling = True
        _RUNNER_CONFIGS[shape] = config
    return _RUNNER_CONFIGS[shape]


# ------------------------------------------------------------------ the forward pass


def _stub_model(records: bool):
    import torch
    import torch.nn as nn

    class StubModel(nn.Module):
        """The forward pass: predicts SAMPLED_ID everywhere; with `records`, keeps the
        input ids and positions it is fed (V2; V1 records them before its clamp)."""

        def __init__(self):
            super().__init__()
            self.fed: list[tuple] = []
            self.vocab = 1000

        def forward(self, input_ids=None, positions=None, intermediate_tensors=None, inputs_embeds=None, **_):
            if records:
                self.fed.append((None if input_ids is None else input_ids.tolist(), positions.tolist()))
            return torch.zeros(positions.shape[0], HIDDEN)

        def compute_logits(self, hidden_states):
            logits = torch.full((hidden_states.shape[0], self.vocab), -1.0e4)
            logits[:, SAMPLED_ID] = 0.0  # exp(-1e4) is 0 in float32: every sampler picks it
            return logits

    return StubModel()


@contextlib.contextmanager
def _patched(obj, name, value):
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


class _NoMemoryProfiler:
    """DeviceMemoryProfiler without its two gc.collect() calls (1 s per runner)."""

    consumed_memory = 0

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ------------------------------------------------------------------ building runners


def _build_v2(cfg: Config, config, model):
    import torch
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner
    from vllm.v1.worker.gpu import model_runner as v2_module
    from vllm.v1.worker.gpu.block_table import BlockTables
    from vllm.v1.worker.gpu.cudagraph_utils import ModelCudaGraphManager

    device = torch.device("cpu")
    runner = CPUModelRunner(config, device)
    with _patched(v2_module, "DeviceMemoryProfiler", _NoMemoryProfiler):
        runner.load_model(model=model)
    # initialize_kv_cache is not run (attention backends): its bookkeeping parts
    block_size = cfg.block_size
    runner.block_tables = BlockTables(
        block_sizes=[block_size],
        max_num_reqs=runner.max_num_reqs,
        max_num_batched_tokens=runner.max_num_tokens,
        max_num_blocks_per_group=[-(-runner.max_model_len // block_size)],
        device=device,
    )
    runner.kv_cache_config = KVCacheConfig(
        num_blocks=env.Shape.of(cfg, clamp=False).num_blocks, kv_cache_tensors=[], kv_cache_groups=[]
    )
    runner.attn_groups = []
    runner.cudagraph_manager = ModelCudaGraphManager(config, device, CUDAGraphMode.NONE, runner.decode_query_len)
    if runner.speculator is not None:
        steps = runner.num_speculative_steps

        def propose(input_batch, *args, **kwargs):
            """The drafter's proposal: placeholders; the target writes the real drafts."""
            return torch.zeros(input_batch.num_reqs, steps, dtype=torch.int64)

        runner.speculator.propose = propose
    return runner


def _build_v1(cfg: Config, config, model):
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.spec_decode.ngram_proposer_gpu import NgramProposerGPU
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    zeros = torch.zeros

    def unpinned_zeros(*args, pin_memory=False, **kwargs):
        return zeros(*args, **kwargs)

    with _patched(torch, "zeros", unpinned_zeros), _patched(NgramProposerGPU, "_dummy_run", lambda self: None):
        runner = CPUModelRunner(config, torch.device("cpu"))
    # NgramProposerGPU builds a VllmConfig over the runner's scheduler config, which
    # switches async scheduling off there; the runner read it before (use_async_scheduling)
    config.scheduler_config.async_scheduling = True
    if not runner.use_async_scheduling:
        raise TargetUnavailable(f"{env.tree().title}: the V1 runner was built without async scheduling")
    runner.model = model
    preprocess = runner._preprocess

    def recorded_preprocess(scheduler_output, *args, **kwargs):
        """Measurement only: the input ids and positions as prepared, before
        _preprocess clamps spec-decode placeholders (-1) to 0."""
        n = scheduler_output.total_num_scheduled_tokens
        model.fed.append((runner.input_ids.gpu[:n].tolist(), runner.positions[:n].tolist()))
        return preprocess(scheduler_output, *args, **kwargs)

    runner._preprocess = recorded_preprocess
    block_size = cfg.block_size
    runner.kv_cache_config = KVCacheConfig(
        num_blocks=env.Shape.of(cfg, clamp=False).num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
            )
        ],
    )
    runner.attn_groups = [[]]
    if getattr(runner, "drafter", None) is not None:

        def propose(num_speculative_tokens, num_tokens_no_spec, *args, **kwargs):
            """The drafter's proposal: placeholders, all valid; the target writes the real drafts."""
            batch = num_tokens_no_spec.shape[0]
            drafts = torch.zeros(batch, num_speculative_tokens, dtype=torch.int32)
            return drafts, torch.full((batch,), num_speculative_tokens, dtype=torch.int32)

        runner.drafter.propose = propose
    return runner


# ------------------------------------------------------------------ the target


class RealRunnerTarget(VllmTarget):
    """The vLLM target with the tree's own model runner deciding what is returned."""

    name = "runner"

    def __init__(self, clamp: bool | None = None):
        super().__init__(clamp=clamp)
        self.name = "runner-clamp" if clamp else "runner"
        _setup()
        self.log: list[dict] = []  # per step: the runner observations (see module docstring)

    RUNNERS = ("v1", "v2", "v2-live")  # real code, or (v2-live) real code with one patch

    def accepts(self, cfg: Config) -> str | None:
        """The scheduler side's arms (VllmTarget.accepts), for the runners this tree has."""
        if cfg.runner not in self.RUNNERS:
            return f"{self.name} runs vLLM's own runners ({', '.join(self.RUNNERS)}); {cfg.runner} is not in the tree"
        return super().accepts(cfg)

    # ---------------------------------------------------------------- reset
    def reset(self, cfg: Config, init: Mapping) -> None:
        super().reset(cfg, init)
        self.runner_config = _runner_config(cfg)
        self.model = _stub_model(records=cfg.is_v2)
        with self._context():
            build = _build_v2 if cfg.is_v2 else _build_v1
            self.runner = build(cfg, self.runner_config, self.model)
        self.log = []

    @contextlib.contextmanager
    def _context(self):
        from vllm.config import set_current_vllm_config

        with env._runner(self.cfg.is_v2), set_current_vllm_config(self.runner_config):
            yield

    # ---------------------------------------------------------------- events
    def _schedule(self, args, result) -> dict:
        cfg = self.cfg
        env.set_budget(self.sched, args[("budget",)])
        out = self.sched.schedule()
        sent = self._shipped(out)
        self._write_drafts(out, args)
        fed_before = len(self.model.fed)
        try:
            with self._context(), self._faults(args), self._live():
                output = self.runner.execute_model(out)
                if out.total_num_scheduled_tokens > 0:
                    batch = self._batch_layout()
                    output = self.runner.sample_tokens(None)
                else:
                    batch = None
                if hasattr(output, "get_output"):
                    output = output.get_output()
        except Exception as exc:  # noqa: BLE001 - whatever the runner raises ends the case, reported
            where = _runner_site(exc)
            self.ended = f"schedule: the model runner raised {type(exc).__name__} at {where}"
            return {
                "error": f"the model runner raised {type(exc).__name__} at {where}: {exc}",
                "num_scheduled_tokens": dict(out.num_scheduled_tokens),
            }
        if dict(out.num_scheduled_tokens) != sent["num_scheduled_tokens"]:
            raise AssertionError("the runner changed the scheduler's SchedulerOutput")  # copied in execute_model
        returns = {}
        for req_id in out.num_scheduled_tokens:
            r = _index(req_id)
            tokens = list(output.sampled_token_ids[output.req_id_to_index[req_id]])
            extra = args.get(("extra", r), 0) if "over-delivery" in cfg.faults else 0
            if tokens and extra:
                tokens += [SAMPLED_ID] * extra  # fault: over-delivery
            returns[r] = tokens
        self.fifo.append((out, returns))
        measured = self._measure(sent, batch, self.model.fed[fed_before:])
        self._check_realisable(args, result, returns, measured)
        observed = {
            "num_scheduled_tokens": dict(out.num_scheduled_tokens),
            "spec": {k: len(v) for k, v in out.scheduled_spec_decode_tokens.items()},
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
        V = env.load()
        cfg = self.cfg
        out, returns = self.fifo.popleft()
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for req_id in req_ids:
            r = _index(req_id)
            tokens = list(returns.get(r, []))
            stop = args[("stop", r)]
            if stop:
                if stop > len(tokens):
                    raise ValueError(f"deliver: stop={stop} for {req_id} but the runner returned {len(tokens)} tokens")
                tokens[stop - 1] = env.STOP_ID
            sampled.append(tokens)
        kv_output = None
        if cfg.has("kvfail") and args[("kv_fail_req",)] >= 0:
            r = args[("kv_fail_req",)]
            (block_ids,) = self.sched.kv_cache_manager.get_block_ids(_rid(r))
            index = args[("kv_fail_block",)]
            if index >= len(block_ids):
                raise ValueError(f"deliver: {_rid(r)} has {len(block_ids)} blocks, no index {index}")
            kv_output = V.KVConnectorOutput(invalid_block_ids={block_ids[index]})
        runner_output = V.ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={req_id: i for i, req_id in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=kv_output,
        )
        self.sched.update_from_output(out, runner_output)
        return {"sampled": dict(zip(req_ids, sampled))}

    def _preempt(self, args, result) -> dict:
        """The model's preemption between steps stands for vLLM's preemption inside a
        schedule() call (sched:834-841), which then schedules nothing else for the victim
        (sched:900) and records the step's ids without it (sched:1451-1452). The scheduler
        target runs only the two preempting statements; the runner also needs that
        record, or a victim the next step resumes gets no all_token_ids and V1's
        _update_states raises KeyError (gpu_model_runner.py:1438; 0.33.0: 1442), which vLLM's own
        preemption never reaches."""
        observed = super()._preempt(args, result)
        self.sched.prev_step_scheduled_req_ids.discard(_rid(args[("req",)]))
        return observed

    # ---------------------------------------------------------------- ours
    def _shipped(self, out) -> dict:
        """What the scheduler asked for, per request id: its computed count before the
        step, the tokens, and its token list (to tell what the runner should feed)."""
        c0 = {d.req_id: d.num_computed_tokens for d in out.scheduled_new_reqs}
        cached = out.scheduled_cached_reqs
        c0.update(zip(cached.req_ids, cached.num_computed_tokens))
        tokens = {}
        for req_id in out.num_scheduled_tokens:
            tokens[req_id] = list(self.requests[_index(req_id)].all_token_ids)
        return {
            "num_scheduled_tokens": dict(out.num_scheduled_tokens),
            "c0": c0,
            "tokens": tokens,
            "spec": {k: len(v) for k, v in out.scheduled_spec_decode_tokens.items()},
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
        for req_id, drafts in out.scheduled_spec_decode_tokens.items():
            k = len(drafts)
            if not k:
                continue
            accepted = args.get(("accepted", _index(req_id)), 0)
            row = [SAMPLED_ID] * accepted + [REJECTED_ID] * (k - accepted)
            if self.cfg.is_v2:
                states = self.runner.req_states
                slot = states.req_id_to_index.get(req_id)
                if slot is not None:
                    states.draft_tokens[slot, :k] = _tensor(row, states.draft_tokens.dtype)
            else:
                prev = self.runner.input_batch.prev_req_id_to_index or {}
                drafts_t = self.runner._draft_token_ids
                if req_id in prev and drafts_t is not None:
                    drafts_t[prev[req_id], :k] = _tensor(row, drafts_t.dtype)

    @contextlib.contextmanager
    def _faults(self, args):
        """stale-slot-read: the flagged adds' device-side writes are dropped (V2)."""
        if "stale-slot-read" not in self.cfg.faults:
            yield
            return
        states = self.runner.req_states
        real_add = states.add_request
        staged = (states.total_len, states.num_computed_tokens, states.all_token_ids)

        def add_request(req_id, *a, **k):
            lost = bool(args.get(("stale_read", _index(req_id)), False))
            before = [len(t._staged_write_indices) for t in staged]
            contents = [len(t._staged_write_contents) for t in staged]
            slot = states.free_indices[-1] if states.free_indices else None
            prefill_before = int(states.prefill_len.np[slot]) if slot is not None else None
            real_add(req_id, *a, **k)
            if lost:
                for t, n, m in zip(staged, before, contents):
                    del t._staged_write_indices[n:], t._staged_write_starts[n:], t._staged_write_cu_lens[n:]
                    del t._staged_write_contents[m:]
                states.prefill_len.np[slot] = prefill_before

        states.add_request = add_request
        try:
            yield
        finally:
            del states.add_request

    @contextlib.contextmanager
    def _live(self):
        """v2-live: the discard kernel's call gets total_len where it gets prefill_len."""
        if self.cfg.runner != "v2-live":
            yield
            return
        from vllm.v1.worker.gpu.sample import sampler as sampler_module
        from vllm.v1.worker.gpu.spec_decode import rejection_sampler as rejection_module

        states = self.runner.req_states
        real = sampler_module.get_num_sampled_and_rejected

        def live(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len):
            assert prefill_len is states.prefill_len.gpu
            return real(num_sampled, seq_lens, cu_num_logits, idx_mapping, states.total_len.gpu)

        with (
            _patched(sampler_module, "get_num_sampled_and_rejected", live),
            _patched(rejection_module, "get_num_sampled_and_rejected", live),
        ):
            yield

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
    def _batch_layout(self) -> tuple[list[str], list[int]]:
        """Request order and query start offsets of the batch the forward pass ran."""
        if self.cfg.is_v2:
            batch = self.runner.execute_model_state.input_batch
            return list(batch.req_ids), [int(x) for x in batch.query_start_loc_np[: batch.num_reqs + 1]]
        num_reqs = self.runner.input_batch.num_reqs
        return (
            list(self.runner.input_batch.req_ids[:num_reqs]),
            [int(x) for x in self.runner.query_start_loc.np[: num_reqs + 1]],
        )

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
                slot = self.runner.req_states.req_id_to_index.get(req_id)
                found[req_id]["prefill_len"] = (
                    int(self.runner.req_states.prefill_len.gpu[slot]) if slot is not None else None
                )
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
        states = self.runner.req_states
        prefill = states.prefill_len.gpu.tolist()
        computed = states.num_computed_tokens.gpu.tolist()
        total = states.total_len.gpu.tolist()
        out: dict[tuple, Any] = {}
        for r in range(cfg.requests):
            slot = states.req_id_to_index.get(_rid(r))
            out[("v2_present", r)] = slot is not None
            if slot is not None or model[("v2_present", r)]:
                here = slot is not None
                out[("v2_slot", r)] = slot
                out[("v2_prefill_len", r)] = prefill[slot] if here else None
                out[("v2_num_computed", r)] = computed[slot] if here else None
                out[("v2_total_len", r)] = total[slot] if here else None
        free = list(states.free_indices)
        out[("v2_num_free",)] = len(free)
        model_free = [model[("v2_free", i)] for i in range(model[("v2_num_free",)])]
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
        batch = self.runner.input_batch.req_id_to_index
        out: dict[tuple, Any] = {}
        for r in range(cfg.requests):
            rid = _rid(r)
            here = rid in batch
            out[("v1_in_batch", r)] = here
            if here or model[("v1_in_batch", r)]:
                state = self.runner.requests.get(rid) if here else None
                out[("v1_num_tokens", r)] = state.num_tokens if state is not None else None
                out[("v1_prev_draft_len", r)] = state.prev_num_draft_len if state is not None else None
        return out


def _runner_site(exc: BaseException) -> str:
    """file:line `statement` of the innermost frame in vLLM's worker package."""
    import linecache
    import traceback

    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename.replace("\\", "/")
        if "/vllm/v1/worker/" in path or "/vllm/v1/spec_decode/" in path or "/vllm/v1/sample/" in path:
            text = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
            return f"{path.split('/vllm/', 1)[1]}:{frame.lineno} `{text}`"
    return "outside vLLM's worker"


def _tensor(values, dtype):
    import torch

    return torch.tensor(values, dtype=dtype)


def preflight() -> str:
    """Build vLLM's V1 and V2 runners of the loaded tree and run one step on each; one
    line on success. Raises TargetUnavailable (one line: cause and fix) otherwise."""
    from targets import vllm_tree

    t = env.tree()
    for runner in ("v1", "v2"):
        cfg = Config(f"runner-preflight-{runner}", runner=runner, requests=1, spec_tokens=1)
        try:
            target = RealRunnerTarget()
            target.reset(cfg, {"prompt_len": [2]})
            outcome = target.step("schedule", {"budget": 2, "accepted": [0]})
        except TargetUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001
            raise vllm_tree.TreeError(
                vllm_tree.import_failure(t, exc, f"cannot run vLLM's {runner} model runner")
            ) from exc
        if outcome.observed.get("error"):
            raise vllm_tree.TreeError(f"{t.title} cannot run vLLM's {runner} model runner: {outcome.observed['error']}")
    return f"{t.title}: V1 and V2 model runners run on CPU (Triton interpreter)"

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
  5. CPU shims for construction only: pinned memory requested by V1's ngram_gpu
     buffers is allocated unpinned; the memory profiler around V2's load_model (two
     gc.collect calls, 1 s) is skipped; a gloo world of one process.
  6. The faults the model injects (cfg.faults), at their narrowest point:
     stale-slot-read: right after RequestState.add_request of a flagged request, the
       writes it made to the slot's device state are dropped (its staged writes to
       total_len, num_computed_tokens and all_token_ids, and prefill_len's UVA
       source), so the slot reads as its previous occupant left it;
     over-delivery: `extra` SAMPLED_ID tokens appended to the request's list in the
       runner's ModelRunnerOutput, after the runner decided.
  7. `v2-live` is the V2 runner with one patch: the discard kernel's call in Sampler
     and RejectionSampler gets the slot's total_len where it gets prefill_len.

The runner gets its own VllmConfig (a deep copy of the scheduler's, budget restored,
pp=1): the scheduler's per-step budget must not size the runner's buffers (the
interpreted kernels do not bound-check), and building the V1 runner switches async
scheduling off in the config it is given. A fresh runner is built per case (10-30 ms;
vLLM is imported once per process).

What the runner computes is measured too (`Outcome.observed["runner"]`, per scheduled
request id): the positions it fed (start, length, contiguous), the scheduler's
(num_computed_tokens before the step, num_scheduled_tokens), any placeholder input id
(PLACEHOLDER_ID = -1, what both releases write for unknown tokens), and the input ids
that differ from the scheduler's token at the scheduler's position.
"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
from typing import Any, Mapping

from spec.config import Config
from targets import vllm_env as env
from targets.protocol import Outcome, TargetUnavailable
from targets.vllm_target import VllmTarget, _index, _rid

SAMPLED_ID = env.SAMPLED_ID  # what the stub forward pass predicts everywhere
REJECTED_ID = 13  # a draft the target model does not predict: rejected
PLACEHOLDER_ID = -1  # vLLM's id for a token not known yet (async output, padded drafts)
HIDDEN = 8  # width of the stub's hidden states (never read)

_SETUP = False
_RUNNER_CONFIGS: dict = {}


# ------------------------------------------------------------------ process setup


def _setup() -> None:
    """Once per process: the tree, vLLM's CPU patches, a gloo world of one."""
    global _SETUP
    if _SETUP:
        return
    V = env.load()
    try:
        import vllm.v1.worker.cpu.shm  # noqa: F401  (vLLM's own CPU patches, as cpu_worker imports them)
        from vllm.config import set_current_vllm_config
        from vllm.distributed import parallel_state as ps
    except Exception as exc:  # noqa: BLE001
        raise TargetUnavailable(f"{env.tree().title}: vLLM's CPU worker patches do not import ({exc})") from exc
    if not ps.model_parallel_is_initialized():
        cfg = _runner_config(Config("runner-setup", runner="v1", requests=1))
        handle, path = tempfile.mkstemp(prefix="real-runner-gloo-")
        os.close(handle)
        os.unlink(path)
        with set_current_vllm_config(cfg):
            ps.init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"file://{path}",
                                            local_rank=0, backend="gloo")
            ps.initialize_model_parallel(1, 1)
    del V
    _SETUP = True


def _runner_config(cfg: Config):
    """The runner's own VllmConfig: the scheduler's shape with pp=1 and no clamp, deep
    copied so that neither side's mutations reach the other, the budget restored."""
    shape = env.Shape.of(cfg, clamp=False)
    shape = env.Shape(shape.requests, shape.block_size, shape.long_prefill_threshold,
                      shape.spec_tokens, 1, False, shape.v2)
    if shape not in _RUNNER_CONFIGS:
        config = copy.deepcopy(env.vllm_config(shape))
        config.scheduler_config.max_num_batched_tokens = env.MAX_MODEL_LEN
        config.scheduler_config.async_scheduling = True
        _RUNNER_CONFIGS[shape] = config
    return _RUNNER_CONFIGS[shape]


# ------------------------------------------------------------------ the forward pass


def _stub_model():
    import torch
    import torch.nn as nn

    class StubModel(nn.Module):
        """The forward pass: records what it is fed; predicts SAMPLED_ID everywhere."""

        def __init__(self):
            super().__init__()
            self.fed: list[tuple] = []
            self.vocab = 1000

        def forward(self, input_ids=None, positions=None, intermediate_tensors=None, inputs_embeds=None, **_):
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
        block_sizes=[block_size], max_num_reqs=runner.max_num_reqs,
        max_num_batched_tokens=runner.max_num_tokens,
        max_num_blocks_per_group=[-(-runner.max_model_len // block_size)], device=device,
    )
    runner.kv_cache_config = KVCacheConfig(num_blocks=env.Shape.of(cfg, False).num_blocks,
                                           kv_cache_tensors=[], kv_cache_groups=[])
    runner.attn_groups = []
    runner.cudagraph_manager = ModelCudaGraphManager(config, device, CUDAGraphMode.NONE,
                                                     runner.decode_query_len)
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
    block_size = cfg.block_size
    runner.kv_cache_config = KVCacheConfig(
        num_blocks=env.Shape.of(cfg, False).num_blocks, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32))],
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

    # ---------------------------------------------------------------- reset
    def reset(self, cfg: Config, init: Mapping) -> None:
        super().reset(cfg, init)
        self.runner_config = _runner_config(cfg)
        self.model = _stub_model()
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
        with self._context(), self._faults(args), self._live():
            output = self.runner.execute_model(out)
            if out.total_num_scheduled_tokens > 0:
                batch = self._batch_layout()
                output = self.runner.sample_tokens(None)
            else:
                batch = None
            if hasattr(output, "get_output"):
                output = output.get_output()
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
        observed = {
            "num_scheduled_tokens": dict(out.num_scheduled_tokens),
            "spec": {k: len(v) for k, v in out.scheduled_spec_decode_tokens.items()},
            "runner_returns": {r: len(t) for r, t in returns.items()},
            "model_returns": {r: result.state[("q_sampled", result.state[("queue_len",)] - 1, r)]
                              for r in range(cfg.requests)},
            "runner": self._measure(sent, batch, self.model.fed[fed_before:]),
        }
        self.log.append(observed)
        return observed

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
        return {"num_scheduled_tokens": dict(out.num_scheduled_tokens), "c0": c0, "tokens": tokens,
                "spec": {k: len(v) for k, v in out.scheduled_spec_decode_tokens.items()}}

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

        with _patched(sampler_module, "get_num_sampled_and_rejected", live), \
                _patched(rejection_module, "get_num_sampled_and_rejected", live):
            yield

    # ---------------------------------------------------------------- measuring
    def _batch_layout(self) -> tuple[list[str], list[int]]:
        """Request order and query start offsets of the batch the forward pass ran."""
        if self.cfg.is_v2:
            batch = self.runner.execute_model_state.input_batch
            return list(batch.req_ids), [int(x) for x in batch.query_start_loc_np[: batch.num_reqs + 1]]
        num_reqs = self.runner.input_batch.num_reqs
        return (list(self.runner.input_batch.req_ids[:num_reqs]),
                [int(x) for x in self.runner.query_start_loc.np[: num_reqs + 1]])

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
            }
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


def _tensor(values, dtype):
    import torch

    return torch.tensor(values, dtype=dtype)

"""vLLM's own model runners of the loaded tree on CPU: building them (V2, and V1 where the tree has it)
with the stub forward pass, stepping them, and reading their state."""

from __future__ import annotations

import contextlib

from vllm_contract.adapter import construct as factory
from vllm_contract.adapter import current as env
from vllm_contract.adapter import objects
from vllm_contract.adapter.cpu import NoMemoryProfiler, patched
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TargetUnavailable

SAMPLED_ID = factory.SAMPLED_ID  # what the stub forward pass predicts everywhere
REJECTED_ID = 13  # a draft the target model does not predict: rejected
PLACEHOLDER_ID = -1  # vLLM's id for a token not known yet (async output, padded drafts)
HIDDEN = 8  # width of the stub's hidden states (never read)


def stub_model(records: bool):
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


def build_v2(cfg: Config, config, model):
    import torch
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner
    from vllm.v1.worker.gpu import model_runner as v2_module
    from vllm.v1.worker.gpu.block_table import BlockTables
    from vllm.v1.worker.gpu.cudagraph_utils import ModelCudaGraphManager

    device = torch.device("cpu")
    with patched(v2_module, "init_speculator", _init_speculator(v2_module.init_speculator)):
        runner = CPUModelRunner(config, device)
    with patched(v2_module, "DeviceMemoryProfiler", NoMemoryProfiler), _stub_loader(v2_module, model):
        runner.load_model(model=model)
    # initialize_kv_cache is not run (attention backends): its bookkeeping parts
    block_size = cfg.block_size
    extra = {}
    if objects.has("block-tables-kernel-sizes"):
        # 0.29.0-0.31.0 ([cite:v2-block-tables-kernel-sizes]): the runner passes its
        # kernel_block_sizes; one plain attention group: the block size
        extra["kernel_block_sizes"] = [block_size]
    runner.block_tables = BlockTables(
        block_sizes=[block_size],
        max_num_reqs=runner.max_num_reqs,
        max_num_batched_tokens=runner.max_num_tokens,
        max_num_blocks_per_group=[-(-runner.max_model_len // block_size)],
        device=device,
        **extra,
    )
    runner.kv_cache_config = KVCacheConfig(
        num_blocks=factory.Shape.of(cfg).num_blocks, kv_cache_tensors=[], kv_cache_groups=[]
    )
    runner.attn_groups = []
    # CUDA graphs off; the decode query length as the tree's manager takes it ([cite:v2-cudagraph-query-len])
    if objects.has("cudagraph-query-lens") == "decode_query_lens":
        query = {"decode_query_lens": config.get_decode_cudagraph_query_lens(runner.decode_query_len)}
    else:
        query = {"decode_query_len": runner.decode_query_len}
    runner.cudagraph_manager = ModelCudaGraphManager(config, device, CUDAGraphMode.NONE, **query)
    if runner.speculator is not None:
        steps = runner.num_speculative_steps

        def propose(input_batch, *args, **kwargs):
            """The drafter's proposal: placeholders; the target writes the real drafts."""
            return torch.zeros(input_batch.num_reqs, steps, dtype=torch.int64)

        runner.speculator.propose = propose
    return runner


@contextlib.contextmanager
def _stub_loader(v2_module, model):
    """0.29.0-0.31.0: GPUModelRunner.load_model has no `model` parameter and loads through
    get_model_loader ([cite:v2-load-model-loader]; 0.32.0 gained it, [cite:v2-load-model-takes-model]).
    There the loader hands back the stub."""
    if objects.has("load-model-takes-model"):
        yield
        return

    class StubLoader:
        def load_model(self, *args, **kwargs):
            return model

    with patched(v2_module, "get_model_loader", lambda load_config: StubLoader()):
        yield


def _init_speculator(real):
    """0.29.0-0.31.0 have no V2 n-gram speculator ([cite:v2-ngram-speculator]):
    init_speculator raises NotImplementedError for ngram_gpu ([cite:v2-ngram-not-implemented]). There the runner gets a
    stand-in with what 0.32.0's NgramGPUSpeculator shows the runner: not a
    DraftModelSpeculator, no draft logits, no multimodal inputs, nothing to capture.
    Its propose is replaced below, as the real speculator's is. A tree with its own
    speculator builds it unchanged."""
    if objects.has("v2-ngram-speculator"):
        return real

    def init_speculator(vllm_config, *args, **kwargs):
        try:
            return real(vllm_config, *args, **kwargs)
        except NotImplementedError:
            if vllm_config.speculative_config.method != "ngram_gpu":
                raise
        from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator

        class NgramStandIn(BaseSpeculator):
            supports_mm_inputs = False
            draft_logits = None

            def init_cudagraph_manager(self, cudagraph_mode):
                pass

            def capture(self):
                return None

            def propose(self, *args, **kwargs):
                raise AssertionError("replaced in build_v2")

        return NgramStandIn()

    return init_speculator


def build_v1(cfg: Config, config, model):
    if not objects.has_v1_runner():
        raise TargetUnavailable(
            f"{env.tree().title} has no V1 model runner (removed in 0.34.0): V1 cases run on 0.33.0 or older"
        )
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.spec_decode.ngram_proposer_gpu import NgramProposerGPU
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    zeros = torch.zeros

    def unpinned_zeros(*args, pin_memory=False, **kwargs):
        return zeros(*args, **kwargs)

    with patched(torch, "zeros", unpinned_zeros), patched(NgramProposerGPU, "_dummy_run", lambda self: None):
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
        num_blocks=factory.Shape.of(cfg).num_blocks,
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


# ---------------------------------------------------------------------- stepping a runner


@contextlib.contextmanager
def context(v2: bool, runner_config):
    """What a runner's calls need around them: the runner choice and vLLM's current config."""
    from vllm.config import set_current_vllm_config

    with objects.runner_choice(v2), set_current_vllm_config(runner_config):
        yield


def execute(runner, scheduler_output, v2: bool):
    """One step on the runner: execute_model, then sample_tokens when anything was
    scheduled; the ModelRunnerOutput and the batch the forward pass ran (None when empty)."""
    output = runner.execute_model(scheduler_output)
    batch = None
    if objects.total_scheduled(scheduler_output) > 0:
        batch = batch_layout(runner, v2)
        output = runner.sample_tokens(None)
    if hasattr(output, "get_output"):  # an async output
        output = output.get_output()
    return output, batch


def batch_layout(runner, v2: bool) -> tuple[list[str], list[int]]:
    """Request order and query start offsets of the batch the forward pass ran."""
    if v2:
        batch = runner.execute_model_state.input_batch
        return list(batch.req_ids), [int(x) for x in batch.query_start_loc_np[: batch.num_reqs + 1]]
    num_reqs = runner.input_batch.num_reqs
    return (
        list(runner.input_batch.req_ids[:num_reqs]),
        [int(x) for x in runner.query_start_loc.np[: num_reqs + 1]],
    )


def write_drafts(runner, req_id: str, row: list[int], v2: bool) -> None:
    """The drafter's proposal for a request's step, where the runner reads it: V2 the slot's
    draft_tokens row, V1 the previous batch's row of _draft_token_ids."""
    import torch

    if v2:
        states = runner.req_states
        slot = states.req_id_to_index.get(req_id)
        if slot is not None:
            states.draft_tokens[slot, : len(row)] = torch.tensor(row, dtype=states.draft_tokens.dtype)
        return
    prev = runner.input_batch.prev_req_id_to_index or {}
    drafts = runner._draft_token_ids
    if req_id in prev and drafts is not None:
        drafts[prev[req_id], : len(row)] = torch.tensor(row, dtype=drafts.dtype)


def v2_slot(runner, req_id: str) -> int | None:
    return runner.req_states.req_id_to_index.get(req_id)


def v2_prefill_len(runner, req_id: str) -> int | None:
    """The slot's prefill_len as the discard kernel reads it ([cite:v2-discard-kernel])."""
    slot = v2_slot(runner, req_id)
    return int(runner.req_states.prefill_len.gpu[slot]) if slot is not None else None


def v2_slots(runner) -> dict:
    """Every slot's prefill_len, GPU computed count and total_len, the slot of each request
    present, and the free stack ([cite:v2-add-writes-slot])."""
    states = runner.req_states
    return {
        "prefill_len": states.prefill_len.gpu.tolist(),
        "num_computed": states.num_computed_tokens.gpu.tolist(),
        "total_len": states.total_len.gpu.tolist(),
        "slot": dict(states.req_id_to_index),
        "free": list(states.free_indices),
    }


def v1_request_state(runner, req_id: str) -> tuple[int, int] | None:
    """CachedRequestState.num_tokens and prev_num_draft_len of a request in the V1 batch."""
    if req_id not in runner.input_batch.req_id_to_index:
        return None
    state = runner.requests.get(req_id)
    return (state.num_tokens, state.prev_num_draft_len) if state is not None else (None, None)


@contextlib.contextmanager
def losing_slot_writes(runner, loses):
    """The stale-slot-read fault: for a request `loses(req_id)` flags, the device-side writes
    RequestState.add_request stages (total_len, the GPU computed count, the token ids) are
    dropped, and its host prefill_len is put back as it was, so the slot reads as its
    previous occupant left it. Done through StagedWriteTensor's staging methods, whatever
    the tree keeps behind them ([cite:v2-add-writes-slot])."""
    states = runner.req_states
    real_add = states.add_request
    staged = (states.total_len, states.num_computed_tokens, states.all_token_ids)

    def ignore(*args, **kwargs):
        return None

    def add_request(req_id, *args, **kwargs):
        if not loses(req_id):
            return real_add(req_id, *args, **kwargs)
        slot = states.free_indices[-1] if states.free_indices else None
        prefill_before = int(states.prefill_len.np[slot]) if slot is not None else None
        for tensor in staged:
            tensor.stage_write = ignore
            tensor.stage_write_elem = ignore
        try:
            real_add(req_id, *args, **kwargs)
        finally:
            for tensor in staged:
                del tensor.stage_write, tensor.stage_write_elem
        if slot is not None:
            states.prefill_len.np[slot] = prefill_before

    states.add_request = add_request
    try:
        yield
    finally:
        del states.add_request


@contextlib.contextmanager
def live_kernel(runner):
    """v2-live: the discard kernel's call gets the slot's total_len where it gets
    prefill_len ([cite:v2-discard-kernel]); the same kernel otherwise."""
    from vllm.v1.worker.gpu.sample import sampler as sampler_module
    from vllm.v1.worker.gpu.spec_decode import rejection_sampler as rejection_module

    states = runner.req_states
    real = sampler_module.get_num_sampled_and_rejected

    def live(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len):
        assert prefill_len is states.prefill_len.gpu
        return real(num_sampled, seq_lens, cu_num_logits, idx_mapping, states.total_len.gpu)

    with (
        patched(sampler_module, "get_num_sampled_and_rejected", live),
        patched(rejection_module, "get_num_sampled_and_rejected", live),
    ):
        yield


def request_tokens(request) -> list[int]:
    """Every token id of a scheduler-side request so far."""
    return list(request.all_token_ids)

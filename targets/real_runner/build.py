"""Building vLLM's own V1 and V2 model runners of the loaded tree on CPU, with the stub forward pass."""

from __future__ import annotations

from spec.config import Config
from spec.errors import TargetUnavailable
from targets import vllm_env as env
from targets import vllm_factory as factory
from targets.real_runner.cpu import NoMemoryProfiler, patched

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
    runner = CPUModelRunner(config, device)
    with patched(v2_module, "DeviceMemoryProfiler", NoMemoryProfiler):
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
        num_blocks=factory.Shape.of(cfg, clamp=False).num_blocks, kv_cache_tensors=[], kv_cache_groups=[]
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


def build_v1(cfg: Config, config, model):
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
        num_blocks=factory.Shape.of(cfg, clamp=False).num_blocks,
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

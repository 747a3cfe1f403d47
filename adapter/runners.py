"""Building vLLM's own V1 and V2 model runners of the loaded tree on CPU, with the stub forward pass."""

from __future__ import annotations

import contextlib
import inspect

from spec.config import Config
from spec.errors import TargetUnavailable
from adapter import current as env
from adapter import construct as factory
from adapter.cpu import NoMemoryProfiler, patched

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
    if "kernel_block_sizes" in inspect.signature(BlockTables).parameters:
        # 0.29.0-0.31.0 (block_table.py:25): the runner passes its kernel_block_sizes
        # (model_runner.py:672 on 0.31.0); one plain attention group: the block size
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


@contextlib.contextmanager
def _stub_loader(v2_module, model):
    """0.29.0-0.31.0: GPUModelRunner.load_model has no `model` parameter (0.31.0
    gpu/model_runner.py:367; 0.32.0 gained it at 378-399) and loads through
    get_model_loader (0.31.0 :374,378-381). There the loader hands back the stub."""
    if "model" in inspect.signature(v2_module.GPUModelRunner.load_model).parameters:
        yield
        return

    class StubLoader:
        def load_model(self, *args, **kwargs):
            return model

    with patched(v2_module, "get_model_loader", lambda load_config: StubLoader()):
        yield


def _init_speculator(real):
    """0.29.0-0.31.0 have no V2 n-gram speculator: init_speculator raises
    NotImplementedError for ngram_gpu (0.31.0 spec_decode/__init__.py:69-70; 0.29.0,
    0.30.0: 57-58). There the runner gets a stand-in with what 0.32.0's
    NgramGPUSpeculator shows the runner (spec_decode/ngram/speculator.py:151-213): not a
    DraftModelSpeculator, no draft logits, no multimodal inputs, nothing to capture.
    Its propose is replaced below, as the real speculator's is."""

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

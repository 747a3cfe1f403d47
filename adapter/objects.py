"""Reading and building vLLM's objects, in whichever form the imported tree has them.

Every function here reads or builds one kind of vLLM object for the targets and the
monitor; where releases differ it asks the tree's probe (adapter/internals.py) which
form the imported vLLM has, never which release it is. vLLM is imported lazily, from
whatever `vllm` resolves to: the selected tree's overlay in the harness
(adapter/current.py), vLLM itself inside a running engine (the monitor).
"""

from __future__ import annotations

import linecache
import os
import traceback
from contextlib import contextmanager
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from typing import Any, Iterable

from vllm_contract.adapter import internals
from vllm_contract.spec.properties import BY_STATEMENT, statement_key
from vllm_contract.spec.vocabulary import Status

V2_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"


@lru_cache(maxsize=1)
def _package() -> Path:
    import vllm

    return Path(vllm.__file__).resolve().parent


def features(uses: tuple[str, ...] = internals.USES) -> internals.Probe:
    """The probe of the imported vLLM (read once per process and use)."""
    return _probe(_package(), uses)


@lru_cache(maxsize=8)
def _probe(package: Path, uses: tuple[str, ...]) -> internals.Probe:
    return internals.probe(package, uses)


def has(key: str) -> Any:
    """The imported vLLM's form of a variant (internals.VARIANTS)."""
    return features().has(key)


# ---------------------------------------------------------------------- the runner choice


def has_v1_runner() -> bool:
    return bool(has("v1-runner"))


@contextmanager
def runner_choice(v2: bool):
    """VLLM_USE_V2_MODEL_RUNNER as vLLM reads it while building a configuration and a
    scheduler ([cite:runner-choice-property]), then as it was. A tree without the V1
    runner refuses any value but 1 ([cite:v1-runner-removed]) and has no choice to make:
    there the variable is left unset (a plugin's runner of the V1 family then meets the
    only scheduler there is; vLLM's own V1 runner cannot be built, adapter/runners.py)."""
    if not has_v1_runner():
        saved = os.environ.pop(V2_VARIABLE, None)
        try:
            yield
        finally:
            if saved is not None:
                os.environ[V2_VARIABLE] = saved
        return
    saved = os.environ.get(V2_VARIABLE)
    os.environ[V2_VARIABLE] = "1" if v2 else "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(V2_VARIABLE, None)
        else:
            os.environ[V2_VARIABLE] = saved


def uses_v2(owner) -> bool:
    """Whether a VllmConfig or a scheduler runs the V2 model runner: its own answer where the
    tree has the choice, always where V2 is the only runner."""
    if not has_v1_runner():
        return True
    return bool(owner.use_v2_model_runner)


def v2_accepts_ngram_gpu():
    """0.29.0-0.31.0: VllmConfig's list of what V2 does not support names ngram_gpu (no V2
    n-gram speculator yet), a context that drops that one item while a configuration is
    built (adapter/construct.py says why this runs the same code); a no-op elsewhere."""
    return _without_ngram_item() if has("v2-unsupported-list") else _nothing()


@contextmanager
def _nothing():
    yield


NGRAM_GPU_REFUSAL = "ngram_gpu"  # in the V2 refusal's item: 0.30.0/0.31.0 "speculative method 'ngram_gpu'",
# 0.29.0 "ngram/ngram_gpu speculative decoding"


@contextmanager
def _without_ngram_item():
    from vllm.config import VllmConfig

    real = VllmConfig._get_v2_model_runner_unsupported_features

    def unsupported(self):
        return [item for item in real(self) if NGRAM_GPU_REFUSAL not in item]

    VllmConfig._get_v2_model_runner_unsupported_features = unsupported
    try:
        yield
    finally:
        VllmConfig._get_v2_model_runner_unsupported_features = real


# ---------------------------------------------------------------------- a step's output


def runner_output(req_ids: list[str], sampled: list[list[int]], failed_blocks: Iterable[int] | None = None):
    """The ModelRunnerOutput a runner hands back for a step: one row of tokens per id, and a
    KV-load failure's blocks (KVConnectorOutput.invalid_block_ids, [cite:kv-load-failure-detected]).
    Where update_from_output finds a row through req_id_to_index ([cite:output-req-id-to-index]),
    the output carries it; from 0.34.0 a row is found by its position ([cite:output-indexed-by-position])."""
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

    kv = KVConnectorOutput(invalid_block_ids=set(failed_blocks)) if failed_blocks else None
    extra = {}
    if has("output-index") == "req_id_to_index":
        extra["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
    return ModelRunnerOutput(req_ids=list(req_ids), sampled_token_ids=sampled, kv_connector_output=kv, **extra)


def row_index(output) -> dict[str, int]:
    """Request id -> its row in a ModelRunnerOutput, as update_from_output reads it."""
    if has("output-index") == "req_id_to_index":
        return output.req_id_to_index
    return {rid: i for i, rid in enumerate(output.req_ids)}


def row_indexer():
    """A function giving request id -> row of a ModelRunnerOutput, for this tree (the
    monitor calls it every delivery: the form is decided once)."""
    if has("output-index") == "req_id_to_index":
        return attrgetter("req_id_to_index")
    return lambda output: {rid: i for i, rid in enumerate(output.req_ids)}


def rows(output) -> dict[str, list[int]]:
    """Request id -> the tokens its row carries."""
    sampled = output.sampled_token_ids
    return {rid: list(sampled[i]) if sampled else [] for rid, i in row_index(output).items()}


def output_req_ids(output) -> list[str]:
    return list(output.req_ids)


def output_rows(output) -> list:
    return output.sampled_token_ids


def set_output_rows(output, rows_) -> None:
    output.sampled_token_ids = rows_


def failed_blocks(output) -> tuple[set, bool]:
    """The blocks whose load failed in a step's output, and whether a receive failed
    (failed_recving, which the model leaves out)."""
    kv = getattr(output, "kv_connector_output", None)
    if kv is None:
        return set(), False
    return set(getattr(kv, "invalid_block_ids", None) or ()), bool(getattr(kv, "failed_recving", None))


# ---------------------------------------------------------------------- a step's SchedulerOutput


def scheduled(so) -> dict[str, int]:
    """Request id -> the tokens a step schedules for it, in the step's order."""
    return so.num_scheduled_tokens


def scheduled_drafts(so) -> dict[str, list]:
    return so.scheduled_spec_decode_tokens


def total_scheduled(so) -> int:
    return so.total_num_scheduled_tokens


def admitted(so) -> set[str]:
    """The requests a step admits: new ones and those resumed from preemption, which ride in
    CachedRequestData.resumed_req_ids where the tree keeps them apart
    ([cite:cached-resumed-req-ids]), and are new ones from 0.34.0 ([cite:resumed-sent-as-new])."""
    ids = {d.req_id for d in so.scheduled_new_reqs}
    if has("resumed") == "cached-resumed-ids":
        ids |= set(so.scheduled_cached_reqs.resumed_req_ids)
    return ids


def computed_before(so) -> dict[str, int]:
    """Request id -> its num_computed_tokens when the step was scheduled (new and cached)."""
    out = {d.req_id: d.num_computed_tokens for d in so.scheduled_new_reqs}
    cached = so.scheduled_cached_reqs
    out.update(zip(cached.req_ids, cached.num_computed_tokens))
    return out


# ---------------------------------------------------------------------- the scheduler


def add_request(scheduler, request) -> None:
    """A new request, or a streaming session's next input (same id)."""
    scheduler.add_request(request)


def schedule(scheduler):
    """One step: the SchedulerOutput."""
    return scheduler.schedule()


def deliver(scheduler, scheduler_output, runner_output):
    """A step's output back to the scheduler, as EngineCore hands it over."""
    return scheduler.update_from_output(scheduler_output, runner_output)


# how reset_prefix_cache(reset_running_requests=True) fails when a block is still held
# after every running request is preempted ([cite:reset-raises-when-blocks-held])
RESET_FAILED = "Failed to reset KV cache even when all the running requests are preempted"


def reset_prefix_cache(scheduler) -> str | None:
    """reset_prefix_cache as the engine's utility call makes it, running requests preempted:
    None when it succeeds, the failure when vLLM raises because a block is still held (the
    preemptions stand; EngineCore answers the caller and runs on). Any other error goes on."""
    try:
        scheduler.reset_prefix_cache(reset_running_requests=True)
    except RuntimeError as exc:
        if not str(exc).startswith(RESET_FAILED):
            raise
        return f"{type(exc).__name__}: {exc}"
    return None


def holds_blocks(scheduler, req_id: str) -> bool:
    """Whether a request holds KV blocks now."""
    return any(scheduler.kv_cache_manager.get_block_ids(req_id))


def abort(scheduler, req_id: str) -> list:
    """finish_requests for one id as an abort: the requests it finished."""
    return scheduler.finish_requests(req_id, aborted_status())


def has_requests(scheduler) -> bool:
    """What EngineCore's loop asks before a step: unfinished requests, or finished ids not yet shipped."""
    return bool(scheduler.has_requests())


def output_fields() -> list[str]:
    """The fields of SchedulerOutput in the imported tree (what a patch adds there)."""
    from vllm.v1.core.sched.output import SchedulerOutput

    return sorted(SchedulerOutput.__dataclass_fields__)


def forget_previous_step(scheduler, req_id: str) -> None:
    """What vLLM's own preemption inside schedule() leaves of a victim in the last step's ids
    (for the V1 runner, [cite:prev-step-scheduled-ids]): nothing. Trees without that set
    (0.34.0) keep nothing to forget."""
    if has("previous-step-ids"):
        scheduler.prev_step_scheduled_req_ids.discard(req_id)


def preempt(scheduler, request, timestamp: float, drop: bool) -> None:
    """The two statements schedule() runs on an allocation failure
    ([cite:preempt-frees-blocks], the victim out of `running`, then _preempt_request)."""
    scheduler.running.remove(request)
    scheduler._preempt_request(request, timestamp, drop_stale_output=drop)


def waiting_front(scheduler):
    """The waiting queue the waiting loop serves first: kv_holding_waiting (0.31.0 on,
    [cite:enqueue-waiting-kv-holding]) or skipped_waiting (0.29.0, 0.30.0,
    [cite:enqueue-waiting-skipped])."""
    return getattr(scheduler, has("waiting-front"))


def orders(scheduler) -> dict[str, list[str]]:
    """Scheduler.running in order, and the waiting queues in the order the loop drains them."""
    return {
        "running": [q.request_id for q in scheduler.running],
        "waiting": [q.request_id for q in waiting_front(scheduler)] + [q.request_id for q in scheduler.waiting],
    }


def set_budget(scheduler, budget: int) -> None:
    """The step's token budget: schedule() reads both ([cite:schedule-begins])."""
    scheduler.max_num_scheduled_tokens = budget
    scheduler.scheduler_config.max_num_batched_tokens = budget


def budget(scheduler) -> int:
    return int(scheduler.max_num_scheduled_tokens)


def block_ids(scheduler, req_id: str) -> list[int]:
    """The KV blocks of a request (one KV cache group)."""
    return list(scheduler.kv_cache_manager.get_block_ids(req_id)[0])


def pipeline_depth(scheduler) -> int:
    """Steps in flight under async scheduling: pp + 1 ([cite:max-concurrent-batches])."""
    return scheduler.parallel_config.pipeline_parallel_size + 1


def shape(scheduler) -> dict:
    """What the configuration a scheduler was built with says of the model's sizes."""
    return {
        "runner": "v2" if uses_v2(scheduler) else "v1",
        "pp": scheduler.parallel_config.pipeline_parallel_size,
        "spec_tokens": int(getattr(scheduler, "num_spec_tokens", 0) or 0),
        "prefix_caching": bool(scheduler.cache_config.enable_prefix_caching),
        "long_prefill_threshold": int(scheduler.scheduler_config.long_prefill_token_threshold or 0),
        "block_size": int(scheduler.block_size),
        "max_model_len": int(scheduler.max_model_len),
    }


# ---------------------------------------------------------------------- requests

# the spec's per-request variables a Request shows (spec/vocabulary.py names -> reader)
REQUEST_VARS = {
    "num_prompt_tokens": attrgetter("num_prompt_tokens"),
    "num_tokens": attrgetter("num_tokens"),
    "num_computed_tokens": attrgetter("num_computed_tokens"),
    "num_output_placeholders": attrgetter("num_output_placeholders"),
    "num_in_flight_tokens": attrgetter("num_in_flight_tokens"),
    "num_stale_output_tokens": attrgetter("num_stale_output_tokens"),
    "drop_stale_output": lambda q: bool(q.drop_stale_output),
    "is_prefill_chunk": lambda q: bool(q.is_prefill_chunk),
    "num_spec_tokens": lambda q: len(q.spec_token_ids),
}
placeholders = attrgetter("num_output_placeholders")
computed = attrgetter("num_computed_tokens")
is_prefill_chunk = attrgetter("is_prefill_chunk")
num_tokens = attrgetter("num_tokens")
stale = attrgetter("num_stale_output_tokens")
status = attrgetter("status")
req_id = attrgetter("request_id")


def is_resumable(request) -> bool:
    return bool(getattr(request, "resumable", False))


def requests(scheduler) -> dict:
    """The scheduler's requests by id (the live dict: read it, never change it)."""
    return scheduler.requests


def running(scheduler) -> list:
    return scheduler.running


def finished_ids(scheduler) -> set[str]:
    """The ids the scheduler finished since it last shipped them."""
    return scheduler.finished_req_ids


def vllm_version() -> str:
    """The version the imported vLLM declares."""
    import vllm

    return vllm.__version__


def request_counters(request) -> dict[str, Any]:
    return {name: read(request) for name, read in REQUEST_VARS.items()}


def session_view(request) -> dict[str, Any]:
    """A streaming session's variables: resumable, a queued update and its prompt length."""
    queue = request.streaming_queue or ()
    first = queue[0] if queue else None
    return {
        "resumable": bool(request.resumable),
        "pending_update": len(queue) > 0,
        "pending_update_len": len(first.prompt_token_ids or ()) if first is not None else 0,
    }


def decode_eligible_step(request) -> int:
    """The step from which a request may be scheduled for decode again (pp > 1,
    [cite:next-decode-eligible])."""
    return request.next_decode_eligible_step


def current_step(scheduler) -> int:
    return scheduler.current_step


def prompt_tokens(request) -> list[int]:
    return list(request.prompt_token_ids or ())


def prompt_length(request) -> int:
    return len(request.prompt_token_ids or ())


def max_tokens(request) -> int | None:
    params = getattr(request, "sampling_params", None)
    return getattr(params, "max_tokens", None)


def status_code(status, outside: int | None = None) -> int:
    """vLLM's RequestStatus -> spec.vocabulary.Status; a status the contract leaves out
    (waiting for remote KV, for a grammar) is `outside`, or a ValueError when None."""
    from vllm.v1.request import RequestStatus

    if status == RequestStatus.WAITING:
        return Status.WAITING
    if status == RequestStatus.RUNNING:
        return Status.RUNNING
    if status == RequestStatus.PREEMPTED:
        return Status.PREEMPTED
    if status == RequestStatus.WAITING_FOR_STREAMING_REQ:
        return Status.WAITING_FOR_STREAMING_REQ
    if RequestStatus.is_finished(status):
        return Status.FINISHED
    if outside is None:
        raise ValueError(f"request status {status!r} is outside the contract")
    return outside


def aborted_status():
    from vllm.v1.request import RequestStatus

    return RequestStatus.FINISHED_ABORTED


# ---------------------------------------------------------------------- what a tree must have


def missing_members(scheduler, request) -> list[str]:
    """The internals the scheduler targets read that these live objects lack, one phrase
    each: the source probe's check, made again on what the tree built."""
    owners = {"Scheduler": scheduler, "AsyncScheduler": scheduler, "Request": request}
    out = []
    for need in internals.NEEDED:
        obj = owners.get(need.owner)
        if obj is None or internals.SCHEDULER not in need.uses:
            continue
        if not hasattr(obj, need.name):
            out.append(f"this tree's {need.owner} has no {need.name}, which the project reads ({need.why})")
    return out


# ---------------------------------------------------------------------- vLLM's asserts

SCHEDULER_PACKAGE = "/vllm/v1/core/sched/"


# the V2 runner's asserts the contract names ([cite:v2-logits-cover-assert])
RUNNER_PACKAGE = "/vllm/v1/worker/gpu/"


def assert_site(exc: BaseException) -> tuple[str, int, str] | None:
    """(file name, line, statement) of the innermost frame of vLLM's scheduler package or
    of its V2 runner's."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename.replace("\\", "/")
        if SCHEDULER_PACKAGE in path or RUNNER_PACKAGE in path:
            text = frame.line or linecache.getline(frame.filename, frame.lineno)
            return path.rsplit("/", 1)[-1], frame.lineno, text.strip()
    return None


def assert_name(site: tuple[str, int, str] | None) -> str | None:
    """The spec's name for the assert at a site, recognised by its statement, wherever the
    line moved between releases (spec/properties.py ASSERTS)."""
    if site is None:
        return None
    return BY_STATEMENT.get(statement_key(site[2]))


def request_in(exc: BaseException) -> str | None:
    """The request vLLM's innermost scheduler frame was handling when an assert fired (its
    local `request`), read from the traceback."""
    tb, found = exc.__traceback__, None
    while tb is not None:
        if SCHEDULER_PACKAGE in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            request = tb.tb_frame.f_locals.get("request")
            found = getattr(request, "request_id", None) or found
        tb = tb.tb_next
    return found


def runner_site(exc: BaseException) -> str:
    """file:line `statement` of the innermost frame in vLLM's worker package."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename.replace("\\", "/")
        if "/vllm/v1/worker/" in path or "/vllm/v1/spec_decode/" in path or "/vllm/v1/sample/" in path:
            text = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
            return f"{path.split('/vllm/', 1)[1]}:{frame.lineno} `{text}`"
    return "outside vLLM's worker"


# ---------------------------------------------------------------------- what code runs


# the scheduler methods whose code the model covers: where each comes from says whether a
# plugin or a patch replaced vLLM's (the project's own hook classes call vLLM's through super)
SCHEDULER_METHODS = (
    "schedule",
    "update_from_output",
    "_update_after_schedule",
    "_update_request_with_output",
    "_preempt_request",
    "add_request",
    "finish_requests",
    "has_requests",
)
_OURS = ("vllm_contract.",)  # the hook, clamp, guard and monitor classes (they call vLLM's own code)
PLUGIN_GROUPS = ("vllm.platform_plugins", "vllm.general_plugins")


def foreign_methods(scheduler) -> dict[str, str]:
    """Scheduler methods the running class takes from a file outside the imported vLLM
    package (a plugin's or a patch's monkeypatch, a subclass): method -> that file."""
    package = str(_package())
    out = {}
    for name in SCHEDULER_METHODS:
        for klass in type(scheduler).__mro__:
            if name not in vars(klass) or klass.__module__.startswith(_OURS):
                continue
            code = getattr(vars(klass)[name], "__code__", None)
            where = str(Path(code.co_filename).resolve()) if code is not None else repr(vars(klass)[name])
            if not where.startswith(package):
                out[name] = where
            break
    return out


def plugins() -> list[str]:
    """The plugins vLLM loads from outside its own package (entry points of its plugin
    groups): "group: name = module:function"."""
    from importlib.metadata import entry_points

    found = []
    for group in PLUGIN_GROUPS:
        for entry in entry_points(group=group):
            if not entry.value.startswith("vllm."):
                found.append(f"{group}: {entry.name} = {entry.value}")
    return sorted(found)


def code_record(scheduler) -> dict:
    """What code the scheduler runs: vLLM's version, the hashes of the files the model
    covers (adapter/released.py), plugins vLLM can load, scheduler methods from elsewhere."""
    from vllm_contract.adapter import released

    return {
        "version": vllm_version(),
        "files": released.fingerprint(_package()),
        "plugins": plugins(),
        "foreign_methods": foreign_methods(scheduler),
    }


def in_a_queue(scheduler, request) -> bool:
    """Scheduler.running or a waiting queue holds the request (what schedule() visits)."""
    if any(q is request for q in scheduler.running):
        return True
    return any(q is request for q in waiting_front(scheduler)) or any(q is request for q in scheduler.waiting)


def in_flight(request) -> int:
    """The request's tokens in flight (num_in_flight_tokens)."""
    return int(request.num_in_flight_tokens)


def owed(request) -> int:
    """What the running loop would schedule before its caps: num_tokens + drafts +
    placeholders - computed ([cite:running-zero-skip])."""
    return (
        request.num_tokens + len(request.spec_token_ids) + request.num_output_placeholders - request.num_computed_tokens
    )

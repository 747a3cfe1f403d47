"""What this project reads of vLLM, and which form a tree has of each: read from the tree's source.

Two tables. `NEEDED` lists every internal the targets and the monitor read whose form
is the same in every supported release (a Request counter, a scheduler method): a tree
without one cannot be driven, and `probe` names it. `VARIANTS` lists every internal whose
form differs between releases, each form with how to recognise it and the citation of
vLLM's lines (spec/citations.toml): the rest of the adapter asks `Probe.has(feature)`,
never which release it runs. A tree with neither known form of a variant is named too.

Everything here reads source text (ast), nothing imports vLLM: `make test VLLM=TREE`
and `review` run it before anything slow (it takes a fraction of a second), and the
monitor runs it when vLLM builds its scheduler.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

# what reads an internal: a run asks only for what it will read
SCHEDULER = "scheduler"  # the vllm targets and review's observer: vLLM's scheduler, driven
MONITOR = "monitor"  # the contract monitor inside vLLM's own process
RUNNER = "runner"  # the runner targets: vLLM's own V2 model runner, stepped on CPU
USES = (SCHEDULER, MONITOR, RUNNER)


@dataclass(frozen=True)
class Needed:
    """An internal every supported release has in one form."""

    file: str  # under vllm/
    owner: str  # the class that has it
    name: str  # attribute, field or method
    why: str  # what the project reads it for
    uses: tuple[str, ...] = (SCHEDULER, MONITOR)


@dataclass(frozen=True)
class Form:
    """One form of a variant: the value the adapter acts on, and how to recognise it: a
    member of a class, a parameter of one of its methods, a file that exists or is gone,
    or a file that holds a statement."""

    value: object
    cite: str  # spec/citations.toml id(s)
    file: str
    owner: str | None = None  # a class; None: the file itself
    name: str | None = None  # a member of owner (None: the class exists)
    param_of: str | None = None  # `name` is a parameter of this method of `owner`
    contains: str | None = None  # the file holds this text
    absent: bool = False  # the file is not in the tree


@dataclass(frozen=True)
class Variant:
    key: str
    question: str  # what the project needs to know
    forms: tuple[Form, ...]  # the first form found wins; none found is a problem
    uses: tuple[str, ...] = (SCHEDULER, MONITOR)


SCHED = "v1/core/sched/scheduler.py"
ASYNC = "v1/core/sched/async_scheduler.py"
SCHED_OUTPUT = "v1/core/sched/output.py"
REQUEST = "v1/request.py"
RUNNER_OUTPUT = "v1/outputs.py"
KV_MANAGER = "v1/core/kv_cache_manager.py"
CONFIG = "config/vllm.py"
V2_RUNNER = "v1/worker/gpu/model_runner.py"
V2_STATES = "v1/worker/gpu/states.py"
V2_BUFFERS = "v1/worker/gpu/buffer_utils.py"
BOTH = (SCHEDULER, MONITOR)
ALL = (SCHEDULER, MONITOR, RUNNER)

NEEDED: tuple[Needed, ...] = (
    # the scheduler: driven by the targets, hooked by the monitor
    Needed(SCHED, "Scheduler", "schedule", "to schedule a step"),
    Needed(SCHED, "Scheduler", "update_from_output", "to deliver a step's output"),
    Needed(SCHED, "Scheduler", "add_request", "to add a request and a streaming update"),
    Needed(SCHED, "Scheduler", "finish_requests", "to abort a request"),
    Needed(SCHED, "Scheduler", "reset_prefix_cache", "for reset_prefix_cache"),
    Needed(SCHED, "Scheduler", "_preempt_request", "to preempt a victim as schedule() does on an allocation failure"),
    Needed(
        SCHED,
        "Scheduler",
        "_update_request_with_output",
        "where the seed's clamp cuts a delivery and Continue Decode's patch wraps one",
        (SCHEDULER,),
    ),
    Needed(SCHED, "Scheduler", "has_requests", "to compare what the engine loop decides with", (SCHEDULER,)),
    Needed(SCHED, "Scheduler", "running", "the running queue's order"),
    Needed(SCHED, "Scheduler", "waiting", "the waiting queue's order"),
    Needed(SCHED, "Scheduler", "requests", "the requests by id"),
    Needed(SCHED, "Scheduler", "finished_req_ids", "who stopped in a delivery", (MONITOR,)),
    Needed(SCHED, "Scheduler", "kv_cache_manager", "to name the blocks a KV_MANAGER-load failure reports"),
    Needed(SCHED, "Scheduler", "max_num_scheduled_tokens", "a step's token budget"),
    Needed(SCHED, "Scheduler", "current_step", "the pipeline's decode cadence (pp > 1)", (SCHEDULER,)),
    Needed(SCHED, "Scheduler", "num_lookahead_tokens", "what Continue Decode's patched __init__ sets", (SCHEDULER,)),
    Needed(ASYNC, "AsyncScheduler", "_update_after_schedule", "where a step reserves (the monitor's hook)"),
    Needed(KV_MANAGER, "KVCacheManager", "get_block_ids", "the blocks of a request"),
    # a request's counters: the spec's variables
    Needed(REQUEST, "Request", "status", "the request's status"),
    Needed(REQUEST, "Request", "num_prompt_tokens", "L, the prompt length"),
    Needed(REQUEST, "Request", "num_tokens", "T, the tokens so far"),
    Needed(REQUEST, "Request", "num_computed_tokens", "c, the computed tokens"),
    Needed(REQUEST, "Request", "num_output_placeholders", "P, the placeholders reserved"),
    Needed(REQUEST, "Request", "num_in_flight_tokens", "F, the tokens in flight"),
    Needed(REQUEST, "Request", "num_stale_output_tokens", "S, the stale output"),
    Needed(REQUEST, "Request", "drop_stale_output", "D, whether stale output is dropped"),
    Needed(REQUEST, "Request", "is_prefill_chunk", "X, whether the last step was a prefill chunk"),
    Needed(REQUEST, "Request", "spec_token_ids", "the draft tokens"),
    Needed(REQUEST, "Request", "streaming_queue", "a streaming session's queued update"),
    Needed(REQUEST, "Request", "resumable", "whether the request is a streaming session"),
    Needed(REQUEST, "Request", "next_decode_eligible_step", "the pipeline's decode cadence (pp > 1)", (SCHEDULER,)),
    # what a step carries to the runner and back
    Needed(SCHED_OUTPUT, "SchedulerOutput", "num_scheduled_tokens", "each request's tokens in a step"),
    Needed(SCHED_OUTPUT, "SchedulerOutput", "scheduled_spec_decode_tokens", "each request's drafts in a step"),
    Needed(SCHED_OUTPUT, "SchedulerOutput", "scheduled_new_reqs", "the admissions of a step"),
    Needed(SCHED_OUTPUT, "SchedulerOutput", "scheduled_cached_reqs", "the running requests of a step", ALL),
    Needed(RUNNER_OUTPUT, "ModelRunnerOutput", "req_ids", "the rows of a step's output", ALL),
    Needed(RUNNER_OUTPUT, "ModelRunnerOutput", "sampled_token_ids", "the tokens of each row", ALL),
    Needed(RUNNER_OUTPUT, "ModelRunnerOutput", "kv_connector_output", "a KV_MANAGER-load failure's blocks"),
    Needed(RUNNER_OUTPUT, "KVConnectorOutput", "invalid_block_ids", "the blocks whose load failed"),
    # vLLM's own V2_RUNNER model runner, stepped on CPU
    Needed(V2_RUNNER, "GPUModelRunner", "execute_model", "to run a step", (RUNNER,)),
    Needed(V2_RUNNER, "GPUModelRunner", "sample_tokens", "to sample a step", (RUNNER,)),
    Needed(V2_RUNNER, "GPUModelRunner", "req_states", "the slots' state", (RUNNER,)),
    Needed(V2_RUNNER, "GPUModelRunner", "execute_model_state", "the batch a step ran", (RUNNER,)),
    Needed(V2_STATES, "RequestState", "req_id_to_index", "a request's slot", (RUNNER,)),
    Needed(V2_STATES, "RequestState", "prefill_len", "a slot's prefill_len (the discard rule's snapshot)", (RUNNER,)),
    Needed(V2_STATES, "RequestState", "total_len", "a slot's token count", (RUNNER,)),
    Needed(V2_STATES, "RequestState", "num_computed_tokens", "a slot's GPU computed count", (RUNNER,)),
    Needed(V2_STATES, "RequestState", "draft_tokens", "where the drafter's proposal is read", (RUNNER,)),
    Needed(V2_STATES, "RequestState", "free_indices", "the free slots", (RUNNER,)),
    Needed(V2_STATES, "RequestState", "add_request", "where a slot is written (the stale-slot fault)", (RUNNER,)),
    Needed(V2_BUFFERS, "StagedWriteTensor", "stage_write", "a slot write the stale-slot fault drops", (RUNNER,)),
    Needed(V2_BUFFERS, "StagedWriteTensor", "stage_write_elem", "a slot write the stale-slot fault drops", (RUNNER,)),
)

V1_FILE = "v1/worker/gpu_model_runner.py"  # vLLM's V1 GPUModelRunner, gone in 0.34.0
CUDAGRAPH = "v1/worker/gpu/cudagraph_utils.py"
BLOCKS = "v1/worker/gpu/block_table.py"

VARIANTS: tuple[Variant, ...] = (
    Variant(
        "v1-runner",
        "does the tree ship the V1 model runner, and with it the choice of runner?",
        (
            Form(True, "v1-discard-mask runner-choice-property", V1_FILE),
            Form(False, "v1-runner-removed", V1_FILE, absent=True),
        ),
        ALL,
    ),
    Variant(
        "output-index",
        "how does update_from_output find a request's row of the runner's output?",
        (
            Form("req_id_to_index", "output-req-id-to-index", RUNNER_OUTPUT, "ModelRunnerOutput", "req_id_to_index"),
            Form("position", "output-indexed-by-position", SCHED, contains="enumerate(model_runner_output.req_ids)"),
        ),
        ALL,
    ),
    Variant(
        "resumed",
        "where does a step carry the requests it resumed from preemption?",
        (
            Form("cached-resumed-ids", "cached-resumed-req-ids", SCHED_OUTPUT, "CachedRequestData", "resumed_req_ids"),
            Form("new-reqs", "resumed-sent-as-new", V1_FILE, absent=True),
        ),
    ),
    Variant(
        "previous-step-ids",
        "does the scheduler keep the last step's ids for the V1 runner?",
        (
            Form(True, "prev-step-scheduled-ids", SCHED, "Scheduler", "prev_step_scheduled_req_ids"),
            Form(False, "resumed-sent-as-new", V1_FILE, absent=True),
        ),
        (SCHEDULER, RUNNER),
    ),
    Variant(
        "waiting-front",
        "which waiting queue does the waiting loop serve first?",
        (
            Form("kv_holding_waiting", "enqueue-waiting-kv-holding", SCHED, "Scheduler", "kv_holding_waiting"),
            Form("skipped_waiting", "enqueue-waiting-skipped", SCHED, "Scheduler", "skipped_waiting"),
        ),
        (SCHEDULER,),
    ),
    Variant(
        "v2-unsupported-list",
        "does VllmConfig list what the V2_RUNNER runner does not support (ngram_gpu, up to 0.31.0)?",
        (
            Form(True, "runner-choice-property", CONFIG, "VllmConfig", "_get_v2_model_runner_unsupported_features"),
            Form(False, "v1-runner-removed", V1_FILE, absent=True),
        ),
        (SCHEDULER, RUNNER),
    ),
    Variant(
        "cudagraph-query-lens",
        "what does the V2_RUNNER runner's ModelCudaGraphManager take for the decode query length?",
        (
            Form(
                "decode_query_lens",
                "v2-cudagraph-query-len",
                CUDAGRAPH,
                "ModelCudaGraphManager",
                "decode_query_lens",
                "__init__",
            ),
            Form(
                "decode_query_len",
                "v2-cudagraph-query-len",
                CUDAGRAPH,
                "ModelCudaGraphManager",
                "decode_query_len",
                "__init__",
            ),
        ),
        (RUNNER,),
    ),
    Variant(
        "load-model-takes-model",
        "does the V2_RUNNER runner's load_model take the model object?",
        (
            Form(True, "v2-load-model-takes-model", V2_RUNNER, "GPUModelRunner", "model", "load_model"),
            Form(False, "v2-load-model-loader", V2_RUNNER, "GPUModelRunner", "load_model"),
        ),
        (RUNNER,),
    ),
    Variant(
        "block-tables-kernel-sizes",
        "does the V2_RUNNER runner's BlockTables take kernel_block_sizes?",
        (
            Form(True, "v2-block-tables-kernel-sizes", BLOCKS, "BlockTables", "kernel_block_sizes", "__init__"),
            Form(False, "v2-block-tables-kernel-sizes", BLOCKS, "BlockTables", "__init__"),
        ),
        (RUNNER,),
    ),
    Variant(
        "v2-ngram-speculator",
        "does the V2_RUNNER runner have an n-gram speculator of its own?",
        (
            Form(True, "v2-ngram-speculator", "v1/worker/gpu/spec_decode/ngram/speculator.py"),
            Form(False, "v2-ngram-speculator", "v1/worker/gpu/spec_decode/ngram/speculator.py", absent=True),
        ),
        (RUNNER,),
    ),
)
VARIANT = {v.key: v for v in VARIANTS}


# ---------------------------------------------------------------------- reading source


@dataclass
class _Class:
    members: set[str] = field(default_factory=set)  # methods, properties, fields, self.X assignments
    params: dict[str, set[str]] = field(default_factory=dict)  # method -> its parameter names


def _classes(tree: ast.Module) -> dict[str, _Class]:
    out: dict[str, _Class] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        cls = out.setdefault(node.name, _Class())
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                cls.members.add(item.name)
                args = item.args
                cls.params[item.name] = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
                for sub in ast.walk(item):
                    targets = []
                    if isinstance(sub, ast.Assign):
                        targets = sub.targets
                    elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
                        targets = [sub.target]
                    for t in targets:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            cls.members.add(t.attr)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                cls.members.add(item.target.id)
            elif isinstance(item, ast.Assign):
                cls.members.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return out


@lru_cache(maxsize=64)
def _read(path: Path, mtime: float) -> dict[str, _Class] | None:
    try:
        return _classes(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    except (OSError, SyntaxError, ValueError):
        return None


class Source:
    """A tree's vllm/ package, read file by file as asked."""

    def __init__(self, package: Path):
        self.package = Path(package)

    def exists(self, file: str) -> bool:
        return (self.package / file).is_file()

    def classes(self, file: str) -> dict[str, _Class] | None:
        path = self.package / file
        if not path.is_file():
            return None
        return _read(path, path.stat().st_mtime)

    def text(self, file: str) -> str:
        try:
            return (self.package / file).read_text(encoding="utf-8")
        except OSError:
            return ""

    def holds(self, form: "Form") -> bool:
        """Whether the tree has this form."""
        if form.absent:
            return not self.exists(form.file)
        if form.contains is not None:
            return form.contains in self.text(form.file)
        return self.has(form.file, form.owner, form.name, form.param_of)

    def has(self, file: str, owner: str | None, name: str | None, param_of: str | None = None) -> bool:
        if owner is None:
            return self.exists(file)
        classes = self.classes(file)
        cls = classes.get(owner) if classes else None
        if cls is None:
            return False
        if name is None:
            return True
        if param_of is not None:
            return name in cls.params.get(param_of, ())
        return name in cls.members


# ---------------------------------------------------------------------- the probe


@dataclass(frozen=True)
class Missing:
    """An internal the tree lacks: one line, with what to do."""

    what: str  # "Request.num_output_placeholders in vllm/v1/request.py"
    why: str

    def line(self, title: str, nearest: str) -> str:
        return (
            f"{title} has no {self.what}, which the project reads ({self.why}); nearest modelled release "
            f"{nearest}: if vLLM renamed or removed it, teach the adapter its new form (adapter/internals.py, "
            f"docs/adding-a-release.md), or run a supported release"
        )


@dataclass(frozen=True)
class Probe:
    """The forms a tree has of the variants, and the internals it lacks."""

    package: Path
    values: dict  # variant key -> value of the form found
    missing: tuple[Missing, ...]

    def has(self, key: str) -> object:
        """The value of a variant's form in this tree (KeyError names a variant nobody probed)."""
        if key not in self.values:
            raise KeyError(f"the adapter does not know the variant {key!r} in {self.package} (not probed, or missing)")
        return self.values[key]

    def problems(self, title: str, nearest: str) -> list[str]:
        return [m.line(title, nearest) for m in self.missing]


def probe(package: Path | str, uses: tuple[str, ...] = USES) -> Probe:
    """Read the tree's source for every internal the given uses read."""
    source = Source(Path(package))
    missing: list[Missing] = []
    for need in NEEDED:
        if set(need.uses) & set(uses) and not source.has(need.file, need.owner, need.name):
            missing.append(Missing(f"{need.owner}.{need.name} in vllm/{need.file}", need.why))
    values: dict = {}
    for variant in VARIANTS:
        if not set(variant.uses) & set(uses):
            continue
        for form in variant.forms:
            if source.holds(form):
                values[variant.key] = form.value
                break
        else:
            known = "; ".join(_where(f) for f in variant.forms)
            missing.append(Missing(f"known form of {variant.key} ({variant.question})", f"looked for: {known}"))
    return Probe(Path(package), values, tuple(missing))


def _where(form: Form) -> str:
    if form.absent:
        return f"no vllm/{form.file}"
    if form.contains is not None:
        return f"{form.contains!r} in vllm/{form.file}"
    if form.owner is None:
        return f"vllm/{form.file}"
    name = f".{form.name}" if form.name else ""
    if form.param_of:
        return f"parameter {form.name} of {form.owner}.{form.param_of} in vllm/{form.file}"
    return f"{form.owner}{name} in vllm/{form.file}"


def cited() -> set[str]:
    """Every citation id the variants' forms name (tests check each exists)."""
    return {cid for v in VARIANTS for f in v.forms for cid in f.cite.split()}

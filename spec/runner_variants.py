"""The model runners the contract knows, as data: one record per variant, each owning its discard rule.

A runner decides on its own whether a scheduled request is still prefilling, and then
discards its sample. That decision is a `Rule` over the runner's row for the request
(spec/runners.py builds the rows: Z3 terms in a proof, ints in a replay), and the same
`Rule.discards` both decides (the contract calls it) and explains (`Rule.text`
evaluates it on a replayed row's numbers): the rule a generated module or a report page
prints can never differ from the one the model applies. The contract reads a record's
fields and never compares a runner's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Mapping

from vllm_contract.spec.ops import INT_OPS, Ops


@dataclass(frozen=True)
class Rule:
    """Discard while the sum of the `left` fields is below the `right` field (strictly), or,
    with no `left`, exactly when the `right` field (a flag the scheduler ships) is true."""

    left: tuple[str, ...]
    right: str
    names: Mapping[str, str] = field(default_factory=dict)  # how the text names each field
    unless: str = ""  # a row flag under which the runner samples whatever the comparison says

    def discards(self, row: Mapping[str, Any], ops: Ops = INT_OPS) -> Any:
        if not self.left:
            base = row[self.right]
        else:
            # left-to-right `a + b`, no leading 0: the very terms the contract always built
            base = reduce(lambda a, b: a + b, (row[f] for f in self.left)) < row[self.right]
        return ops.ite(row[self.unless], False, base) if self.unless else base

    def text(self, row: Mapping[str, Any]) -> str:
        """The rule evaluated on a row's numbers, e.g. `g + n = 2 + 14 = 16 < prefill_len = 16? no -> samples`."""
        decision = bool(self.discards(row, INT_OPS))
        name = self.names.get(self.right, self.right)
        if not self.left:
            what = f"{name} (= {bool(row[self.right])})"
            compared = bool(row[self.right])
        else:
            terms = " + ".join(self.names.get(f, f) for f in self.left)
            values = " + ".join(str(row[f]) for f in self.left)
            total = sum(row[f] for f in self.left)
            what = f"{terms} = {values} = {total} < {name} = {row[self.right]}"
            compared = total < row[self.right]
        answer = "yes" if compared else "no"
        if self.unless and row[self.unless]:
            answer += f", but {self.names.get(self.unless, self.unless)}"
        return f"{what}? {answer} -> {'discards' if decision else 'samples'}"


@dataclass(frozen=True)
class Runner:
    name: str
    doc: str
    family: str  # "v1" (GPUModelRunner, per-request CachedRequestState) or "v2" (state slots, the Triton kernel)
    rule: Rule
    # the recompute fix: a cached request whose scheduler count went backwards has its
    # slot's GPU count rolled back to it (fixes/v2-recompute-rollback)
    rolls_back: bool = False
    # the runner samples exactly what the scheduler reserved for, whatever the faults of
    # the slot state: its decision is the scheduler's (an in-flight-agreement lemma holds
    # under KV-load failures)
    follows_scheduler: bool = False
    # the recompute fix's history half: the tokens the scheduler says it skipped for a
    # KV-load failure leave the slot's history (total_len), before the step runs
    drops_skipped: bool = False
    kernel: str | None = None  # the discard kernel variant that implements the rule (kernels/discard.py)
    in_vllm: bool = True  # vLLM's own code has it (the real-runner target can run it; v2-live with one patch)
    title: str = ""  # a diagram's participant
    phrase: str = ""  # in a sentence: "the V2 runner with the live-length fix"
    cite: str = ""  # the vLLM lines of its decision (spec/citations.toml ids)
    # ---- what a platform plugin's runner decides differently (docs/plugin-runners.md) ----
    plugin: str = ""  # the plugin that ships it (spec/plugin_runners/), "" for vLLM's own
    # the vLLM releases a plugin's runner is checked against (its scenarios' releases, and the
    # arms of its generated cases); empty: every release (vLLM's own runners)
    releases: tuple[str, ...] = ()
    # v1 family: the host-row model of GPUModelRunner (where -1 placeholders land), which
    # no-placeholder-input checks; a plugin's runner keeps its own rows
    host_rows: bool = True
    # v1 family: a request that re-enters the batch gets its output ids rebuilt from the
    # scheduler's all_token_ids (CachedRequestState.num_tokens = T + P); without, the
    # runner only trims its own list to the scheduler's count (min(Nr, T + P))
    rebuilds_outputs: bool = True
    # v1 family: the runner keeps [0] placeholders for sampled tokens and writes the real
    # token at the next step, only for a request still in its batch (runner-tokens-agree)
    zero_placeholders: bool = False
    # v1 family: Continue Decode with N = max_decode_steps: a step whose every scheduled
    # row has one token is classed decode-only, nothing is discarded and each row returns
    # 1..N tokens, and the plugin's patch of vLLM's scheduler pre-compensates placeholders
    # and advances num_computed_tokens (0: off)
    continue_decode: int = 0
    # the runner samples exactly the steps the scheduler reserved for, faults aside (the
    # lemmas that rest on it, spec/invariants.py, are assumed only then)
    honours_reservation: bool = True
    # v1 family: the runner classes a row as prefilling iff num_computed < num_prompt
    # (attention metadata), which prefill-view-agrees checks against the tokens it feeds
    prompt_bounded_view: bool = False
    # v2 family: vLLM's V2 runner asserts, when its batch has drafts, that each request's
    # scheduled tokens cover its 1 + drafts logits rows ([cite:v2-logits-cover-assert]); a
    # plugin's runner that builds its own inputs is not assumed to
    asserts_logits_covered: bool = False
    # a platform plugin's own patch of vLLM's scheduler classes that runs with this runner
    # (Continue Decode's): the vllm targets apply it, the exported tests call it
    scheduler_patch: SchedulerPatch | None = None
    # v1 family: the runner lays the tokens it sampled over its batch's rows by position
    # (decode rows first, then prompt rows), so a row that produced no token shifts every
    # later row's token up by one: the row's own decision says whether it yields a token,
    # its position says whether it receives one (vllm-gaudi before its #359)
    positional_outputs: bool = False

    def explain(self, row: Mapping[str, Any]) -> str:
        """What the runner did with a scheduled row, on its numbers: the rule, and for a
        runner that assigns by position, which token the row received."""
        text = self.rule.text(row)
        if self.positional_outputs:
            got = "receives a token" if row["delivered"] else "receives none"
            text += f"; row {row['position']} of the batch, {row['yielded']} token(s) sampled -> {got}"
        return text


@dataclass(frozen=True)
class SchedulerPatch:
    """A plugin's function that monkeypatches vLLM's Scheduler and AsyncScheduler, as the
    plugin ships it: importable as `module.function` where the plugin is installed."""

    plugin: str  # spec/plugin_runners/ SOURCE.name: whose pinned tree holds it
    module: str  # its module in the plugin's package
    function: str  # called with no arguments; patches the classes for the whole process
    cite: str = ""  # the citations of what it does (spec/citations.toml)

    @property
    def file(self) -> str:
        """Its file, from the plugin tree's root."""
        return self.module.replace(".", "/") + ".py"


V1_RULE = Rule(("computed", "query_len"), "num_tokens", {"computed": "c", "query_len": "n", "num_tokens": "Nr"})
SNAPSHOT_RULE = Rule(("num_computed", "query_len"), "prefill_len", {"num_computed": "g", "query_len": "n"})
LIVE_RULE = Rule(("num_computed", "query_len"), "total_len", {"num_computed": "g", "query_len": "n"})
CHUNK_RULE = Rule((), "chunk", {"chunk": "the scheduler's is_prefill_chunk"})
# a runner that never discards: every row's "never" is False (rows of the v1 family carry it)
NEVER_RULE = Rule((), "never", {"never": "a step to discard (this runner knows none)"})

V1 = Runner(
    "v1",
    "GPUModelRunner (V1): discards while cr + n < CachedRequestState.num_tokens (live)",
    "v1",
    V1_RULE,
    follows_scheduler=True,
    title="Runner (V1)",
    phrase="the V1 runner",
    cite="v1-discard-mask",
)
V2 = Runner(
    "v2",
    "V2 runner as in 0.32.0: discards while seq_len < prefill_len (snapshot taken at add)",
    "v2",
    SNAPSHOT_RULE,
    kernel="snapshot",
    title="Runner (V2, prefill_len)",
    phrase="the V2 runner",
    cite="v2-discard-kernel v2-add-writes-slot",
    asserts_logits_covered=True,
)
V2_LIVE = Runner(
    "v2-live",
    "V2 with the fix: discards while seq_len < total_len (live length of the slot)",
    "v2",
    LIVE_RULE,
    kernel="live",
    title="Runner (V2, total_len)",
    phrase="the V2 runner with the live-length fix",
    cite="v2-discard-kernel v2-add-writes-slot",
    asserts_logits_covered=True,
)
V2_ROLLBACK = Runner(
    "v2-rollback",
    "V2 with the recompute fix (fixes/v2-recompute-rollback): the scheduler ships its prefill-chunk decision with "
    "each request and the runner discards exactly those steps; when the scheduler's computed count of a cached "
    "request went backwards, the slot's GPU count is rolled back to it",
    "v2",
    CHUNK_RULE,
    rolls_back=True,
    follows_scheduler=True,
    in_vllm=False,
    title="Runner (V2, the scheduler's chunk flag)",
    phrase="the V2 runner with the recompute fix",
    cite="v2-discard-kernel v2-add-writes-slot",
    asserts_logits_covered=True,
)
V2_ROLLBACK_LIVE = Runner(
    "v2-rollback-live",
    "the recompute fix without its first half (negative control): the slot's count is rolled back, but the runner "
    "still decides on its own, with the live total_len",
    "v2",
    LIVE_RULE,
    rolls_back=True,
    in_vllm=False,
    title="Runner (V2, rolled back, total_len)",
    phrase="the V2 runner with only half the recompute fix (the slot rolled back)",
    cite="v2-discard-kernel v2-add-writes-slot",
    asserts_logits_covered=True,
)

V2_ROLLBACK_HISTORY = Runner(
    "v2-rollback-history",
    "V2 with the whole recompute fix (fixes/v2-recompute-rollback): v2-rollback, and the tokens the scheduler says "
    "it skipped for a KV-load failure (SchedulerOutput.skipped_output_tokens) leave the slot's history: total_len, "
    "the token ids after them and the last sampled token",
    "v2",
    CHUNK_RULE,
    rolls_back=True,
    follows_scheduler=True,
    drops_skipped=True,
    in_vllm=False,
    title="Runner (V2, the scheduler's chunk flag, skipped tokens dropped)",
    phrase="the V2 runner with the whole recompute fix",
    cite="v2-discard-kernel v2-add-writes-slot v2-total-len-advance",
    asserts_logits_covered=True,
)

VLLM_RUNNERS: dict[str, Runner] = {
    r.name: r for r in (V1, V2, V2_LIVE, V2_ROLLBACK, V2_ROLLBACK_HISTORY, V2_ROLLBACK_LIVE)
}
# every runner by name: vLLM's, and the platform plugins' that spec/plugin_runners adds when
# it is imported (spec/config.py imports it, so a configuration sees them all)
RUNNERS: dict[str, Runner] = dict(VLLM_RUNNERS)

"""tpu-inference (Google's TPU plugin): its runner's decisions, as runner variants.

Read from the tpu-inference 0.32.0 wheel (PyPI, requirements/plugin-tpu-inference.txt).

The normal path keeps a sample iff num_computed + num_scheduled >= num_tokens of its own
CachedRequestState, a live count ([cite:tpu-keep-rule tpu-live-num-tokens]): vLLM V1's
rule. It differs from V1 in its token list: a kept step appends a [0] placeholder
([cite:tpu-placeholder-zeros]) that the next step replaces with the real token only for a
request in that step's batch ([cite:tpu-substitute-skips]), and a request that re-enters
the batch has its list trimmed to the scheduler's count, never rebuilt
([cite:tpu-trim-only]).

Continue Decode (additional_config.enable_continue_decode) runs up to N =
max_decode_steps decode iterations on the device for one scheduled step. A step whose
scheduled tokens equal its rows is decode-only ([cite:tpu-decode-only-by-count]) and goes
the Continue Decode way ([cite:tpu-cd-entered]): nothing is discarded
([cite:tpu-cd-no-discard]), each row returns 1..N tokens (fewer at an EOS or a block
boundary, [cite:tpu-cd-tokens-returned tpu-cd-max-steps]) and N [0]s are appended
([cite:tpu-cd-placeholders]). The plugin patches vLLM's scheduler: a live delivery of m > 1
tokens first adds m - 1 to num_output_placeholders ([cite:tpu-cd-precompensate]) and, after
vLLM's update and its stop trim, adds (kept tokens - 1) to num_computed_tokens
([cite:tpu-cd-advances-computed]). The runner also writes the returned count into the
SchedulerOutput's num_scheduled_tokens ([cite:tpu-cd-rewrites-scheduled]); left out: with
async scheduling the scheduler runs in another process (UniProcExecutor turns async
scheduling off, tpu-inference #3456), so it never reads that copy.
"""

from __future__ import annotations

from vllm_contract.spec.plugin_runners import PAIRED_RELEASES, PluginSource
from vllm_contract.spec.runner_variants import V1_RULE, Rule, Runner, SchedulerPatch

SOURCE = PluginSource(
    name="tpu-inference",
    kind="pypi",
    version="0.32.0",
    vllm="its wheel does not pin vllm; modelled against vLLM 0.32.0, the release of the same number, and 0.33.0",
    repo="vllm-project/tpu-inference",
)

TPU = Runner(
    "tpu-inference",
    "tpu-inference's TPU runner, normal path: keeps a sample iff c + n >= its live num_tokens, [0] "
    "placeholders replaced only in the next step's batch, its list trimmed (never rebuilt) on re-entry",
    "v1",
    V1_RULE,
    follows_scheduler=True,
    in_vllm=False,
    title="Runner (tpu-inference)",
    phrase="tpu-inference's runner",
    cite="tpu-keep-rule tpu-live-num-tokens",
    plugin=SOURCE.name,
    releases=PAIRED_RELEASES,
    host_rows=False,
    rebuilds_outputs=False,
    zero_placeholders=True,
)


# Continue Decode's patch of vLLM's scheduler, as the plugin ships it
CONTINUE_DECODE_PATCH = SchedulerPatch(
    SOURCE.name,
    "tpu_inference.core.sched.utils",
    "patch_vllm_scheduler_for_continue_decode",
    cite="tpu-cd-precompensate tpu-cd-advances-computed",
)


# V1's comparison, overridden in a decode-only step (every scheduled row one token)
CONTINUE_DECODE_RULE = Rule(
    V1_RULE.left,
    V1_RULE.right,
    {**V1_RULE.names, "decode_only": "a decode-only step: Continue Decode keeps every row"},
    unless="decode_only",
)


def _continue_decode(steps: int) -> Runner:
    return Runner(
        f"tpu-cd-{steps}",
        f"tpu-inference with Continue Decode, max_decode_steps={steps}: a step of one-token rows is decode-only, "
        f"samples every row and returns 1..{steps} tokens each; the plugin's scheduler patch pre-compensates "
        "the placeholders and advances num_computed_tokens",
        "v1",
        CONTINUE_DECODE_RULE,
        in_vllm=False,
        title=f"Runner (tpu-inference, Continue Decode N={steps})",
        phrase=f"tpu-inference's runner with Continue Decode (N = {steps})",
        cite="tpu-keep-rule tpu-decode-only-by-count tpu-cd-no-discard",
        plugin=SOURCE.name,
        releases=PAIRED_RELEASES,
        host_rows=False,
        rebuilds_outputs=False,
        continue_decode=steps,
        honours_reservation=False,
        scheduler_patch=CONTINUE_DECODE_PATCH,
    )


RUNNERS = (TPU, *(_continue_decode(n) for n in (2, 3, 4)))


# A one-token prefill chunk sampled in a decode-only batch: a token nothing was reserved
# for (m.UNRESERVED_TOKEN) and the counter assert on both releases (with m > 1 tokens back
# the patch adds m - 1 placeholders and vLLM subtracts m). What else breaks, per N and
# release: on 0.33.0 with N = 4 a stop among the returned tokens takes a finished
# request's computed count below 0 (no assert).
_CHUNK_SAMPLED_ALSO: dict[int, dict[str, tuple[str, ...]]] = {
    2: {"0.32.0..0.33.0": ()},
    3: {"0.32.0..0.33.0": ()},
    4: {"0.32.0": (), "0.33.0": ("computed-nonnegative",)},
}

# A stop inside the window: m of the n returned tokens kept. On
# 0.32.0 the patch adds n - 1 placeholders but vLLM subtracts only m; on 0.33.0 vLLM's stop
# trim takes n - m back from num_computed_tokens, which was advanced by 1, not n. Either way
# the resumable stop's frontier c - P is short by n - m: below 0 once n >= 3 with a one-token
# prompt (the assert); with n = 2 it reaches 0 and no trace within 8 steps goes below.
_STOP_INSIDE_WINDOW = {
    2: {"0.32.0..0.33.0": {"safe-frontier-nonnegative": "bounded", "computed-nonnegative": "bounded"}},
    3: {"0.32.0..0.33.0": {"safe-frontier-nonnegative": "violated", "computed-nonnegative": "bounded"}},
    4: {
        "0.32.0": {"safe-frontier-nonnegative": "violated", "computed-nonnegative": "bounded"},
        # a plain (not resumable) stop leaves the finished request's count at c + 2m - n < 0
        "0.33.0": {"safe-frontier-nonnegative": "violated", "computed-nonnegative": "violated"},
    },
}


def scenarios(m) -> tuple:
    """tpu-inference's configurations (spec/matrix.py hands itself in as m)."""
    return (
        *m._releases(
            "plugin-tpu",
            "tpu-inference's normal path: every event family, any number of requests and drafts",
            {
                "0.32.0": m._expect(proved=m.SAFETY),
                "0.33.0": m._expect(proved=m.SAFETY_033),
            },
            runner="tpu-inference",
            events=m.ALL,
            **m.ANY_SIZE,
        ),
        *m._releases(
            "plugin-tpu-tokens",
            "tpu-inference's normal path without drafts: its own token list against the scheduler's",
            {"0.32.0..0.33.0": m._expect(violated=("runner-tokens-agree",))},
            runner="tpu-inference",
            events=m.ALL - {"stream"},
            spec_tokens=0,
            requests=2,
        ),
        *[
            c
            for n in (2, 3, 4)
            for c in m._releases(
                f"plugin-tpu-cd{n}",
                f"tpu-inference with Continue Decode (max_decode_steps={n}) and its scheduler patch: a "
                "non-final one-token prefill chunk in a batch of one-token rows",
                {
                    releases: m._searched((*m.UNRESERVED_TOKEN, "counter-nonnegative", *also))
                    for releases, also in _CHUNK_SAMPLED_ALSO[n].items()
                },
                runner=f"tpu-cd-{n}",
                events=frozenset(),
                spec_tokens=0,
                requests=1,
            )
        ],
        *[
            c
            for n in (2, 3, 4)
            for c in m._releases(
                f"plugin-tpu-cd{n}-stop",
                f"tpu-inference with Continue Decode (max_decode_steps={n}): a streaming session's stop "
                "inside the decode window",
                _STOP_INSIDE_WINDOW[n],
                runner=f"tpu-cd-{n}",
                events=frozenset({"stream"}),
                spec_tokens=0,
                requests=1,
                search_depth=8,
            )
        ],
    )

"""vllm-ascend (Huawei Ascend NPUs): its V1 runner, and its V2 runner, as runner variants.

Read from vllm-project/vllm-ascend at commit 182b75ea (2026-08-22); its PyPI sdist
(0.23.0.post1) does not give up its metadata without building for NPUs, so the commit is
the pin. That commit says it is verified against vLLM v0.27.1 and a later main, neither a
modelled release: its rules are checked against the scheduler of 0.32.0 and 0.33.0.

The V1 runner discards against a live count like vLLM's V1 ([cite:ascend-v1-discard-mask]),
with vLLM's own request states; its attention metadata classes a row as prefilling iff
num_computed_tokens < num_prompt_tokens ([cite:ascend-prompt-bounded-prefill]), a test bounded
by the prompt. The V2 runner reads vLLM's prefill_len snapshot for its phase
([cite:ascend-v2-prefill-len]) and leaves sampling to vLLM's V2 ([cite:ascend-v2-postprocess-super]):
vLLM's V2 rule, with this project's V2 findings.
"""

from __future__ import annotations

from vllm_contract.spec.plugin_runners import PAIRED_RELEASES, PluginSource
from vllm_contract.spec.runner_variants import V1, V2, Runner

SOURCE = PluginSource(
    name="vllm-ascend",
    kind="git",
    version="0.23.0",
    vllm="vLLM v0.27.1 and main at cdc4824a (.github/vllm-release-tag.commit); modelled against 0.32.0 and 0.33.0",
    repo="vllm-project/vllm-ascend",
    commit="182b75ea84ff13ece27b57391331ef8935410aea",
    note="main on 2026-08-22, the snapshot the team notes read",
)

ASCEND_V1 = Runner(
    "ascend-v1",
    "vllm-ascend's NPUModelRunner (V1): discards while the optimistic seq_len < num_tokens (live, as vLLM's V1); "
    "its attention classes a row as prefilling iff num_computed < num_prompt",
    "v1",
    V1.rule,
    follows_scheduler=True,
    in_vllm=False,
    title="Runner (vllm-ascend V1)",
    phrase="vllm-ascend's V1 runner",
    cite="ascend-v1-discard-mask",
    plugin=SOURCE.name,
    releases=PAIRED_RELEASES,
    host_rows=False,
    prompt_bounded_view=True,
)

ASCEND_V2 = Runner(
    "ascend-v2",
    "vllm-ascend's V2 runner: vLLM's V2 discard kernel and prefill_len snapshot (postprocess_sampled calls super())",
    "v2",
    V2.rule,
    kernel=V2.kernel,
    in_vllm=False,
    title="Runner (vllm-ascend V2, prefill_len)",
    phrase="vllm-ascend's V2 runner",
    cite="ascend-v2-prefill-len ascend-v2-postprocess-super",
    plugin=SOURCE.name,
    releases=PAIRED_RELEASES,
)

RUNNERS = (ASCEND_V1, ASCEND_V2)


def scenarios(m) -> tuple:
    """vllm-ascend's configurations (spec/matrix.py hands itself in as m)."""
    return (
        *m._releases(
            "plugin-ascend-v1",
            "vllm-ascend's V1 runner: every event family, any number of requests and drafts",
            {"0.32.0": m._expect(proved=m.SAFETY), "0.33.0": m._expect(proved=m.SAFETY_033)},
            runner="ascend-v1",
            events=m.ALL,
            **m.ANY_SIZE,
        ),
        *m._releases(
            "plugin-ascend-v1-view",
            "vllm-ascend's V1 runner: its prompt-bounded prefill class after a preemption",
            {"0.32.0..0.33.0": m._expect(violated=("prefill-view-agrees",))},
            runner="ascend-v1",
            events=frozenset({"preempt"}),
            spec_tokens=0,
            requests=1,
        ),
        *m._releases(
            "plugin-ascend-v2-kvfail",
            "vllm-ascend's V2 runner under KV-load failures (recompute): vLLM's V2 rule, its findings",
            {
                "0.32.0": m._expect(violated=m.V2_RECOMPUTE_BREAKS),
                "0.33.0": m._expect(violated=m.V2_RECOMPUTE_BREAKS[1:], bounded=("counter-nonnegative",)),
            },
            runner="ascend-v2",
            events=frozenset({"kvfail"}),
            requests=1,
        ),
    )

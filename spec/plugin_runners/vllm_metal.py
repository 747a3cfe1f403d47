"""vllm-metal (Apple silicon, MLX) before its #179: the non-paged MLX path samples every step.

Read from vllm-project/vllm-metal at the commit before #179 (no PyPI artifact exists):
there, a new request's first step runs its whole prompt and samples, whatever number of
tokens the scheduler gave it ([cite:metal-new-request-whole-prompt]), and every later
step of a request decodes and samples ([cite:metal-cached-requests-decode]). The
scheduler reserves nothing for a prefill chunk, so a chunked prompt gets a token it
reserved nothing for: #171's `assert request.num_output_placeholders >= 0`. #179 turned
chunked prefill off for Metal; #171 ran vLLM 0.14.1, which the model does not have: the
rule is checked against the scheduler of the releases it models.
"""

from __future__ import annotations

from vllm_contract.spec.plugin_runners import PAIRED_RELEASES, PluginSource
from vllm_contract.spec.runner_variants import NEVER_RULE, Runner

SOURCE = PluginSource(
    name="vllm-metal",
    kind="git",
    version="0.1.0",
    vllm="vLLM 0.14.1 in #171's log; modelled against vLLM 0.32.0 and 0.33.0",
    repo="vllm-project/vllm-metal",
    commit="aa60c55e72e51a68df779c4895f258c983ff14ca",
    note="the parent of dc602da (#179, 'Disable chunked prefill on Metal')",
)

METAL = Runner(
    "metal-mlx",
    "vllm-metal's MetalModelRunner on the non-paged MLX path before #179: a new request's first step "
    "prefills its whole prompt and samples, every later step decodes and samples",
    "v1",
    NEVER_RULE,
    in_vllm=False,
    title="Runner (vllm-metal, MLX)",
    phrase="vllm-metal's MLX runner",
    cite="metal-new-request-whole-prompt metal-cached-requests-decode",
    plugin=SOURCE.name,
    releases=PAIRED_RELEASES,
    host_rows=False,
    honours_reservation=False,
)

RUNNERS = (METAL,)


def scenarios(m) -> tuple:
    """vllm-metal's configuration (spec/matrix.py hands itself in as m)."""
    return m._releases(
        "plugin-metal",
        "vllm-metal before #179: the MLX path samples every step, a prefill chunk's too; one request, no drafts",
        {
            # the chunk's token is delivered with P = 0: the counter assert
            "0.32.0": m._searched((*m.UNRESERVED_TOKEN, "counter-nonnegative")),
            # 0.33.0 decrements only a positive counter: the chunk's token, found with P = 0,
            # is appended and the counter left alone
            "0.33.0": m._searched(m.UNRESERVED_TOKEN),
        },
        runner="metal-mlx",
        events=frozenset(),
        spec_tokens=0,
        requests=1,
    )

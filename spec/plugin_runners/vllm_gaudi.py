"""vllm-gaudi (Intel Gaudi, HPU) before its #359/#360: the async path lays tokens over rows by position.

Read from vllm-project/vllm-gaudi at cdf63c66, the parent of its #360 (cherry-pick of
#359; no PyPI artifact holds it). Its HPU runner brings the decode rows before the
prompt rows ([cite:gaudi-prompt-class gaudi-decodes-first]); a prompt row yields a
logits row only when its chunk reaches the prompt's end ([cite:gaudi-prompt-logits]),
and under async scheduling an unfinished chunk gets none ([cite:gaudi-async-no-logits-row]).
The step's tokens, one per logits row, decode rows' first ([cite:gaudi-sampled-concat]),
are then written over the output's rows from the first ([cite:gaudi-positional-output]),
with no row marked invalid ([cite:gaudi-output-invalid-empty]). An unfinished chunk
ahead of a prompt that completes therefore receives that prompt's token, a token it
reserved nothing for, and the last row receives none though its step reserved one: the
leak #359 reports ("no output token due to the chunked prompt, but the scheduler
expects one"), with a stray token beside it.

The vLLM it ran against is 0.10/0.11 (its tags); the rule is checked against the
scheduler of the releases the model has. Modelled with two requests, no drafts and no
preemption (a resumed prompt's chunk yields one logits row per token past the prompt,
[cite:gaudi-prompt-logits], which this record does not state), and a long-prefill
threshold, the scheduler's way to cut a prompt that is not the step's last.
"""

from __future__ import annotations

from vllm_contract.spec.plugin_runners import PAIRED_RELEASES, PluginSource
from vllm_contract.spec.runner_variants import Rule, Runner

SOURCE = PluginSource(
    name="vllm-gaudi",
    kind="git",
    version="0.10.1.dev189",
    vllm="vLLM 0.10/0.11 (the tags around the commit); modelled against vLLM 0.32.0 and 0.33.0",
    repo="vllm-project/vllm-gaudi",
    commit="cdf63c661495baeb67092d7004e959ec39d3ac97",
    note="the parent of 8c08770 (#360, 'Fix issue with async_scheduling when dealing with chunked input')",
)

# a prompt row yields no token while its chunk ends short of the prompt: c + n < L
PROMPT_END_RULE = Rule(("computed", "query_len"), "prompt_len", {"computed": "c", "query_len": "n", "prompt_len": "L"})

GAUDI = Runner(
    "gaudi-hpu",
    "vllm-gaudi's HPUModelRunner before #359, async path: decode rows first, a prompt row yields a token "
    "only when its chunk reaches the prompt's end, and the tokens are laid over the rows by position",
    "v1",
    PROMPT_END_RULE,
    in_vllm=False,
    title="Runner (vllm-gaudi, HPU)",
    phrase="vllm-gaudi's HPU runner",
    cite="gaudi-prompt-class gaudi-decodes-first gaudi-prompt-logits gaudi-async-no-logits-row "
    "gaudi-sampled-concat gaudi-output-invalid-empty gaudi-positional-output",
    plugin=SOURCE.name,
    releases=PAIRED_RELEASES,
    host_rows=False,
    honours_reservation=False,
    positional_outputs=True,
)

RUNNERS = (GAUDI,)


def scenarios(m) -> tuple:
    """vllm-gaudi's configuration (spec/matrix.py hands itself in as m)."""
    return m._releases(
        "plugin-gaudi",
        "vllm-gaudi before #359: tokens laid over rows by position; two requests, no drafts, no preemption, "
        "a long-prefill threshold of 2",
        # the shifted token lands where nothing was reserved (m.UNRESERVED_TOKEN), and the
        # row it was for keeps a reservation no token will return (placeholder-accounting too)
        {
            # the stray token is delivered with P = 0: the counter assert kills EngineCore
            "0.32.0": m._searched((*m.UNRESERVED_TOKEN, "counter-nonnegative")),
            # 0.33.0 decrements only a positive counter: the stray token is appended silently;
            # no hang within 10 steps either: the leaked placeholder makes the request's every
            # later step look one token ahead, it does not stop it
            "0.33.0": m._searched(m.UNRESERVED_TOKEN),
        },
        runner="gaudi-hpu",
        events=frozenset(),
        spec_tokens=0,
        long_prefill_threshold=2,
        search_depth=10,
    )

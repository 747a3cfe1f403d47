"""Every runner variant's rule: the text a module or a page prints is computed by the function that decides.

For each variant, random traces are replayed on the interpreter; at every scheduled
request the model's decision (the row's `discard`, which the contract took with
`Rule.discards`) must be the one the printed text states, and the text must name only
what the rule reads.
"""

from __future__ import annotations

import random

import pytest
from vllm_contract.model.run import Run
from vllm_contract.model.sampler import random_trace
from vllm_contract.spec.config import Config
from vllm_contract.spec.runner_variants import RUNNERS

EVENTS = frozenset({"kvfail", "preempt", "abort"})


@pytest.mark.parametrize("name", sorted(RUNNERS))
def test_the_printed_rule_is_the_rule_that_decides(name, sweep):
    runner = RUNNERS[name]
    drafts = 0 if runner.positional_outputs else 1  # a runner assigning by position is modelled without drafts
    cfg = Config(f"rule-{name}", runner=name, requests=2, spec_tokens=drafts, block_size=4, events=EVENTS)
    if runner.positional_outputs:  # and without preemption, with a threshold that cuts a prompt mid-step
        cfg = cfg.with_(events=frozenset({"abort"}), long_prefill_threshold=2)
    cfg = cfg.validate()
    key = "v1_rows" if cfg.is_v1 else "v2_rows"
    seen = {True: 0, False: 0}
    received = {True: 0, False: 0}
    for seed in range(25 if sweep else 8):
        init, steps, _ = random_trace(cfg, random.Random(seed), 24)
        for played in Run(cfg, init, steps):
            for row in played.result.observed.get(key) or []:
                if not row["scheduled"]:
                    continue
                text = runner.rule.text(row)
                assert text.endswith("-> discards" if row["discard"] else "-> samples"), (name, row, text)
                assert bool(runner.rule.discards(row)) == bool(row["discard"])
                seen[bool(row["discard"])] += 1
                if runner.positional_outputs:  # what is printed of the row's token is what it received
                    explained = runner.explain(row)
                    assert explained.startswith(text) and explained.endswith(
                        "receives a token" if row["delivered"] else "receives none"
                    ), (name, row, explained)
                    received[bool(row["delivered"]) == bool(row["discard"])] += 1
    if runner.rule.right == "never":  # a runner that never discards (vllm-metal's MLX path)
        assert seen[False] and not seen[True], f"{name}: a rule that never discards discarded ({seen})"
        return
    assert seen[True] and seen[False], f"{name}: the traces never showed both decisions ({seen})"
    if runner.positional_outputs:  # and rows whose token went elsewhere: the shift itself
        assert received[True] and received[False], f"{name}: no row shifted, or every row did ({received})"


def test_each_variant_names_only_what_it_compares():
    v2 = {"num_computed": 2, "query_len": 14, "prefill_len": 16, "total_len": 18, "chunk": True}
    assert RUNNERS["v2"].rule.text(v2) == "g + n = 2 + 14 = 16 < prefill_len = 16? no -> samples"
    assert RUNNERS["v2-live"].rule.text(v2) == "g + n = 2 + 14 = 16 < total_len = 18? yes -> discards"
    assert RUNNERS["v2-rollback-live"].rule.text(v2) == "g + n = 2 + 14 = 16 < total_len = 18? yes -> discards"
    chunk = RUNNERS["v2-rollback"].rule.text(v2)  # the recompute fix decides on the scheduler's flag alone
    assert "is_prefill_chunk" in chunk and "prefill_len" not in chunk and "total_len" not in chunk
    assert chunk.endswith("yes -> discards")
    v1 = {"computed": 3, "query_len": 1, "num_tokens": 4}
    assert RUNNERS["v1"].rule.text(v1) == "c + n = 3 + 1 = 4 < Nr = 4? no -> samples"

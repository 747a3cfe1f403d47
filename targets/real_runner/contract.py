"""What no real runner can take on as the model does: picks it cannot realise, states beyond its contract.

The fuzzer keeps these out of the traces it draws for the real runner (targets/fuzz/differential.py
draw_for), and the target refuses them by name when a trace asks for them.
"""

from __future__ import annotations

from typing import Mapping

from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TargetUnavailable
from vllm_contract.spec.vocabulary import Status


class UnrealisablePick(TargetUnavailable):
    """The trace picks something real code cannot do (accepting a placeholder draft)."""


def drafts_are_placeholders(cfg: Config, before: Mapping, step) -> list[bool]:
    """Per request, whether the drafts a `schedule` step gives it are placeholders the
    runner fills itself, so that no drafter can make any of them accepted (measured on
    both releases; a model trace may still pick accepted > 0 there):
      * an admission (new, resumed or a streaming update): the scheduler pads it with
        -1 drafts, and V2's add_request zeroes the slot's drafts;
      * V1: a request that was not in the persistent batch the step before (v1_in_batch
        false): its drafts are the scheduler's -1 placeholders, the previous proposal is
        indexed by the previous batch (prev_req_id_to_index);
      * V2: a step whose first logit row lies inside the slot's prefill_len,
        g + n - (1 + ks) < prefill_len: gather_draft_sampled turns its drafts into -1.
    `step` is the model's StepResult of the `schedule` step, `before` the state before it."""
    state = step.state
    pos = state[("queue_len",)] - 1
    out = []
    for r in range(cfg.requests):
        ks = state[("q_spec", pos, r)]
        if not ks:
            out.append(False)
        elif state[("q_admitted", pos, r)]:
            out.append(True)
        elif cfg.is_v2:
            row = step.observed["v2_rows"][r]
            out.append(row["num_computed"] + row["query_len"] - (1 + ks) < row["prefill_len"])
        else:
            out.append(not before[("v1_in_batch", r)])
    return out


def beyond_runner_contract(cfg: Config, state: Mapping) -> str | None:
    """A state no real runner can take on as the model does, named; None otherwise.

    prompt-beyond-tokens: a streaming session whose prompt is longer than its token
    list (L > T; on 0.32.0 a KV-load failure lets a stop land below the prompt, and the
    session update keeps output up to num_computed_tokens). The V2 runner's
    RequestState.add_request then asserts `prefill_len >= prompt_len` ([cite:v2-add-writes-slot])
    and the worker dies; the V1 runner trims its outputs with a negative
    num_output_tokens ([cite:v1-trim-outputs], `del output_token_ids[n:]`, which keeps
    all but the last |n|) and discards a step the model samples. The model states
    neither: the fuzzer ends a trace there (tests/test_real_runner.py shows both)."""
    for r in range(cfg.requests):
        if state[("num_prompt_tokens", r)] > state[("num_tokens", r)] and state[("status", r)] != Status.FINISHED:
            return "prompt-beyond-tokens"
    return None

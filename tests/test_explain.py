"""`make explain`: the operator's counters, read in every form, reached or refuted per configuration."""

from __future__ import annotations

import pytest

from model.explain import explain_config
from report import explain
from spec.matrix import by_name
from spec.vocabulary import Status
from vllm_contract.cli import main as cli

SEED = "placeholders=-1 new_tokens=1 computed=8448 num_tokens=9119 prompt=9118 output=1 prefill_chunk=True"
SEED_VALUES = {
    "placeholders": -1,
    "new_tokens": 1,
    "computed": 8448,
    "num_tokens": 9119,
    "prompt": 9118,
    "output": 1,
    "prefill_chunk": True,
}


def test_the_seed_log_line():
    values, ignored, form = explain.parse(SEED)
    assert values == SEED_VALUES and not ignored and form == "log line"


def test_a_json_object_and_spec_names():
    values, _, form = explain.parse('{"num_output_placeholders": -1, "is_prefill_chunk": true, "status": "RUNNING"}')
    assert values == {"placeholders": -1, "prefill_chunk": True, "status": Status.RUNNING} and form == "JSON"


def test_a_request_repr():
    text = (
        "Request(request_id='r0', status=<RequestStatus.RUNNING: 2>, num_output_placeholders=-1, "
        "num_computed_tokens=8448, prompt_token_ids=[5, 5, 5], spec_token_ids=[], sampling_params=SamplingParams(n=1))"
    )
    values, ignored, form = explain.parse(text)
    assert values == {"status": Status.RUNNING, "placeholders": -1, "computed": 8448, "prompt": 3, "drafts": 0}
    assert set(ignored) == {"request_id", "sampling_params"} and form == "Request repr"


@pytest.mark.parametrize(
    "text, words",
    [
        ("placeholder=-1", ["'placeholder'", "placeholders", "prefill_chunk"]),
        ("computed=abc", ["'computed'", "whole number", "'abc'"]),
        ("prefill_chunk=maybe", ["'prefill_chunk'", "True or False"]),
        ("status=SLEEPING", ["'status'", "RUNNING"]),
        ("computed", ["name=value"]),
        ('{"placeholders": true}', ["'placeholders'", "whole number"]),
    ],
)
def test_bad_fields_are_one_line_naming_the_field(text, words, capsys):
    assert cli(["explain", text, "--configs", "v1@0.32.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    for word in words:
        assert word in err


def test_the_seed_counters_are_reached_by_the_kv_load_failure_recompute():
    cfg = by_name(["v2-kvfail@0.32.0"])[0]
    big = explain_config(cfg, SEED_VALUES)
    assert big.verdict == "reached" and big.depth == 7
    assert str(big.fired) == "crash: placeholders-nonnegative" and big.mechanisms == ["kv-load-failure"]
    last = big.trace.states[-1]
    assert last[("num_output_placeholders", 0)] == -1 and last[("num_prompt_tokens", 0)] == 9118
    # integer sizes are taken as given: a small prompt needs the same trace shape
    small = explain_config(cfg, {**SEED_VALUES, "computed": 16, "num_tokens": 19, "prompt": 18})
    assert small.depth == big.depth
    assert [s.event for s in small.trace.steps] == [s.event for s in big.trace.steps]


def test_a_configuration_that_proves_the_counter_cannot_reach_them():
    answer = explain_config(by_name(["v1@0.32.0"])[0], SEED_VALUES)
    assert answer.verdict == "unreachable" and "k-induction" in answer.how


def test_unknown_is_never_no():
    answer = explain_config(by_name(["v2-kvfail@0.33.0"])[0], SEED_VALUES, max_depth=3)
    assert answer.verdict == "unknown" and "no proof" in answer.how


def test_the_command_ranks_mechanisms_and_writes_a_replayable_trace(tmp_path, capsys):
    from codegen.cases import build

    code = cli(
        [
            "explain",
            SEED,
            "--configs",
            "v2-kvfail@0.32.0",
            "v1@0.32.0",
            "--out",
            str(tmp_path / "explain"),
            "--from",
            str(tmp_path / "none"),
            "--report",
            str(tmp_path / "none"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "REACHED by 1 configuration(s)" in out and "PROVED UNREACHABLE in 1 configuration(s)" in out
    assert "1. kv-load-failure: 7 step(s); v2-kvfail@0.32.0" in out
    trace = tmp_path / "explain" / "v2-kvfail@0.32.0.itf.json"
    src = build(trace, user=True)  # the operator's crash as a regression case
    assert src.case.property == "counter-nonnegative" and len(src.case.steps) == 7


def test_a_configuration_that_raises_is_could_not_run_with_its_cause(monkeypatch):
    """An exception in one configuration's search is that configuration's outcome (the
    others still answer), never unreachable or unknown."""

    def broken(*args, **kwargs):
        raise RuntimeError("Z3 exception: out of memory\n(the rest of the message)")

    monkeypatch.setattr(explain, "explain_config", broken)
    answer = explain._worker(by_name(["v1@0.32.0"])[0], SEED_VALUES, 4, 1.0, 1.0)
    assert answer.verdict == explain.COULD_NOT_RUN
    assert answer.how == "RuntimeError: Z3 exception: out of memory"


def test_could_not_run_exits_3_and_its_cause_is_printed_once(monkeypatch, tmp_path, capsys):
    from model.explain import Answer

    def run(configs, *args, **kwargs):
        return [Answer(c.name, explain.COULD_NOT_RUN, 0.0, "MemoryError: no message") for c in configs]

    monkeypatch.setattr(explain, "run", run)
    code = cli(["explain", SEED, "--configs", "v1@0.32.0", "v2@0.32.0", "--out", str(tmp_path / "e")])
    out = capsys.readouterr().out
    assert code == 3
    assert "COULD NOT RUN in 2 configuration(s)" in out
    assert out.count("MemoryError: no message (2: v1@0.32.0, v2@0.32.0)") == 1
    assert "0 reach the counters, 0 proved unreachable, 0 unknown, 2 could not run" in out

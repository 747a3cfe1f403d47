"""`make explain`: the operator's counters, read in every form, reached or refuted per configuration."""

from __future__ import annotations

import json

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


def _first_lines(counters: str, configs: list[str], tmp_path, capsys, json_out: bool = False) -> str:
    argv = ["explain", counters, "--configs", *configs, "--out", str(tmp_path / "explain")]
    cli(argv + (["--json"] if json_out else []))
    return capsys.readouterr().out


def test_the_answer_comes_first_vllms_own_events_before_an_injected_fault(tmp_path, capsys):
    """The seed's counters: the stale-slot fault reaches them in fewer steps, but the
    KV-load-failure recompute, which vLLM's own events reach, is the answer; then what
    to do, each mitigation with what this run proved of it."""
    configs = ["v2-stale-slot@0.32.0", "v2-kvfail@0.32.0", "guard-v2-faults@0.32.0", "v1@0.32.0"]
    out = _first_lines(SEED, configs, tmp_path, capsys).splitlines()
    assert out[0] == (
        "most likely: kv-load-failure (vLLM's own events; vLLM 0.32.0; 7 step(s); crash "
        "(placeholders-nonnegative)); 1 other mechanism(s) can also produce these counters"
    )
    assert out[2].startswith("WHAT TO DO NOW")
    block = " ".join(out[3 : out.index("THE COUNTERS, as the spec names them:")])
    assert "`--scheduler-cls guard_scheduler.GuardAsyncScheduler`" in block
    assert "Here: proved unreachable in 1 of its 1 configuration(s)" in block
    assert "`VLLM_USE_V2_MODEL_RUNNER=0`" in block


def test_counters_only_a_fault_reaches_say_so_first(tmp_path, capsys):
    out = _first_lines(
        "placeholders=-1 new_tokens=2 prefill_chunk=False", ["v1-over-delivery@0.32.0", "v1@0.32.0"], tmp_path, capsys
    )
    assert out.splitlines()[0].startswith("most likely: over-delivery (an injected fault; vLLM 0.32.0;")


def test_counters_no_configuration_reaches_are_a_proved_no(tmp_path, capsys):
    doc = json.loads(
        _first_lines(
            "placeholders=-3 new_tokens=0 prefill_chunk=True",
            ["v1@0.32.0", "v1-kvfail@0.32.0"],
            tmp_path,
            capsys,
            json_out=True,
        )
    )
    assert doc["answer"] == "no configuration reaches these counters: 2 proved unreachable"
    assert doc["mechanisms"] == [] and {a["verdict"] for a in doc["answers"]} == {"unreachable"}


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

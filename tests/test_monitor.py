"""The contract monitor (targets/monitor/scheduler.py) on the loaded vLLM release (`--vllm`).

Every generated case is played on vLLM's scheduler with the monitor as its scheduler_cls:
it must pass as on vLLM's own AsyncScheduler (the monitor changes nothing), write nothing
on a healthy path (the negative control), write a trace wherever the case shows the
scheduler a violation it can see (an assert, or a property broken at a delivery), and
every trace it writes must be one the model reproduces (`vllm-contract explain --trace`
names its mechanism). The same in drop mode on the step-reservation guard's arms. Then:
it loads through vLLM's own SchedulerConfig.get_scheduler_cls, its window stays bounded,
a recording becomes a generated case that reproduces it on this release's scheduler,
and a recording that leaves the model is said to.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from vllm_contract.adapter import construct as vllm_factory
from vllm_contract.adapter import current as vllm_env
from vllm_contract.adapter import objects
from vllm_contract.codegen.case import predict
from vllm_contract.codegen.cases import build, from_monitor
from vllm_contract.model import hang
from vllm_contract.model.run import Run
from vllm_contract.report.explain_trace import explain_trace
from vllm_contract.spec import profiles
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import ExitStatus, TargetUnavailable
from vllm_contract.targets.harness import replay_case
from vllm_contract.targets.monitor import writer as monitor_writer
from vllm_contract.targets.monitor.core import ENV_FOLDER, ENV_WINDOW, Settings, SettingsError
from vllm_contract.targets.monitor.scheduler import MONITOR_SCHEDULER_CLS
from vllm_contract.targets.vllm_target import VllmTarget

from vllm_contract.cli import main as cli

# a vLLM tree the run cannot load stops it (the plugin's preflight), never a skip
pytestmark = pytest.mark.vllm

V = vllm_env.load()
PROFILE = vllm_env.tree().profile
RELEASE = PROFILE.removeprefix("vllm-")
RUNNER = "v1" if objects.has_v1_runner() else "v2"  # vLLM's V1 runner where the tree has it
REPO = Path(__file__).resolve().parent.parent
CASES = sorted((REPO / "generated_tests" / "cases").glob("*/test_*.py"))
# what the scheduler sees of the contract: an assert, or one of these broken at a delivery
SEEN_AT_DELIVERY = {
    "counter-nonnegative",
    "placeholder-accounting",
    "computed-nonnegative",
    "stale-drains",
    "no-token-while-prefilling",
}


def case_of(path: Path):
    return importlib.import_module(".".join(path.relative_to(REPO).with_suffix("").parts)).CASE


def must_write(case, expect) -> bool:
    """The case shows the monitor a violation: an assert fires, or a property it checks at
    a delivery is first broken at one."""
    if expect.fired:
        return True
    firsts = dict(expect.others)
    if expect.violations:
        firsts[case.property] = expect.violations[0]
    return any(prop in SEEN_AT_DELIVERY and case.steps[step - 1][0] == "deliver" for prop, step in firsts.items())


def _play(case, target, folder: Path, monkeypatch) -> list[Path]:
    monkeypatch.setenv(ENV_FOLDER, str(folder))
    try:
        ran = replay_case(case, target)  # every arm as the model predicts it: the monitor changed nothing
    except TargetUnavailable as exc:  # e.g. the V2 recompute fix's arms: its patched scheduler plays them
        pytest.skip(f"{target.name}: {exc}")
    assert ran, "the monitor's target ran no arm"
    assert monitor_writer.flush(), "the monitor's traces were not written within 10 s"
    return sorted(folder.glob("*.itf.json")) if folder.exists() else []


def _reproduced(path: Path) -> None:
    answer = explain_trace(path, every_release=False)  # tests/test_explain.py checks the releases' part
    assert answer.status == ExitStatus.OK, f"{path.name}: {answer.headline}"


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_generated_case_through_the_monitor(path, tmp_path, monkeypatch):
    case = case_of(path)
    target = VllmTarget(monitor=True)
    files = _play(case, target, tmp_path, monkeypatch)
    expect = case.arms[PROFILE][1]
    if case.kind == "witness":
        assert not files, f"a healthy path made the monitor write {[f.name for f in files]}"
    if must_write(case, expect):
        assert files, f"{case.name}: the model says vLLM {RELEASE} shows {expect} and the monitor wrote nothing"
    for file in files:
        _reproduced(file)


GUARDED = [p for p in CASES if case_of(p).kind != "witness"]


@pytest.mark.parametrize("path", GUARDED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_drop_mode_plays_the_guards_arm(path, tmp_path, monkeypatch):
    """VLLM_CONTRACT_MONITOR_DROP=1 is the step-reservation guard: the +guard arm as the
    model predicts it, the same tokens dropped; what it writes, the model reproduces."""
    case = case_of(path)
    target = VllmTarget(monitor=True, guard=True)
    for file in _play(case, target, tmp_path, monkeypatch):
        _reproduced(file)
    assert target.sched.guard_dropped == {} or _dropped_with_run_on(case, f"{PROFILE}+guard") > 0


def _dropped_with_run_on(case, label: str) -> int:
    """Tokens the model's guard drops on an arm, the engine's run on after the case included
    (the harness runs it on every target: a step the case left in flight is delivered there)."""
    overrides, expect = case.arms[label]
    cfg = case.config_for(overrides)
    steps = list(case.steps[: expect.runs])
    run = Run(cfg, case.init, steps, until_disabled=True)
    for _ in run:
        pass
    more = hang.run_on(run.interp, run.state) if not expect.fired and not case.engine_steps else []
    return predict(case.property, cfg, case.init, steps + list(more)).dropped


# ------------------------------------------------------------------- loading


def test_loads_through_vllms_own_scheduler_cls():
    from vllm_contract.targets.monitor.scheduler import MonitoredAsyncScheduler

    cfg = Config("monitor-load", runner=RUNNER, requests=1, profile=PROFILE)
    config = vllm_factory.vllm_config(vllm_factory.Shape.of(cfg, MONITOR_SCHEDULER_CLS))
    assert config.scheduler_config.scheduler_cls == MONITOR_SCHEDULER_CLS
    assert config.scheduler_config.get_scheduler_cls() is MonitoredAsyncScheduler
    assert issubclass(MonitoredAsyncScheduler, V.AsyncScheduler)
    sched = vllm_factory.new_scheduler(cfg, MONITOR_SCHEDULER_CLS)
    assert type(sched) is MonitoredAsyncScheduler and sched.monitor.release == RELEASE


def test_the_monitors_own_hooks_are_not_called_foreign_code():
    """A trace records scheduler methods that come from outside vLLM (a plugin's or a patch's);
    the monitor's own hook classes call vLLM's through super and are not among them, and a
    subclass defined elsewhere is."""
    cfg = Config("monitor-foreign", runner=RUNNER, requests=1, profile=PROFILE)
    sched = vllm_factory.new_scheduler(cfg, MONITOR_SCHEDULER_CLS)
    assert objects.foreign_methods(sched) == {}

    class Patched(type(sched)):
        def schedule(self):  # a plugin's monkeypatch, as far as the scheduler can tell
            return super().schedule()

    sched.__class__ = Patched
    assert list(objects.foreign_methods(sched)) == ["schedule"]


def test_settings_come_from_the_environment_and_bad_ones_are_one_line():
    settings = Settings.from_env({ENV_FOLDER: "/x", ENV_WINDOW: "64", "VLLM_CONTRACT_MONITOR_DROP": "1"})
    assert settings == Settings(Path("/x"), 64, True, 4)
    with pytest.raises(SettingsError, match=f"{ENV_WINDOW}='many'"):
        Settings.from_env({ENV_WINDOW: "many"})


def _engine(requests: int, prompt: int, monitor=True):
    cfg = Config("monitor-unit", runner=RUNNER, requests=requests, profile=PROFILE)
    sched = vllm_factory.new_scheduler(cfg, MONITOR_SCHEDULER_CLS if monitor else None)
    for r in range(requests):
        sched.add_request(vllm_factory.make_request(r, prompt, cfg.block_size))
    return sched


def _deliver(sched, out, tokens_of=lambda rid: [vllm_factory.SAMPLED_ID], kv=None):
    ids = list(objects.scheduled(out))
    output = objects.runner_output(ids, [list(tokens_of(r)) for r in ids])
    output.kv_connector_output = kv
    return sched.update_from_output(out, output)


def test_the_window_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_FOLDER, str(tmp_path))
    monkeypatch.setenv(ENV_WINDOW, "16")
    sched = _engine(3, 20)
    vllm_factory.set_budget(sched, 64)
    flight = []
    for _ in range(100):
        flight.append(sched.schedule())
        if len(flight) == 2:
            _deliver(sched, flight.pop(0))
    monitor = sched.monitor
    assert len(monitor.window) == 16 and monitor.evicted > 0
    assert len(monitor.in_flight) == 1 and not monitor.written


# ------------------------------------------------------------------- trace to case


def test_a_recorded_crash_becomes_a_case_of_this_release(tmp_path, monkeypatch):
    """The v2-kvfail counterexample recorded by the monitor: explain names the KV-load
    failure; generate --trace shrinks it and the case reproduces it on this release."""
    case = case_of(REPO / "generated_tests/cases/vllm_0_29_0/test_v2_kvfail__counter_nonnegative.py")
    files = _play(case, VllmTarget(monitor=True), tmp_path / "monitor", monkeypatch)
    # the first trace is the case's; on a silent release the engine run on after it may write more
    file = min(files, key=lambda f: int(f.name.rsplit("-", 1)[1].split(".")[0]))
    meta = json.loads(file.read_text())["#meta"]
    crash = profiles.of(PROFILE).asserts_counter_at_zero  # 0.33.0 on: the decrement skipped at P = 0
    assert meta["monitor"]["release"] == RELEASE and meta["config"]["runner"] == "v2"
    assert meta["violated"] == ("counter-nonnegative" if crash else "no-token-while-prefilling")
    assert meta["monitor"]["fires"] == ("placeholders-nonnegative" if crash else "")
    assert cli(["explain", "--trace", str(file)]) == ExitStatus.OK
    answer = explain_trace(file)
    assert answer.mechanisms == ["kv-load-failure"]
    assert ("crash" in answer.headline) == crash
    assert any("test_v2_kvfail__" in m for m in answer.same)

    document = from_monitor(file)
    assert document["#meta"]["derived_from"]["file"] == str(file)
    shrunk = tmp_path / "shrunk.itf.json"
    shrunk.write_text(json.dumps(document))
    src = build(shrunk, None, user=True)
    assert src.case.kind == "violation" and src.cfg.profile == PROFILE
    assert PROFILE in replay_case(src.case, VllmTarget())  # reproduces on this release's scheduler


def test_a_recording_that_leaves_the_model_is_said_to(tmp_path, monkeypatch):
    """A connector that fails a block of a request already decoding (the model's KV-load
    failure is reported with the step that loaded the block): vLLM cuts the request back
    while its next step is in flight and skips the delivered step's output, so its
    placeholders keep that step's reservation; the monitor writes at once, and again when
    a runner samples the recompute chunk. The model cannot take the failure, so each trace
    leaves it, and explain says where: a finding about the model (exit 1), no mechanism."""
    monkeypatch.setenv(ENV_FOLDER, str(tmp_path))
    sched = _engine(1, 40)
    vllm_factory.set_budget(sched, 64)
    first = sched.schedule()  # the whole prompt
    second = sched.schedule()  # a decode step
    _deliver(sched, first)
    third = sched.schedule()
    block = sched.kv_cache_manager.get_block_ids("r0")[0][1]
    _deliver(sched, second, kv=V.KVConnectorOutput(invalid_block_ids={block}))
    request = sched.requests["r0"]
    assert request.num_computed_tokens < 40  # vLLM cut it back to the failed block
    vllm_factory.set_budget(sched, 8)
    fourth = sched.schedule()  # a recompute chunk: it reserves nothing
    assert request.is_prefill_chunk
    _deliver(sched, third)
    try:
        _deliver(sched, fourth)  # the runner samples the chunk anyway
    except AssertionError:
        pass  # 0.29.0-0.32.0: the counter assert (the monitor wrote before it fired)
    assert monitor_writer.flush(), "the monitor's traces were not written within 10 s"
    files = sorted(tmp_path.glob("*.itf.json"), key=lambda f: int(f.name.rsplit("-", 1)[1].split(".")[0]))
    assert [json.loads(f.read_text())["#meta"]["violated"] for f in files][0] == "placeholder-accounting"
    for file in files:
        notes = " ".join(json.loads(file.read_text())["#meta"]["monitor"]["notes"])
        assert "a KV-load failure the trace cannot name" in notes
        answer = explain_trace(file)
        assert answer.status == ExitStatus.FINDING and "leaves the model" in answer.headline
        assert "a finding about the model" in answer.headline and not answer.mechanisms
        assert cli(["explain", "--trace", str(file)]) == ExitStatus.FINDING


@pytest.mark.parametrize("short", [1, 0], ids=["under-drained", "drained"])
def test_a_hang_is_named_once_past_the_bound(tmp_path, monkeypatch, caplog, short):
    """A preempted request whose stale output nothing will drain (the count update_from_output
    reads rewritten one short, as tpu-inference #3492's plugin did): once it has gone
    unscheduled past the bound (2 * (pp + 1) + 2 engine steps) the monitor says HANG with the
    request, the count and the bound, once, and writes one trace the model reproduces as a
    hang. The control: the same steps with the count whole, and nothing is said."""
    monkeypatch.setenv(ENV_FOLDER, str(tmp_path))
    sched = _engine(1, 2)
    vllm_factory.set_budget(sched, 64)
    first = sched.schedule()  # the whole prompt
    objects.preempt(sched, sched.requests["r0"], 0.0, False)  # its output becomes stale, in flight
    flight = [first, sched.schedule()]  # an empty step: the stale output holds it back
    objects.scheduled(first)["r0"] -= short  # the plugin's rewrite
    for _ in range(12):  # EngineCore's loop: deliver the oldest, schedule the next
        _deliver(sched, flight.pop(0))
        flight.append(sched.schedule())
    assert monitor_writer.flush()
    lines = [r.getMessage() for r in caplog.records if "HANG" in r.getMessage()]
    files = sorted(tmp_path.glob("*.itf.json"))
    if not short:
        assert not lines and not files and not sched.monitor.hung
        assert sched.requests["r0"].num_computed_tokens > 0  # it resumed
        return
    (line,) = lines
    bound = sched.monitor.bound
    assert f"HANG: request r0 on vLLM {RELEASE} has not been scheduled for" in line
    assert f"past the bound of {bound}" in line and "num_stale_output_tokens 1 > 0" in line
    (file,) = files
    meta = json.loads(file.read_text())["#meta"]
    assert meta["violated"] == "bounded-progress" and meta["monitor"]["hang"]["why"] == "stale"
    assert meta["monitor"]["hang"]["unscheduled_steps"] > bound == meta["monitor"]["hang"]["bound"]
    answer = explain_trace(file)
    assert answer.status == ExitStatus.OK and "hang: no assert fires" in answer.headline, answer.headline
    assert "under-drain" in answer.mechanisms
    assert sched.monitor.found["bounded-progress"] == 1  # said once, however long it stays stuck


@pytest.mark.parametrize("lose", [4, 0], ids=["lost", "whole"])
def test_a_lost_sample_at_max_tokens_is_named_a_hang_and_explained(tmp_path, monkeypatch, caplog, lose):
    """The tpu-inference #2833 report on vLLM's own scheduler: the output of the step that
    would reach max_tokens comes back without its token, its placeholder is never resolved,
    and the max_tokens skip passes the request over for good (RUNNING, nothing in flight).
    The monitor says HANG with the placeholder count, and explain names fault lost-sample;
    the control, every token delivered: the request finishes and nothing is said."""
    monkeypatch.setenv(ENV_FOLDER, str(tmp_path))
    cfg = Config("monitor-lost", runner=RUNNER, requests=1, profile=PROFILE, max_tokens=4)
    sched = vllm_factory.new_scheduler(cfg, MONITOR_SCHEDULER_CLS)
    sched.add_request(vllm_factory.make_request(0, 3, cfg.block_size, max_tokens=4))
    vllm_factory.set_budget(sched, 64)
    request = sched.requests["r0"]
    flight = [sched.schedule()]
    for delivery in range(1, 16):
        flight.append(sched.schedule())
        out = flight.pop(0)
        _deliver(sched, out, lambda rid, d=delivery: [] if d == lose else [vllm_factory.SAMPLED_ID])
        if request.is_finished():
            break
    assert monitor_writer.flush()
    lines = [r.getMessage() for r in caplog.records if "HANG" in r.getMessage()]
    if not lose:
        assert request.is_finished() and not lines and not list(tmp_path.glob("*bounded-progress*"))
        return
    assert not request.is_finished() and request.num_output_placeholders == 1
    (line,) = lines
    assert "running with num_output_placeholders 1 and nothing in flight" in line
    (file,) = sorted(tmp_path.glob("*bounded-progress*.itf.json"))
    answer = explain_trace(file)
    assert answer.status == ExitStatus.OK and answer.mechanisms == ["lost-sample"], answer.headline
    assert "hang: no assert fires" in answer.headline and "tpu-inference #2833" in answer.headline


def test_an_error_of_the_monitor_never_stops_the_engine(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(ENV_FOLDER, str(tmp_path))
    sched = _engine(1, 4)
    vllm_factory.set_budget(sched, 64)

    def broken(*args):
        raise KeyError("a bug of ours")

    monkeypatch.setattr(sched.monitor, "scheduled", broken)
    out = sched.schedule()  # vLLM's step goes on
    assert out.num_scheduled_tokens == {"r0": 4} and not sched.monitoring
    _deliver(sched, out)  # and so does every later one, unmonitored
    assert "stopped after an error of its own" in caplog.text


def _without(monkeypatch, internal: str):
    """The monitor's probe as on a vLLM that renamed one internal it reads."""
    from vllm_contract.adapter import internals

    real = internals.probe

    def probe(package, uses=internals.USES):
        found = real(package, uses)
        return internals.Probe(found.package, found.values, (internals.Missing(internal, "renamed in this test"),))

    monkeypatch.setattr(internals, "probe", probe)
    objects._probe.cache_clear()


def test_a_vllm_the_monitor_cannot_read_refuses_to_start_one_line_per_internal(monkeypatch):
    from vllm_contract.spec.errors import MonitorUnsupported

    _without(monkeypatch, "Request.num_output_placeholders in vllm/v1/request.py")
    try:
        with pytest.raises(MonitorUnsupported) as info:
            _engine(1, 8)
        said = str(info.value)
        assert "cannot be monitored" in said and "has no Request.num_output_placeholders" in said
        assert "VLLM_CONTRACT_MONITOR_UNSUPPORTED=warn" in said and "\n" not in said
    finally:
        monkeypatch.undo()
        objects._probe.cache_clear()


def test_with_warn_it_runs_unmonitored_and_says_why(monkeypatch, caplog):
    _without(monkeypatch, "Request.num_output_placeholders in vllm/v1/request.py")
    monkeypatch.setenv("VLLM_CONTRACT_MONITOR_UNSUPPORTED", "warn")
    try:
        sched = _engine(1, 8)
        assert not sched.monitoring and sched.monitor is None
        out = sched.schedule()  # vLLM itself runs on, unwatched
        assert objects.scheduled(out) == {"r0": 8}
    finally:
        monkeypatch.undo()
        objects._probe.cache_clear()

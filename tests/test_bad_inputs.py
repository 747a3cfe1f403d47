"""Bad input, interrupts and typos: nothing lost, nothing silent, one line.

Each test pins one behaviour that was wrong before: an output folder deleted without
looking, a partial run deleting committed cases, staging folders left behind, an
interrupt or a timeout recorded as a verdict, a contradicting trace accepted, and
tracebacks where one line naming the problem and its fix is due.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import z3
from vllm_contract.codegen import generate
from vllm_contract.codegen.cases import CaseError, build
from vllm_contract.model import prove
from vllm_contract.model.bmc import Bmc
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.induction import KInduction
from vllm_contract.model.itf import read
from vllm_contract.model.solvers import SolverInterrupted, SolverTimeout, SolverUnknown, classify_unknown
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.invariants import LEMMAS
from vllm_contract.spec.matrix import by_name

from vllm_contract import outfolder
from vllm_contract.cli import main as cli
from vllm_contract.commands.generate import cases_folder
from vllm_contract.commands.prove import out_folder

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SMALL = "v1-kvfail-leak@0.32.0"  # one request, a 3-step counterexample: the cheapest configuration
STOP_WITHIN_S = 20  # an interrupted prover stops within this (about a second on an idle machine)


def one_line(text: str) -> bool:
    return text.count("\n") == 1 and "Traceback" not in text


def dead_pid() -> int:
    """The pid of a process that has ended (for staging folders of a killed run)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> Path:
    """A real (partial) prover result: summary.json, marker and traces of SMALL."""
    out = tmp_path_factory.mktemp("proved") / "prove"
    assert cli(["prove", SMALL, "--out", str(out), "--jobs", "1"]) == 0
    return out


@pytest.fixture
def no_solving(monkeypatch):
    """Bad input must be refused before the matrix runs."""

    def refuse(*args, **kw):
        raise AssertionError("the matrix ran before the input was checked")

    monkeypatch.setattr(prove, "run_matrix", refuse)


# ------------------------------------------------------------------ prove --out


def test_out_with_a_users_file_is_refused_and_kept(tmp_path, capsys, no_solving):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert cli(["prove", SMALL, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "notes.txt" in err and "did not write" in err
    assert (out / "notes.txt").read_text() == "keep me"


def test_out_dot_is_refused(tmp_path, monkeypatch, capsys, no_solving):
    (tmp_path / "precious.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    for out in (".", "", str(tmp_path.parent)):
        assert cli(["prove", SMALL, "--out", out]) == 2
        assert one_line(capsys.readouterr().err)
    assert (tmp_path / "precious.txt").exists()


def test_out_naming_a_file_is_one_line(tmp_path, capsys, no_solving):
    target = tmp_path / "results.txt"
    target.write_text("data")
    assert cli(["prove", SMALL, "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "is a file" in err
    assert target.read_text() == "data"
    assert cli(["prove", SMALL, "--out", str(target / "sub")]) == 2  # a file where a folder is needed
    assert one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    "command",
    [
        ["explain", "placeholders=-1", "--configs", SMALL],
        ["report", "--no-check"],
        ["review", "--base", "0.32.0", "--head", "0.32.0", "--fuzz", "0"],
    ],
    ids=["explain", "report", "review"],
)
def test_an_out_that_is_a_file_is_one_line_before_any_work(command, tmp_path, capsys, monkeypatch):
    from vllm_contract.report import explain, review

    def no_work(*args, **kwargs):
        raise AssertionError("the work started before --out was checked")

    monkeypatch.setattr(explain, "run", no_work)
    monkeypatch.setattr(review, "observe_both", no_work)
    target = tmp_path / "results.txt"
    target.write_text("data")
    assert cli([*command, "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "is a file, not a folder" in err
    assert target.read_text() == "data"


def test_unwritable_out_is_found_before_solving(tmp_path, capsys, no_solving):
    assert cli(["prove", SMALL, "--out", "/proc/no-such-place/prove"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "choose another --out" in err


def test_a_previous_result_is_replaced_old_and_marked_ones(result, tmp_path):
    out = tmp_path / "prove"
    shutil.copytree(result, out)
    assert (out / outfolder.MARKER).is_file()
    assert out_folder(out).foreign_entry(out) is None
    (out / outfolder.MARKER).unlink()  # as written before the marker existed: summary.json + traces/
    assert cli(["prove", SMALL, "--out", str(out), "--jobs", "1"]) == 0
    assert (out / outfolder.MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prove"]  # no staging left


def test_summary_records_what_was_run(result):
    summary = json.loads((result / "summary.json").read_text())
    assert summary["configs"] == [SMALL] and summary["complete"] is False


def test_swap_leaves_new_results_whole_with_or_without_exchange(tmp_path, monkeypatch):
    for exchange in (True, False):
        target, staging = tmp_path / "out", tmp_path / f"out.{os.getpid()}.new"
        for folder, text in ((target, "old"), (staging, "new")):
            folder.mkdir(exist_ok=True)
            (folder / "summary.json").write_text(text)
        if not exchange:
            monkeypatch.setattr(outfolder, "_exchange", lambda a, b: False)
        outfolder.swap_in(staging, target, f"out.{os.getpid()}.old-")
        assert (target / "summary.json").read_text() == "new"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_stale_staging_of_a_dead_run_is_cleaned_a_live_ones_kept(tmp_path):
    out = tmp_path / "prove"
    dead, alive = dead_pid(), os.getppid()
    for name in (f"prove.{dead}.abcd1234", f"prove.{alive}.efgh5678", f"prove.{dead}.ijkl9012"):
        (tmp_path / name).mkdir()
        marker = {"note": "ours", "files": ["summary.json"]}
        (tmp_path / name / outfolder.MARKER).write_text(json.dumps(marker))
        (tmp_path / name / "summary.json").write_text("{}")
    (tmp_path / f"prove.{dead}.ijkl9012" / "mine.txt").write_text("not ours: kept")
    # killed between the two renames of the fallback swap: the old results go back
    (tmp_path / f"prove.{dead}.old-mnop3456").mkdir()
    (tmp_path / f"prove.{dead}.old-mnop3456" / "summary.json").write_text("old")
    out_folder(out).clean_stale()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["prove", f"prove.{alive}.efgh5678", f"prove.{dead}.ijkl9012"])  # pids sort as text
    assert (out / "summary.json").read_text() == "old"


# ------------------------------------------------------------------ interrupts


def _descendants(pid: int) -> list[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def default_sigint() -> None:
    """In the child before exec: SIGINT at its default. A test run started in the
    background by a non-interactive shell (`... &`) inherits SIGINT ignored, and Python
    then installs no KeyboardInterrupt for it: the prover under test would never see
    the Ctrl-C these tests send."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(result: Path, tmp_path: Path, sig: int, worker: bool) -> tuple[int, str, Path]:
    """Run the whole matrix on one worker into a copy of a previous result, and send
    `sig` to the prover or only to its solver worker while that one is solving."""
    out = tmp_path / "prove"
    shutil.copytree(result, out)
    before = (out / "summary.json").read_bytes()
    # an empty cache of its own: every configuration is solved, so there is a worker to hit
    # (and a run that finished some before the signal leaves nothing for the next test)
    cache = Path(tempfile.mkdtemp(prefix="interrupt-cache-"))
    proc = subprocess.Popen(
        [PY, "-m", "vllm_contract", "prove", "--out", str(out), "--jobs", "1", "--cache", str(cache)],
        cwd=ROOT,
        preexec_fn=default_sigint,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def workers() -> list[int]:  # main -> forkserver -> worker: two levels down
        return [w for f in _descendants(proc.pid) for w in _descendants(f)]

    try:
        deadline = time.time() + 30
        while time.time() < deadline and not workers():
            time.sleep(0.1)
        assert workers(), "no solver worker appeared"
        time.sleep(0.3)
        # a worker checks one configuration and exits: aim at the ones running now, and
        # again if the one hit had just finished (then the signal went nowhere)
        for _ in range(10):
            if worker:
                for pid in workers():
                    os.kill(pid, sig)
            else:
                proc.send_signal(sig)
            try:  # promptly, on a machine busy with other tests too (make test's workers)
                _, err = proc.communicate(timeout=STOP_WITHIN_S)
                break
            except subprocess.TimeoutExpired:
                assert worker, f"the prover did not stop within {STOP_WITHIN_S} s of the signal"
        else:
            raise AssertionError("the interrupted run did not stop")
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(cache, ignore_errors=True)
    assert (out / "summary.json").read_bytes() == before, "an interrupted run wrote results"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prove"], "staging left behind"
    return proc.returncode, err, out


def test_sigint_reaching_only_the_solver_worker_is_not_a_verdict(result, tmp_path):
    code, err, _ = _interrupt(result, tmp_path, signal.SIGINT, worker=True)
    assert code == 130 and "interrupted" in err and "nothing written" in err, err[-2000:]


def test_sigterm_reaching_only_the_solver_worker_stops_the_run(result, tmp_path):
    code, err, _ = _interrupt(result, tmp_path, signal.SIGTERM, worker=True)
    assert code != 0 and "nothing written" in err and "Traceback" not in err


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_prover_writes_nothing_and_cleans_up(sig, code, result, tmp_path):
    got, err, _ = _interrupt(result, tmp_path, sig, worker=False)
    assert got == code and "nothing written" in err and "Traceback" not in err


def test_an_interrupted_query_raises_interrupted_not_unknown():
    """Z3 catches SIGINT during a search and answers unknown ("interrupted from
    keyboard"): that must not become an `unknown` verdict."""
    bmc = Bmc(Encoding(Config(name="x", runner="v1", requests=1)), timeout_ms=30_000)
    xs = [z3.Int(f"hard{i}") for i in range(40)]
    bmc.solver.add(*[z3.And(x >= 0, x < 1000) for x in xs])
    bmc.solver.add(z3.Sum(*[x * x * (i + 1) for i, x in enumerate(xs)]) == 123456789)
    bmc.solver.add(z3.Sum(*[x * y for x, y in zip(xs, xs[1:])]) == 9876543)
    previous = signal.signal(signal.SIGINT, lambda *a: None)  # a stray SIGINT must not end pytest
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        with pytest.raises(SolverInterrupted):
            bmc._check([], "a hard query")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert not issubclass(SolverInterrupted, SolverUnknown)  # no `except SolverUnknown` records it


def test_canceled_is_a_timeout_only_at_the_limit():
    assert isinstance(classify_unknown("canceled", 0.2, 60_000, "q"), SolverInterrupted)
    assert isinstance(classify_unknown("interrupted from keyboard", 59, 60_000, "q"), SolverInterrupted)
    assert isinstance(classify_unknown("canceled", 60.0, 60_000, "q"), SolverTimeout)
    assert isinstance(classify_unknown("timeout", 0.5, 500, "q"), SolverTimeout)
    other = classify_unknown("incomplete quantifiers", 1, 60_000, "q")
    assert type(other) is SolverUnknown and "incomplete" in str(other)


# ------------------------------------------------------------------ timeouts


def test_a_timeout_says_which_query_the_limit_and_how_to_raise_it():
    cfg = Config(
        name="v1",
        runner="v1",
        requests=2,
        spec_tokens=1,
        events=frozenset({"preempt", "preempt-drop", "reset", "stream", "abort"}),
    )
    with pytest.raises(SolverTimeout) as info:
        KInduction(Encoding(cfg), timeout_ms=1).prove(
            ["predicates-agree"], [(lemma.name, lemma.holds) for lemma in LEMMAS if lemma.applies(cfg)]
        )
    text = str(info.value)
    assert "timeout" in text and "v1" in text and "k-induction" in text and "predicates-agree" in text
    assert "0.001 s" in text and "--timeout" in text and "canceled" not in text


def test_prove_timeout_option_reports_timeouts_as_could_not_run(tmp_path, capsys):
    assert cli(["prove", SMALL, "--out", str(tmp_path / "p"), "--jobs", "1", "--timeout", "0.001"]) == 3
    out = capsys.readouterr().out
    assert "solver timeout" in out and "--timeout" in out and "canceled" not in out


# ------------------------------------------------------------------ command lines and the matrix


@pytest.mark.parametrize(
    "args",
    [
        ["--jobs", "0"],
        ["--jobs", "-2"],
        ["--jobs", "two"],
        ["--max-depth", "0"],
        ["--max-depth", "x"],
        ["--timeout", "0"],
        ["--timeout", "soon"],
        ["--jobs", "２"],  # full-width digits: int() takes them, a person did not mean them
        ["--jobs", "1_0"],
        ["--timeout", "１.５"],
        ["--bogus"],
    ],
)
def test_prove_nonsense_arguments_are_one_line(args, capsys, no_solving, tmp_path):
    assert cli(["prove", SMALL, "--out", str(tmp_path / "p"), *args]) == 2
    assert one_line(capsys.readouterr().err)
    assert not (tmp_path / "p").exists()


def test_a_configuration_named_twice_runs_once(tmp_path, capsys):
    out = tmp_path / "p"
    assert cli(["prove", SMALL, SMALL, "--out", str(out), "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    assert f"{SMALL} named more than once" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["configs"] == [SMALL] and len(summary["results"]) == len(by_name([SMALL])[0].expect)


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("clamp", "no", "clamp must be True or False"),
        ("events", "kvfail", "not the string 'kvfail'"),
        ("faults", "over-delivery", "not the string"),
        ("requests", "2", "requests must be a whole number"),
        ("spec_tokens", 1.5, "spec_tokens must be a whole number"),
        ("max_budget", "8", "max_budget must be a whole number"),
        ("prompt_lens", "16", "prompt_lens must be None or a tuple"),
        ("expect", "proved", "expect must map"),
    ],
)
def test_a_matrix_entry_of_the_wrong_type_is_one_line(field, value, says, monkeypatch, tmp_path, capsys):
    from vllm_contract.spec import matrix

    bad = matrix.MATRIX[0].with_(**{field: value})
    monkeypatch.setattr(matrix, "MATRIX", (bad,) + matrix.MATRIX[1:])
    with pytest.raises(SpecError, match=says):
        bad.validate()
    assert cli(["prove", bad.name, "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and says in err


def test_a_list_of_events_is_taken_as_a_set():
    cfg = Config(name="x", events=["kvfail"], prompt_lens=[3, 4]).validate()
    assert cfg.events == frozenset({"kvfail"}) and cfg.prompt_lens == (3, 4)


def test_a_duplicate_configuration_name_is_named(monkeypatch):
    from vllm_contract.spec import matrix

    monkeypatch.setattr(matrix, "MATRIX", matrix.MATRIX + (matrix.MATRIX[2],))
    with pytest.raises(SpecError, match=repr(matrix.MATRIX[2].name)):
        matrix.by_name(None)


def test_an_expectation_the_properties_cannot_meet_is_refused(monkeypatch):
    """A matrix entry, or a record a trace or case carries, that expects a verdict of a
    property that does not exist or does not apply is one SpecError naming it."""
    from vllm_contract.spec import expectations, matrix

    cfg = matrix.MATRIX[0]
    for bad, words in (
        ({"no-such-property": "proved"}, "unknown property 'no-such-property'"),
        ({"counter-nonnegative": "holds"}, "must be 'proved', 'violated', 'bounded'"),
        ({"history-agrees": "proved"} if cfg.is_v1 else {"no-placeholder-input": "proved"}, "does not apply"),
    ):
        wrong = cfg.with_(expect=bad)
        with pytest.raises(SpecError, match=words):
            expectations.check(wrong)
        with pytest.raises(SpecError, match=words):
            expectations.from_record({**wrong.record(), "expect": bad})
        monkeypatch.setattr(matrix, "MATRIX", (wrong,) + matrix.MATRIX[1:])
        with pytest.raises(SpecError, match=words):
            matrix.by_name(None)
    assert expectations.check(cfg) is cfg


def test_an_unknown_keyword_in_the_matrix_is_one_line(tmp_path, monkeypatch, capsys):
    from vllm_contract import spec

    fake = tmp_path / "spec"
    fake.mkdir()
    (fake / "matrix.py").write_text(
        "from vllm_contract.spec.config import Config\n\nMATRIX = (Config(name='x', colour=1),)\n"
    )
    monkeypatch.setattr(spec, "__path__", [str(fake)] + list(spec.__path__))
    monkeypatch.delitem(sys.modules, "vllm_contract.spec.matrix", raising=False)
    assert cli(["prove", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "spec/matrix.py line 3" in err and "colour" in err and "the fields are" in err


@pytest.mark.parametrize(
    "args, says",
    [
        (["--config", "no-such-preset"], "unknown --config no-such-preset"),
        (["--cases", "0"], "--cases"),
        (["--cases", "-5"], "--cases"),
        (["--cases", "many"], "--cases"),
        (["--length", "0"], "--length"),
        (["--known", "bogus"], "unknown --known bogus"),
    ],
)
def test_fuzz_nonsense_is_one_line(args, says, capsys):
    assert cli(["fuzz", *args]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and says in err


def test_fuzz_on_ray_without_ray_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: `import ray` raises ImportError
    assert cli(["fuzz", "--ray", "local", "--cases", "1", "--out", str(tmp_path / "fuzz")]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "pip install 'vllm-contract[ray]'" in err
    assert not (tmp_path / "fuzz").exists()  # refused before any work


def test_fuzz_on_ray_at_an_address_nobody_listens_on_is_one_line_of_ours(tmp_path, capsys):
    """Ray itself retries such an address for minutes; ours is one line, before Ray is asked."""
    import socket

    with socket.socket() as probe:  # a port just free: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    out = tmp_path / "fuzz"
    assert cli(["fuzz", "--ray", f"127.0.0.1:{port}", "--cases", "1", "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert one_line(err) and f"--ray 127.0.0.1:{port}: nothing answers there" in err and "ray start --head" in err
    assert time.monotonic() - started < 30
    assert not out.exists()  # nothing was run
    assert cli(["fuzz", "--ray", "no-port-here", "--cases", "1", "--out", str(out)]) == 2
    assert one_line(capsys.readouterr().err)


def test_fuzz_resume_of_another_campaign_is_one_line(tmp_path, capsys):
    out = tmp_path / "fuzz"
    assert cli(["fuzz", "--resume", "--out", str(out)]) == 2
    assert one_line(capsys.readouterr().err)
    from vllm_contract.targets.fuzz.campaign import Campaign

    from vllm_contract.commands.fuzz import start_folder

    start_folder(out, Campaign(seed=1, cases=3, length=5, releases=("0.32.0",), presets=("v1-core",)))
    assert cli(["fuzz", "--resume", "--seed", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "drop --seed" in err


# ------------------------------------------------------------------ ITF traces


def _trace(result: Path, name: str = "placeholder-accounting") -> Path:
    """A trace of the result, found through summary.json (whatever the folder layout)."""
    summary = json.loads((result / "summary.json").read_text())
    if name == "witness":
        return result / summary["witnesses"][SMALL]["trace"]
    return result / next(r["trace"] for r in summary["results"] if r["property"] == name)


def _doc(result: Path, name: str = "placeholder-accounting") -> dict:
    return json.loads(_trace(result, name).read_text())


@pytest.mark.parametrize(
    "content, says",
    [
        (b"[1, 2]", "top level of an ITF trace must be an object"),
        (json.dumps({"#meta": {"kind": "witness"}, "states": [[1], [2]]}).encode(), "state 0 is a list"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"{not json", "not valid JSON"),
        (json.dumps({"#meta": "x", "states": [{}]}).encode(), "'#meta' must be an object"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (json.dumps({"#meta": {"kind": "witness"}, "states": [{}] * 1_000_001}).encode(), "1,000,001 states"),
        (b'{"#meta": {"kind": "witness"}, "states": [{"num_output_placeholders": [', "not valid JSON"),
    ],
    ids=[
        "a list",
        "a state list",
        "not UTF-8",
        "not JSON",
        "meta a string",
        "too deep",
        "a million steps",
        "truncated",
    ],
)
def test_malformed_itf_is_one_line(content, says, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(generate, "CASES", tmp_path / "cases")
    monkeypatch.setattr(generate, "USER_TRACES", tmp_path / "traces")
    bad = tmp_path / "bad.itf.json"
    bad.write_bytes(content)
    with pytest.raises(SpecError, match=says):
        read(bad)
    assert cli(["generate", "--trace", str(bad), "--from", str(tmp_path / "none")]) == 2
    assert one_line(capsys.readouterr().err)
    assert not (tmp_path / "traces").exists() and not (tmp_path / "cases").exists()


def _variant(doc: dict, change: str):
    """The prover's placeholder-accounting trace (v1-kvfail-leak@0.32.0), changed as a
    probe row of 2026-12-05 did; the text, since a duplicate key is not a dict's."""
    doc = json.loads(json.dumps(doc))
    meta, init, step = doc["#meta"], doc["states"][0]["mbt::nondetPicks"], doc["states"][1]["mbt::nondetPicks"]
    text = None
    if change == "violated twice":
        text = json.dumps(doc).replace(
            '"violated": "placeholder-accounting"',
            '"violated": "counter-nonnegative", "violated": "placeholder-accounting"',
        )
    elif change == "prompt_len twice":
        text = json.dumps(doc).replace('"prompt_len": [', '"prompt_len": [99], "prompt_len": [', 1)
    elif change in ("NaN", "Infinity", "1e400"):
        text = json.dumps(doc).replace('"prompt_len": [', f'"prompt_len": [{change}, ', 1)
    elif change == "config 3":
        meta["config"] = 3
    elif change == "abc":
        init["prompt_len"] = "abc"
    elif change == "true":
        init["prompt_len"] = [True]
    elif change == "full-width string":
        init["prompt_len"] = ["１６"]
    elif change == "full-width bigint":
        init["prompt_len"] = [{"#bigint": "１６"}]
    elif change == "budget true":
        step["budget"] = True
    elif change == "violated_at_step seven":
        meta["violated_at_step"] = "seven"
    elif change == "violated_at_step 99":
        meta["violated_at_step"] = 99
    elif change == "monitor requests 5":
        meta["monitor"] = {"requests": 5}
    elif change == "monitor release contradicts profile":
        meta["monitor"] = {"release": "0.33.0"}
    elif change == "config of the wrong type":
        meta["config"]["clamp"] = "no"
    return text if text is not None else json.dumps(doc)


@pytest.mark.parametrize(
    "change, says",
    [
        ("violated twice", "'#meta.violated' is given twice"),  # XT05, GT03
        ("prompt_len twice", "'states[0].mbt::nondetPicks.prompt_len' is given twice"),  # XT06
        ("config 3", "#meta.config must be an object"),  # XT08
        ("abc", 'mbt::nondetPicks prompt_len is "abc"; the spec\'s prompt_len is a whole number'),  # XT09
        ("violated_at_step seven", "#meta.violated_at_step must be a whole number"),  # XT10
        ("violated_at_step 99", "#meta.violated_at_step is 99 but the trace has"),  # XT10
        ("monitor requests 5", "#meta.monitor.requests must be a list of request ids, got 5"),  # XT10
        ("budget true", "state 1, mbt::nondetPicks budget is true"),  # XT12, GT05
        ("monitor release contradicts profile", "#meta.monitor.release is 0.33.0 but #meta.config.profile"),  # XT15
        ("NaN", "states[0].mbt::nondetPicks.prompt_len[0] is NaN"),  # XT16
        ("Infinity", "prompt_len[0] is Infinity"),  # XT17
        ("1e400", "prompt_len[0] is 1e400"),  # XT17
        ("full-width bigint", "#bigint '１６' is not a whole number in ASCII digits"),  # XT19
        ("full-width string", 'prompt_len[0] is "１６"'),  # XT20, GT05
        ("true", "prompt_len[0] is true"),  # XT21
        ("config of the wrong type", "clamp must be True or False"),
    ],
)
def test_a_malformed_trace_is_bad_input_for_explain_and_generate_alike(
    change, says, result, tmp_path, monkeypatch, capsys
):
    """explain --trace once called such files "a finding about the model" (exit 1), or
    explained the last of two #meta.violated, where generate --trace refused them or
    crashed: both read a trace in model/itf.py `read`, and both refuse it, naming the field."""
    monkeypatch.setattr(generate, "CASES", tmp_path / "cases")
    monkeypatch.setattr(generate, "USER_TRACES", tmp_path / "traces")
    bad = tmp_path / "bad.itf.json"
    bad.write_text(_variant(_doc(result), change))
    for argv in (["explain", "--trace", str(bad)], ["generate", "--trace", str(bad), "--from", str(tmp_path / "none")]):
        assert cli(argv) == 2, argv[0]
        captured = capsys.readouterr()
        assert one_line(captured.err) and says in captured.err, (argv[0], captured.err)
        assert not captured.out
    assert not (tmp_path / "traces").exists() and not (tmp_path / "cases").exists()


def test_the_unchanged_trace_is_explained_and_generated(result, tmp_path, monkeypatch, capsys):
    """The control of the test above: the prover's own trace, read the same way, passes."""
    monkeypatch.setattr(generate, "CASES", tmp_path / "cases")
    monkeypatch.setattr(generate, "USER_TRACES", tmp_path / "traces")
    good = tmp_path / "good.itf.json"
    good.write_text(_variant(_doc(result), "nothing"))
    assert cli(["explain", "--trace", str(good)]) == 0
    assert capsys.readouterr().out.startswith("for vLLM 0.32.0 (the trace's configuration, #meta.config.profile)\n")
    assert cli(["explain", "--trace", str(good), "--release", "0.33.0"]) == 2
    assert "--release 0.33.0 but the trace records 0.32.0" in capsys.readouterr().err
    assert cli(["generate", "--trace", str(good), "--from", str(tmp_path / "none")]) == 0


def test_a_trace_is_read_only_from_a_regular_file_of_bounded_size(tmp_path, capsys):
    """XT24: `explain --trace /dev/zero` grew to 10.7 GB in 10 s; a folder or a file over
    the limit is one line too, refused before anything is read."""
    from vllm_contract.model.itf import MAX_BYTES

    big = tmp_path / "big.itf.json"
    with big.open("wb") as handle:
        handle.truncate(MAX_BYTES + 1)
    for path, says in (("/dev/zero", "is a character device"), (tmp_path, "is a folder"), (big, "larger than")):
        for argv in (["explain", "--trace", str(path)], ["generate", "--trace", str(path), "--from", str(tmp_path)]):
            assert cli(argv) == 2
            err = capsys.readouterr().err
            assert one_line(err) and says in err, err


def test_a_fifo_nobody_writes_to_is_refused_at_once_not_waited_on(tmp_path):
    """XT23: a FIFO with no writer blocked `explain --trace` silently until it was killed."""
    fifo = tmp_path / "trace.itf.json"
    os.mkfifo(fifo)
    for argv in (["explain", "--trace", str(fifo)], ["explain", f"@{fifo}", "--release", "0.32.0"]):
        done = subprocess.run([PY, "-m", "vllm_contract", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and one_line(done.stderr), done.stderr
        assert "is a FIFO (a named pipe), not a regular file" in done.stderr


def test_a_trace_that_contradicts_the_spec_is_refused(result, tmp_path):
    doc = _doc(result)
    for state in doc["states"]:
        state["num_output_placeholders"] = [99]
    bad = tmp_path / "p99.itf.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(
        CaseError,
        match=r"state 0, the initial state: num_output_placeholders\[0\] "
        r"is recorded as 99, the spec gives 0",
    ):
        build(bad)
    good = tmp_path / "good.itf.json"
    good.write_text(json.dumps(_doc(result)))
    build(good)  # the prover's own trace agrees with its replay


def test_a_trace_without_meta_is_not_a_witness(result, tmp_path):
    doc = _doc(result, "witness")
    del doc["#meta"]
    bare = tmp_path / "bare.itf.json"
    bare.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match='"kind": "witness"'):
        build(bare, SMALL)
    doc["#meta"] = {"kind": "witness"}  # said explicitly, it is one
    bare.write_text(json.dumps(doc))
    assert build(bare, SMALL).case.kind == "witness"


def test_a_meta_config_of_the_wrong_type_is_refused(result, tmp_path):
    doc = _doc(result)
    doc["#meta"]["config"]["clamp"] = "no"
    bad = tmp_path / "clamp.itf.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(CaseError, match="clamp must be True or False"):
        build(bad)
    doc["#meta"]["config"]["colour"] = 1
    bad.write_text(json.dumps(doc))
    with pytest.raises(CaseError, match="unknown field"):
        build(bad)


# ------------------------------------------------------------------ export


@pytest.mark.parametrize("case", ["no_such_case*", "", "  "], ids=["E01", "E03", "blank"])
def test_export_of_no_case_is_refused_before_the_cases_are_built(case, result, tmp_path, monkeypatch, capsys):
    """E01/E03: `export --case 'no_such_case*'` worked 51 s, then named one release of five."""

    def built(*args, **kwargs):
        raise AssertionError("the cases were built before the pattern was checked")

    monkeypatch.setattr(generate, "plan", built)
    assert cli(["export", "--from", str(result), "--case", case, "--out", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err
    assert one_line(err)
    if case.strip():
        assert "for any of vLLM 0.29.0, 0.30.0, 0.31.0, 0.32.0, 0.33.0" in err and repr(case) in err
    else:
        assert "--case is empty" in err
    assert not (tmp_path / "export").exists()
    # the control: a pattern some case name matches goes on to build the cases
    with pytest.raises(AssertionError, match="the cases were built"):
        cli(["export", "--from", str(result), "--case", "v1_kvfail_leak__*", "--out", str(tmp_path / "export")])


# ------------------------------------------------------------------ codegen


@pytest.fixture
def committed(tmp_path, monkeypatch) -> Path:
    """A copy of the committed suites, and an empty user-trace folder, as codegen's own."""
    cases = tmp_path / "generated" / "cases"
    shutil.copytree(ROOT / "generated_tests" / "cases", cases, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(generate, "CASES", cases)
    monkeypatch.setattr(generate, "USER_TRACES", tmp_path / "generated" / "traces")
    return cases


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_partial_run_keeps_the_cases_of_configurations_it_did_not_run(result, committed, capsys):
    before = _snapshot(committed)
    assert cli(["generate", "--from", str(result)]) == 0
    after = _snapshot(committed)
    assert set(after) >= set(before), f"deleted: {sorted(set(before) - set(after))}"
    mine = generate.module_config
    for rel, text in before.items():
        if rel.endswith(".py") and mine(text.decode()) != SMALL:
            assert after[rel] == text, f"{rel} of a configuration not run was changed"
    assert "kept" in capsys.readouterr().out
    assert cli(["check-generated", "--from", str(result)]) == 0
    assert not [p for p in committed.parent.iterdir() if p.name.startswith(".cases.")]


def test_generate_refuses_results_that_do_not_say_what_was_run(result, tmp_path, committed, capsys):
    old = tmp_path / "old"
    shutil.copytree(result, old)
    summary = json.loads((old / "summary.json").read_text())
    del summary["configs"], summary["complete"]
    (old / "summary.json").write_text(json.dumps(summary))
    before = _snapshot(committed)
    assert cli(["generate", "--from", str(old)]) == 2
    assert one_line(capsys.readouterr().err)
    (old / "summary.json").unlink()
    assert cli(["generate", "--from", str(old)]) == 2
    assert one_line(capsys.readouterr().err)
    assert _snapshot(committed) == before


@pytest.mark.parametrize("damage", ["missing", "unreadable", "empty traces folder"])
def test_generate_from_a_summary_whose_trace_is_gone_deletes_nothing(damage, result, tmp_path, committed, capsys):
    """A summary that names a trace it does not have is a partial result: refused, every
    committed module kept (it would have deleted the configuration's cases)."""
    old = tmp_path / "old"
    shutil.copytree(result, old)
    trace = _trace(old)
    if damage == "missing":
        trace.unlink()
    elif damage == "unreadable":
        trace.write_text('{"states": [')
    else:
        shutil.rmtree(old / "traces")
        (old / "traces").mkdir()
    before = _snapshot(committed)
    assert cli(["generate", "--from", str(old)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and "make prove" in err
    assert _snapshot(committed) == before


def _fresh_summary(result: Path, tmp_path: Path, change) -> Path:
    """A copy of the result whose summary.json was changed by `change` (keeping its key)."""
    copy = tmp_path / "changed"
    shutil.copytree(result, copy)
    data = json.loads((copy / "summary.json").read_text())
    raw = change(data)  # the changed data, or raw text to write instead
    (copy / "summary.json").write_text(raw if isinstance(raw, str) else json.dumps(data))
    return copy


SUMMARY_DAMAGE = {
    "truncated": (lambda d: json.dumps(d)[:300], "not readable JSON"),
    "nested too deeply": (lambda d: "[" * 100_000 + "]" * 100_000, "not readable JSON"),
    "a list": (lambda d: "[1, 2]", "not a prover summary (a list)"),
    "no configurations": (lambda d: d.pop("configs"), "does not list the configurations"),
    "no results": (lambda d: d.update(results=[]), "lists no results"),
    "results an object": (lambda d: d.update(results={"a": 1}), "has no list of results"),
    "a row not an object": (lambda d: d.update(results=[3]), "a result is not an object"),
    "a row without its keys": (lambda d: d.update(results=[{"config": SMALL}]), "lacks expected, property, verdict"),
    "a verdict of the wrong type": (lambda d: d["results"][0].update(verdict=7), "a verdict is"),
    "a depth of the wrong type": (lambda d: d["results"][0].update(depth="x"), "depth is 'x', not int or null"),
    "events not a list": (lambda d: d["results"][0].update(events=3), "events is 3, not list"),
    "witnesses a list": (lambda d: d.update(witnesses=[1]), "'witnesses' is not an object"),
    "another prover's sources": (lambda d: d["key"].update(sources="0" * 16), "other spec or model sources"),
}


@pytest.mark.parametrize("damage", SUMMARY_DAMAGE)
@pytest.mark.parametrize("command", ["report", "generate", "diff-versions"])
def test_a_damaged_summary_is_one_line_for_every_reader(command, damage, result, tmp_path, committed, capsys):
    change, says = SUMMARY_DAMAGE[damage]
    copy = _fresh_summary(result, tmp_path, change)
    before = _snapshot(committed)
    extra = {"report": ["--out", str(tmp_path / "report"), "--no-check"], "generate": [], "diff-versions": []}
    assert cli([command, "--from", str(copy), *extra[command]]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and says in err, err
    assert _snapshot(committed) == before
    assert not (tmp_path / "report").exists()


def test_stale_codegen_staging_is_cleaned(committed):
    parent, dead = committed.parent, dead_pid()
    for name in (f".cases.{dead}.abcd1234", f".cases.{os.getppid()}.live1234"):
        (parent / name).mkdir()
    cases_folder().clean_stale()
    assert sorted(p.name for p in parent.iterdir()) == [f".cases.{os.getppid()}.live1234", "cases"]
    shutil.rmtree(parent / f".cases.{os.getppid()}.live1234")
    # killed mid-swap: the suites set aside go back
    os.rename(committed, parent / f".cases.{dead}.old-ijkl9012")
    cases_folder().clean_stale()
    assert sorted(p.name for p in parent.iterdir()) == ["cases"]


def test_sigterm_while_generating_leaves_the_suites_and_no_staging(result, committed, monkeypatch):
    before = _snapshot(committed)
    real = generate.write_all

    def killed_midway(sources, folder, *rest):
        real(sources[:1], folder)
        os.kill(os.getpid(), signal.SIGTERM)  # handled: raises in this frame
        raise AssertionError("SIGTERM did not stop the run")

    monkeypatch.setattr(generate, "write_all", killed_midway)
    assert cli(["generate", "--from", str(result)]) == 143
    assert _snapshot(committed) == before
    assert sorted(p.name for p in committed.parent.iterdir()) == ["cases"]


def test_a_user_trace_lives_beside_the_generated_cases(result, committed, tmp_path, capsys):
    """A user trace of an existing configuration: its own case name, copied into the
    user-trace folder, kept by a whole-matrix generate and not "extra" for --check."""
    mine = tmp_path / "my-repro.itf.json"
    shutil.copy(_trace(result), mine)
    assert cli(["generate", "--from", str(result), "--trace", str(mine)]) == 0
    [module] = committed.rglob("test_user__my_repro.py")
    assert (generate.USER_TRACES / "my-repro.itf.json").is_file()
    same_config = [p for p in committed.rglob("test_*.py") if generate.module_config(p.read_text()) == SMALL]
    assert len(same_config) >= 3  # its own case beside the generated ones of that configuration
    assert "test_user__my_repro.py" in (committed / "README.md").read_text()
    full = tmp_path / "full"  # the same result, as if it were the whole matrix
    shutil.copytree(result, full)
    summary = json.loads((full / "summary.json").read_text())
    summary["complete"] = True
    (full / "summary.json").write_text(json.dumps(summary))
    assert cli(["generate", "--from", str(full)]) == 0
    assert module.is_file()
    capsys.readouterr()
    assert cli(["check-generated", "--from", str(full)]) == 0
    assert "fresh" in capsys.readouterr().out


def test_a_quint_trace_with_config_is_adopted_with_its_config(result, committed, tmp_path):
    doc = _doc(result)
    doc["#meta"] = {"violated": "placeholder-accounting"}
    quint = tmp_path / "quint.itf.json"
    quint.write_text(json.dumps(doc))
    assert cli(["generate", "--from", str(result), "--trace", str(quint)]) == 2  # no config: one line
    assert cli(["generate", "--from", str(result), "--trace", str(quint), "--config", SMALL]) == 0
    copy = json.loads((generate.USER_TRACES / "quint.itf.json").read_text())
    assert copy["#meta"]["config"]["name"] == SMALL
    assert cli(["check-generated", "--from", str(result)]) == 0  # regenerates alone


# ------------------------------------------------------------------ results people post


def test_an_interrupted_run_leaves_the_previous_result_only_as_the_previous_one(tmp_path):
    """keep_previous (review, report, explain): while a run works the previous result
    waits in <out>.previous; a run stopped by SIGTERM leaves no <out> that reads as its
    own and no staging; the next complete run replaces both."""
    out = tmp_path / "review"

    def run(text: str, stop: bool = False) -> str:
        folder = outfolder.OutFolder(out, "vllm-contract review", keep_previous=True)
        try:
            with outfolder.interrupts():
                folder.begin()
                folder.write_text("summary.md", text)
                if stop:
                    os.kill(os.getpid(), signal.SIGTERM)
                folder.commit()
        except KeyboardInterrupt as exc:
            assert isinstance(exc, outfolder.Terminated)
            return folder.failed_note()
        finally:
            folder.abort()
        return "done"

    assert run("first") == "done"
    note = run("second, cut short", stop=True)
    assert note == f"{out} not written; the previous result is in {out}.previous"
    assert not out.exists()
    assert (tmp_path / "review.previous" / "summary.md").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["review.previous"]
    assert run("third") == "done"
    assert (out / "summary.md").read_text() == "third"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["review"]


def _children(pid: int) -> set[int]:
    """Every live descendant of `pid` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_solver_workers_and_their_fork_server_die_with_a_killed_parent():
    """SIGKILL cannot be handled: the fork server and a worker busy for a minute end
    within seconds only because they asked the kernel to stop them when their parent
    dies (model/workers.py, model/forkserver_guard.py)."""
    code = (
        "import time\n"
        "from vllm_contract.model.workers import isolated_pool\n"
        "pool = isolated_pool(1, preload=())\n"
        "pool.submit(time.sleep, 60).result()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        children: set[int] = set()
        while time.monotonic() < deadline and len(children) < 2:  # the fork server and the worker
            time.sleep(0.2)
            children = _children(proc.pid)
        assert len(children) >= 2, f"the pool started {len(children)} child process(es)"
        time.sleep(0.5)  # the worker is in its task
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(c) for c in children):
        time.sleep(0.2)
    assert not [c for c in children if _alive(c)], "child processes outlived their killed parent"


def test_an_interrupt_wrapped_by_ctypes_is_still_an_interrupt():
    """A SIGINT that lands while Z3 is called through ctypes can surface as a
    ctypes.ArgumentError naming KeyboardInterrupt, under one of Z3's own errors: that is
    the signal's doing, never an error of the configuration."""
    import ctypes

    from vllm_contract.model.prove import _interrupt_in

    try:
        try:
            raise ctypes.ArgumentError("argument 1: KeyboardInterrupt: ")
        except ctypes.ArgumentError as inner:
            raise AssertionError("not self.eq(val.sort())") from inner
    except AssertionError as exc:
        assert _interrupt_in(exc)
    assert not _interrupt_in(ValueError("a real error"))

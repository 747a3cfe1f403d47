"""Per generated V2 case: where the snapshot kernel disagrees with the scheduler's
reservation, does the live kernel agree?

    .venv/bin/python bench/kernel_agreement.py

Replays every generated case whose runner is V2 (as found, clamp off) on the kernel
target and lists, per case, the steps at which each kernel variant's decision differs
from what the scheduler reserved (reserved 0 = the scheduler expects a discard). "live
fixes it" means live agreed at every step where snapshot did not.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from model.interpreter import args_for, flat  # noqa: E402
from targets.kernel import KernelTarget  # noqa: E402


def cases():
    for path in sorted((ROOT / "generated_tests" / "cases").rglob("test_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield path.relative_to(ROOT), module.CASE


def disagreements(case):
    overrides = {"clamp": False}
    cfg = case.config_for(overrides)
    target = KernelTarget()
    target.reset(cfg, flat(case.init))
    snapshot, live = [], []
    from model.interpreter import Interpreter

    it = Interpreter(cfg)
    state = it.initial(**case.init)
    for index, (event, named) in enumerate(case.steps):
        args = args_for(it.event(event), cfg, named)
        if not it.enabled(state, event, args):
            break
        result = it.step(state, event, args)
        state = result.state
        outcome = target.step(event, args)
        if outcome.observed.get("snapshot_disagrees"):
            snapshot.append(index + 1)
        if outcome.observed.get("live_disagrees"):
            live.append(index + 1)
        if any(not ok for ok in result.checks.values()) and any(
            name
            in (
                "counter-nonnegative",
                "safe-frontier-nonnegative",
                "stale-count-nonnegative",
                "scheduled-tokens-positive",
                "padding-intact",
            )
            and not ok
            for name, ok in result.checks.items()
        ):
            break  # the engine is dead
    return snapshot, live


def main() -> int:
    console = Console(width=140, highlight=False)
    table = Table(title="V2 cases: steps where each kernel disagrees with the scheduler's reservation")
    for col in ("case", "snapshot disagrees at", "live disagrees at", "verdict"):
        table.add_column(col)
    for path, case in cases():
        if case.config["runner"] not in ("v2", "v2-live"):
            continue
        snapshot, live = disagreements(case)
        if not snapshot and not live:
            verdict = "both agree"
        elif snapshot and not set(snapshot) & set(live):
            verdict = "live fixes it"
        elif not snapshot:
            verdict = "only live disagrees"
        else:
            verdict = "live still disagrees"
        table.add_row(str(path.name), ", ".join(map(str, snapshot)) or "-", ", ".join(map(str, live)) or "-", verdict)
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

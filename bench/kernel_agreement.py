"""Per generated V2 case: where the snapshot kernel disagrees with the scheduler's
reservation, does the live kernel agree?

    vllm-contract bench kernel-agreement

Replays every generated case whose runner is V2 (as found, clamp off) on the kernel
target and lists, per case, the steps at which each kernel variant's decision differs
from what the scheduler reserved (reserved 0 = the scheduler expects a discard). "live
fixes it" means live agreed at every step where snapshot did not.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from model.interpreter import flat
from model.run import Run
from targets.kernel import KernelTarget

ROOT = Path(__file__).resolve().parent.parent


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
    run = Run(cfg, case.init, case.steps, until_disabled=True)  # ends where an assert fires: the engine is dead
    target.reset(cfg, flat(run.init))
    snapshot, live = [], []
    for played in run:
        outcome = target.step(played.event, played.args, played)
        if outcome.facts.get("snapshot_disagrees"):
            snapshot.append(played.number)
        if outcome.facts.get("live_disagrees"):
            live.append(played.number)
    return snapshot, live


def main(argv=None) -> int:
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

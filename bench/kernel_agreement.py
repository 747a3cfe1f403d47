"""Per generated V2 case: where the snapshot kernel disagrees with the scheduler's
reservation, does the live kernel agree?

    vllm-contract bench kernel-agreement [--small]

Replays every generated case whose runner is V2 (as found, clamp off) on the kernel
target and lists, per case, the steps at which each kernel variant's decision differs
from what the scheduler reserved (reserved 0 = the scheduler expects a discard). "live
fixes it" means live agreed at every step where snapshot did not.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table
from vllm_contract.model.interpreter import flat
from vllm_contract.model.run import Run
from vllm_contract.targets.kernel import KernelTarget

ROOT = Path(__file__).resolve().parent.parent


def cases():
    from vllm_contract.bench import generated_cases

    return generated_cases()


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
    import argparse

    parser = argparse.ArgumentParser(prog="vllm-contract bench kernel-agreement", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--small",
        action="store_true",
        help="two V2 cases (a check that it runs)",
    )
    args = parser.parse_args(argv)
    console = Console(width=140, highlight=False)
    shown = 0
    table = Table(title="V2 cases: steps where each kernel disagrees with the scheduler's reservation")
    for col in ("case", "snapshot disagrees at", "live disagrees at", "verdict"):
        table.add_column(col)
    for path, case in cases():
        if case.config["runner"] not in ("v2", "v2-live"):
            continue
        if args.small and shown == 2:
            break
        shown += 1
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

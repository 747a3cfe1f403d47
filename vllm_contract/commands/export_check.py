"""The exported tests (`vllm-contract export`) run in the release's own vLLM test tree.

Copies build/export/<release>/ into .vllm_trees/tests-<release>/tests/v1/core/ (from
the hash-pinned sdist) and runs the modules there on the release and on the release
with the step-reservation guard: every violation test must fail on the release at the
predicted assert and step and pass with the guard where the model says the guard
removes it, every control pass on both, a copy with its violating step removed be
caught, and every module be ruff-clean under the release's own configuration
(fixes/export_check.py). Results in bench/results/export/<release>.txt and .json.
"""

from __future__ import annotations

from pathlib import Path

from vllm_contract.spec.errors import ExitStatus

NAME = "export-check"
HELP = "run the exported tests in vLLM's own test tree, on the release and with the guard"
STATUSES = {
    ExitStatus.OK: "every test as predicted, the broken copy caught, ruff clean",
    ExitStatus.FINDING: "something is not as predicted (each problem on one line)",
    ExitStatus.TREE: "the release's test tree or the patched tree could not be had",
}


def add_arguments(parser) -> None:
    from vllm_contract.commands.export import RELEASES

    parser.add_argument("release", choices=RELEASES)
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/export")


def run(args) -> int:
    from vllm_contract.fixes import export_check

    argv = [args.release] + (["--out", str(args.out)] if args.out else [])
    return export_check.main(argv)

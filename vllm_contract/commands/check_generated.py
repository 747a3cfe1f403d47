"""Fail, with a summary of the differences, when generated_tests/cases/ is not what generating would write.

Regenerates from the prover's traces (--from) and the committed user traces in a
temporary folder and compares; writes nothing. A partial prover run compares only the
configurations it ran.
"""

from __future__ import annotations

from pathlib import Path

from vllm_contract.commands import generate
from vllm_contract.spec.errors import ExitStatus
from vllm_contract.spec.heartbeat import to_stderr

NAME = "check-generated"
HELP = "fail when the committed generated suites are stale"
STATUSES = {
    ExitStatus.OK: "the committed suites are what generating would write",
    ExitStatus.FINDING: "they are stale: run `make generate` and commit the result",
    ExitStatus.BAD_INPUT: "bad input (a stale or partial prover result, a malformed trace)",
}


def add_arguments(parser) -> None:
    generate.add_arguments(parser, check=True)


def run(args) -> int:
    from vllm_contract.codegen.generate import CASES, check, plan
    from vllm_contract.model.prove import import_matrix

    import_matrix()
    work = plan(Path(args.prove_dir), [], None, committed=CASES, progress=to_stderr)
    return ExitStatus.FINDING if check(work.sources, CASES, work.configs) else ExitStatus.OK

"""Turn the prover's traces (and user traces) into pytest modules under generated_tests/cases/.

Reads the ITF traces under --from (a prover result) and writes one module per
counterexample class and per witness, plus every user trace of generated_tests/traces/.
The suites are written into a staging folder and swapped in whole: a crash, Ctrl-C or
SIGTERM never leaves a half-written suite. A partial prover run replaces only the cases
of the configurations it ran; a summary that names a trace that is missing is refused,
so nothing is deleted because a trace was lost.

User traces: --trace FILE copies an ITF trace of your own into generated_tests/traces/
and generates generated_tests/cases/<profile>/test_user__<file name>.py (see
codegen/generate.py for the format).
"""

from __future__ import annotations

from pathlib import Path

from vllm_contract.outfolder import OutFolder, interrupts, stopped
from vllm_contract.spec.errors import ExitStatus, UsageError
from vllm_contract.spec.heartbeat import to_stderr

NAME = "generate"
HELP = "write the generated suites from the prover's traces and user traces"
STATUSES = {
    ExitStatus.OK: "the suites were written",
    ExitStatus.BAD_INPUT: "bad input (a stale or partial prover result, a malformed trace): nothing written",
    ExitStatus.INTERRUPTED: "interrupted: generated_tests/cases left as it was",
    ExitStatus.TERMINATED: "terminated: generated_tests/cases left as it was",
}


def add_arguments(parser, check: bool = False) -> None:
    parser.add_argument("--from", dest="prove_dir", default="build/prove", help="the prover's result folder")
    if not check:
        parser.add_argument(
            "--trace",
            action="append",
            default=[],
            help="a user ITF trace to turn into a case (copied into generated_tests/traces/)",
        )
        parser.add_argument("--config", help="configuration of the --trace files (default: their #meta)")


def cases_folder() -> OutFolder:
    from vllm_contract.codegen.generate import CASES

    return OutFolder(CASES, "vllm-contract generate", owned=True, hidden=True)


def run(args) -> int:
    from vllm_contract.codegen.generate import CASES, _shown, adopt, plan, write_all
    from vllm_contract.model.prove import import_matrix

    if args.config and not args.trace:
        raise UsageError("--config names the configuration of --trace files; give --trace FILE too")
    folder, created, done = None, [], False
    try:
        with interrupts():
            import_matrix()
            folder = cases_folder()
            folder.clean_stale()
            extra = adopt([Path(p) for p in args.trace], args.config, created=created) if args.trace else []
            work = plan(
                Path(args.prove_dir),
                extra,
                args.config,
                committed=CASES,
                progress=to_stderr,
            )
            staging = folder.begin()
            write_all(work.sources, staging, work.kept, work.kept_rows)
            folder.commit()
            done = True
    except KeyboardInterrupt as exc:
        return stopped(exc, "generated_tests/cases left as it was")
    finally:
        if folder is not None:
            folder.abort()
        if not done:  # a trace copied for a run that did not happen is not left behind
            for path in created:
                path.unlink(missing_ok=True)
    kept = sum(1 for rel in work.kept if rel.endswith(".py"))
    note = "" if work.configs is None else f"; kept {kept} module(s) of configurations this run did not cover"
    print(f"wrote {len(work.sources)} case(s) to {_shown(CASES)}{note}")
    return ExitStatus.OK

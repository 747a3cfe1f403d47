"""The prover's counterexamples as tests of vLLM's own suite: paste one into tests/v1/core/.

Writes build/export/<release>/test_contract_<case>.py for every scheduler-level case
whose property the release violates: each imports only vllm, pytest and vLLM's own
test helpers (tests/v1/core/utils.py), drives the AsyncScheduler with hand-built
ModelRunnerOutputs (the runner's decisions, each commented with its rule), asserts the
property at the step the model says it breaks, and carries the configuration's
healthy path as its control. README.md lists what was left out and why;
expected.json is what `make export-check` requires of each test on vLLM's code. The
folder is replaced whole (from build/prove; run `make prove` first).
"""

from __future__ import annotations

import sys
from pathlib import Path

from vllm_contract.fixes.trees import PATCHED
from vllm_contract.outfolder import STOPS, OutFolder, interrupts, stopped
from vllm_contract.spec.errors import ExitStatus, UsageError

NAME = "export"
HELP = "write the counterexamples as tests of vLLM's own test suite (build/export/<release>/)"
STATUSES = {
    ExitStatus.OK: "written",
    ExitStatus.BAD_INPUT: "no prover result, an unknown release, or nothing matched --case (refused before the "
    "cases are built when no case name matches): nothing written",
    ExitStatus.INTERRUPTED: "interrupted: the previous export left as it was",
}
# every release with a guard patch (fixes/trees.py), each with its pinned sdist (tests/v1/core/)
RELEASES = PATCHED["step-reservation-guard"]


def add_arguments(parser) -> None:
    parser.add_argument("--from", dest="prove_dir", default="build/prove", help="the prover's result folder")
    parser.add_argument("--release", action="append", choices=RELEASES, help="default: every one")
    parser.add_argument("--case", default="*", help="a glob over case names, e.g. 'v2_kvfail__*'")
    parser.add_argument("--out", default="build/export", help="the folder of the per-release folders")


def run(args) -> int:
    from fnmatch import fnmatch

    from vllm_contract.codegen.export import case_names, export_release
    from vllm_contract.codegen.generate import plan

    prove_dir = Path(args.prove_dir)
    releases = args.release or RELEASES
    asked = f"vLLM {', '.join(releases)}"
    if not (prove_dir / "summary.json").is_file():
        raise UsageError(f"{prove_dir}/summary.json does not exist: run `make prove` first")
    if not args.case.strip():
        raise UsageError(
            "--case is empty: give a glob over case names, e.g. 'v2_kvfail__*' (or leave it out: every case)"
        )
    if not any(fnmatch(name, args.case) for name in case_names(prove_dir)):
        raise UsageError(
            f"no case of {prove_dir} matches {args.case!r}, for any of {asked}; the names look like "
            "'v2_kvfail__counter_nonnegative' (generated_tests/cases/README.md lists them)"
        )
    sources = plan(prove_dir, [], None).sources
    exports = {release: export_release(sources, release, args.case) for release in releases}
    if not any(done for _files, done, _left in exports.values()):
        raise UsageError(
            f"no case matching {args.case!r} is exportable for any of {asked} (the README.md of an export says "
            "why a case is not)"
        )
    for release, (files, done, left) in exports.items():
        if not done:
            print(f"export: no case matching {args.case!r} is exportable for vLLM {release}: nothing written for it")
            continue
        folder = OutFolder(Path(args.out) / release, "vllm-contract export")
        try:
            with interrupts():
                folder.check()
                folder.begin()
                for name, text in sorted(files.items()):
                    folder.write_text(name, text)
                folder.commit()
        except STOPS as exc:
            return stopped(exc, folder.failed_note())
        finally:
            folder.abort()
        print(f"export: {folder.path}/: {len(done)} module(s); {len(left)} case(s) not exported (README.md says why)")
    sys.stdout.flush()
    return ExitStatus.OK

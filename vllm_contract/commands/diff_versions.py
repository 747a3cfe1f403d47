"""Per scenario and property, the verdict and vLLM's reaction on two releases side by side, changes first.

Reads the prover's summary.json (--from): "CRASH" (an assert kills the engine at the
violating step), "SILENT" (violated, nothing fires), "holds" (proved), or "none found"
(no counterexample within the search depth, no proof claimed). Each changed row names
the generated test that shows it.
"""

from __future__ import annotations

from pathlib import Path

from vllm_contract.spec.errors import ExitStatus, UsageError

NAME = "diff-versions"
HELP = "what changed between two vLLM releases: verdicts and vLLM's reaction"
STATUSES = {
    ExitStatus.OK: "the table was printed",
    ExitStatus.BAD_INPUT: "bad input (an unknown release, a missing, empty or stale summary.json)",
}


def add_arguments(parser) -> None:
    from vllm_contract.spec.profiles import RELEASES

    releases = [p.release for p in RELEASES]
    parser.add_argument("a", nargs="?", default=releases[0], help=f"a release ({', '.join(releases)})")
    parser.add_argument("b", nargs="?", default=releases[-1], help="the other release")
    parser.add_argument("--from", dest="prove_dir", default="build/prove", type=Path)


def run(args) -> int:
    from vllm_contract.model.results import load_summary
    from vllm_contract.report.diff_versions import render, table
    from vllm_contract.spec.profiles import RELEASES

    releases = [p.release for p in RELEASES]
    for release in (args.a, args.b):
        if release not in releases:
            raise UsageError(f"no release profile for vLLM {release}; known: {', '.join(releases)}")
    summary = load_summary(args.prove_dir)
    changed, same = table(summary, args.a, args.b)
    path = args.prove_dir / "summary.json"
    if not changed and not same:
        raise UsageError(f"{path} holds no configuration of {args.a} or {args.b}: run `make prove`")
    print(render(changed, same, args.a, args.b))
    if not summary.get("complete", True):
        print(
            f"\nnote: {path} is from a partial run ({', '.join(summary.get('configs', []))}); "
            "`make prove` checks the whole matrix"
        )
    return ExitStatus.OK

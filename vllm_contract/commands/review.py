"""What a change to vLLM fixes and breaks: BASE against HEAD, each a release or the path of a vLLM tree.

Runs on both trees, each in a process of its own (one vLLM tree per process): every
known counterexample and healthy path (the generated cases, on the arms of each tree's
profile, clamp off and on) and a short fuzz (N random traces per fuzz preset, drawn once
from the head's model and replayed on both). For each it records what vLLM itself does,
whatever the model predicts, then compares base with head (report/review.py) and
re-anchors every citation in both trees. Writes --out/summary.md (one PR comment),
summary.json, base.json and head.json; while a run works the previous review waits in
<out>.previous, so a failed review leaves no summary.md that reads as its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from vllm_contract.outfolder import STOPS, OutFolder, interrupts, stopped
from vllm_contract.parsing import whole
from vllm_contract.spec.errors import ContractError, ExitStatus, UsageError
from vllm_contract.spec.heartbeat import to_stderr

NAME = "review"
HELP = "what a vLLM change fixes and breaks: every case, healthy path and a short fuzz on both trees"
STATUSES = {
    ExitStatus.OK: "head breaks nothing base did not",
    ExitStatus.FINDING: "head breaks something base did not (summary.md says what, first)",
    ExitStatus.BAD_INPUT: "bad input (an unknown tree, a bad --fuzz, an --out that is not ours)",
    ExitStatus.COULD_NOT_RUN: "an observer crashed, or some arms could not run (counted apart, never as fixed)",
    ExitStatus.TREE: "a tree does not load or cannot be driven (one line, the cause and the fix)",
    ExitStatus.INTERRUPTED: "interrupted: the previous review is in <out>.previous",
    ExitStatus.TERMINATED: "terminated: the previous review is in <out>.previous",
}
COMMENT_LIMIT = 65_536


def add_arguments(parser) -> None:
    parser.add_argument("--base", required=True, help="0.32.0, 0.33.0 or the path of a vLLM tree")
    parser.add_argument("--head", required=True, help="0.32.0, 0.33.0 or the path of a vLLM tree")
    parser.add_argument("--fuzz", type=whole(0), default=3, help="random traces per fuzz preset (0: none)")
    parser.add_argument("--seed", type=whole(0), default=7)
    parser.add_argument(
        "--cases",
        default="*",
        metavar="GLOB",
        help="only the generated modules whose name or path matches (default: every one)",
    )
    parser.add_argument("--out", type=Path, default=Path("build/review"))
    parser.add_argument(
        "--from",
        dest="prove_dir",
        default="build/prove",
        help="the prover's result folder, for the exported vLLM tests of the violated cases",
    )


log = to_stderr


def run(args) -> int:
    from vllm_contract.adapter.tree import resolve
    from vllm_contract.report import review
    from vllm_contract.report.observe import case_modules

    started = time.monotonic()
    if not case_modules(args.cases):
        raise UsageError(f"--cases {args.cases!r} matches no generated module (see generated_tests/cases/)")
    trees = {}
    for side in ("base", "head"):
        try:
            trees[side] = resolve(getattr(args, side))
        except ContractError as exc:  # a tree that cannot even be named is bad input
            raise UsageError(f"--{side}: {exc}") from None
    folder = OutFolder(
        args.out,
        "vllm-contract review",
        bare=("summary.md", "summary.json", "base.json", "head.json", "fuzz-traces.json"),
        keep_previous=True,
    )
    try:
        with interrupts():
            staging = folder.begin()  # a review that fails from here leaves an earlier summary as the previous one
            # the head first, then the base: each tree's source read for every internal the observer
            # reads, before either is loaded (a tree the adapter does not know stops here, in seconds)
            for side in ("head", "base"):
                review.check_source(side, trees[side])
            log(
                f"review: base {trees['base'].title} (profile {trees['base'].profile}), "
                f"head {trees['head'].title} (profile {trees['head'].profile})"
            )
            traces = review.fuzz_traces(trees["head"].profile, args.fuzz, args.seed) if args.fuzz else []
            traces_file = folder.write_text("fuzz-traces.json", json.dumps(traces) + "\n")
            for name in ("base.json", "head.json"):
                folder.adopt(name)
            log(f"review: {len(traces)} fuzz trace(s) drawn; observing both trees (two processes, one tree each)")
            base, head = review.observe_both(args.base, args.head, traces_file, staging, args.cases)
            log("review: re-anchoring the citations in both trees")
            cites = review.compare_cites(
                review.cite_view(Path(base["tree"]["root"]), review.release_of(base["tree"])),
                review.cite_view(Path(head["tree"]["root"]), review.release_of(head["tree"])),
            )
            cmp = review.compare(base, head)
            exported = review.exported_tests(cmp, head["tree"]["profile"], Path(args.prove_dir))
            seconds = time.monotonic() - started
            text = review.summary_md(base, head, cmp, cites, seconds, args.fuzz, exported=exported)
            rows, shown = 60, 2
            while len(text) > COMMENT_LIMIT and (rows > 5 or shown):
                rows, shown = (rows // 2, shown) if rows > 5 else (rows, shown - 1)
                text = review.summary_md(base, head, cmp, cites, seconds, args.fuzz, rows, exported, shown)
            folder.write_text("summary.md", text)
            record = {"base": base["tree"], "head": head["tree"], "compare": cmp, "citations": cites}
            folder.write_text("summary.json", json.dumps(record, indent=1) + "\n")
            folder.commit()
    except STOPS as exc:
        return stopped(exc, folder.failed_note())
    finally:
        folder.abort()
    print(text)
    log(f"review: wrote {args.out}/summary.md ({len(text)} characters) and summary.json in {seconds:.0f} s")
    status, first = review.outcome(cmp, head["tree"])
    log(f"review: {first.replace('**', '')}")
    return status

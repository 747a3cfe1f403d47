"""Write the prover's results as a report: index.md (one PR comment) and a page per counterexample.

Writes, under --out:
  index.md       the summary: the verdict table (configuration, property, verdict, scope,
                 vLLM's reaction: crash / silent / holds) and the counterexamples with
                 links to their pages; it fits one GitHub PR comment (65,536 characters)
  pages/CONFIG/PROPERTY.md
                 one page per counterexample: what goes wrong, a Mermaid sequence diagram,
                 the variables that change, the vLLM lines, the one-line reproduction
  html/          every page rendered (Markdown + Mermaid as SVG) by report/check.mjs
  check.json     what the renderer said: pages, diagrams, errors, versions

--link-base URL makes the summary's links absolute (URL/pages/...), for a PR comment
whose pages live elsewhere. The folder is swapped in whole; while a run works the
previous report waits in <out>.previous, so a run that fails leaves no index.md that
reads as its own. A summary.json that is missing, empty or older than spec/ and model/
is refused: run the prover again.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from vllm_contract.outfolder import STOPS, OutFolder, interrupts, stopped
from vllm_contract.spec.errors import CouldNotRun, ExitStatus
from vllm_contract.spec.heartbeat import to_stderr
from vllm_contract.spec.verdicts import Kind

NAME = "report"
HELP = "write build/report: the verdict table, a page per counterexample, every diagram rendered"
STATUSES = {
    ExitStatus.OK: "written, and every diagram renders",
    ExitStatus.FINDING: "written, but a diagram does not render (check.json names it)",
    ExitStatus.BAD_INPUT: "bad input (a missing, empty or stale summary.json, an --out that is not ours)",
    ExitStatus.COULD_NOT_RUN: "written, but a verdict is unknown (the page says which); or the renderer or "
    "the writing failed",
    ExitStatus.INTERRUPTED: "interrupted: the previous report is in <out>.previous",
    ExitStatus.TERMINATED: "terminated: the previous report is in <out>.previous",
}
LEGACY_MARKER = ".report"  # what report.render wrote before the command existed


def add_arguments(parser) -> None:
    parser.add_argument("--from", dest="prove_dir", default="build/prove", type=Path, help="the prover's result folder")
    parser.add_argument("--out", default="build/report", type=Path)
    parser.add_argument(
        "--link-base",
        default=os.environ.get("REPORT_LINK_BASE", ""),
        help="prefix for the summary's page links (default: relative)",
    )
    parser.add_argument("--no-check", action="store_true", help="write the Markdown only; do not render it")


progress = to_stderr


def run(args) -> int:
    from vllm_contract.model.results import load_summary
    from vllm_contract.report.data import counterexamples, exported_tests, generated_modules
    from vllm_contract.report.render import COMMENT_LIMIT, write_report

    started = time.perf_counter()
    folder = OutFolder(
        args.out,
        "vllm-contract report",
        legacy_markers=(LEGACY_MARKER,),
        legacy_unlisted=("html/",),
        keep_previous=True,
    )
    try:
        with interrupts():
            folder.check()
            summary = load_summary(args.prove_dir)
            folder.begin()
            progress(f"report: replaying the counterexamples of {args.prove_dir}/summary.json")
            modules = generated_modules()
            cxs = counterexamples(summary, args.prove_dir, modules)
            exported = exported_tests(cxs, modules, args.prove_dir)
            sizes = write_report(summary, cxs, args.prove_dir, folder, args.link_base, exported)
            progress(
                f"report: index.md {sizes['index_chars']} characters (limit {COMMENT_LIMIT}), {sizes['pages']} page(s)"
            )
            status = ExitStatus.OK
            if not args.no_check:
                from vllm_contract.report.check import RenderError, render_all

                try:
                    result = render_all(folder.staging, folder.staging / "html")
                except RenderError as exc:
                    raise CouldNotRun(str(exc)) from None
                for path in sorted((folder.staging / "html").rglob("*")):
                    if path.is_file():
                        folder.adopt(path.relative_to(folder.staging).as_posix())
                folder.write_text("check.json", json.dumps(result, indent=1) + "\n")
                progress(
                    f"report: rendered {result['diagrams']} diagram(s) on {result['pages']} page(s) with Mermaid "
                    f"{result['mermaid']} in {result['chromium']} ({result['seconds']:.1f} s)"
                )
                for e in result["errors"]:
                    print(
                        f"error: {args.out}/{e['page']}, diagram {e['diagram']}: {e['message'].splitlines()[0]}",
                        file=sys.stderr,
                    )
                status = ExitStatus.FINDING if result["errors"] else ExitStatus.OK
            folder.commit()
    except STOPS as exc:
        return stopped(exc, folder.failed_note())
    finally:
        folder.abort()
    print(f"wrote {args.out}/index.md and {sizes['pages']} page(s) in {time.perf_counter() - started:.1f} s")
    undecided = [r for r in summary["rows"] if r.verdict.kind is Kind.UNKNOWN]
    if undecided:
        print(
            f"error: {len(undecided)} verdict(s) could not be decided (unknown), e.g. {undecided[0].config} "
            f"{undecided[0].property}: the report says so; rerun `make prove` with a longer --timeout",
            file=sys.stderr,
        )
        return ExitStatus.COULD_NOT_RUN
    return status

"""`make report`: the prover's results as a report a reviewer reads in a minute.

    python -m report.render [--from build/prove] [--out build/report] [--link-base URL] [--no-check]

Writes, under --out:
  index.md       the summary: the verdict table (configuration, property, verdict, scope,
                 vLLM's reaction: crash / silent / holds) and the counterexamples with
                 links to their pages; it fits one GitHub PR comment (65,536 characters)
  pages/CONFIG/PROPERTY.md
                 one page per counterexample: what goes wrong in one sentence, a Mermaid
                 sequenceDiagram of the interleaving, the variables that change, the vLLM
                 lines (links to the release's tagged source), the one-line reproduction
  html/          every page rendered (Markdown + Mermaid as SVG) by report/check.mjs
  check.json     what the renderer said: pages, diagrams, errors, versions

--link-base URL makes the summary's links absolute (URL/pages/...), for a PR comment
whose pages live elsewhere (a CI artifact, a branch). The folder is written beside
--out and swapped in whole; an --out holding files this tool did not write is refused.
Exit 0 when written and every diagram renders; 1 when a diagram does not render (the
report is still written, check.json names the diagram); 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from report.data import Counterexample, ReportError, config_of, counterexamples, load_summary
from report.mermaid import diagram
from report.story import LEGEND, change_table, sentence, violations_by_step, vllm_lines
from spec.citations import in_words
from spec.properties import ASSERTS, PROPERTIES

COMMENT_LIMIT = 65_536  # GitHub's limit for one comment body
MARKER = ".report"  # lists what this tool wrote: only such a folder is replaced


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(cell(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows[1:]]
    return out


# ------------------------------------------------------------------ verdicts


def reaction(row: dict) -> str:
    """vLLM's reaction as the summary shows it: crash (with the assert), silent, holds."""
    verdict = row.get("verdict")
    if verdict == "proved":
        return "holds"
    if verdict == "bounded":
        return "holds as far as searched"
    if verdict == "violated":
        how = row.get("reaction") or ""
        if how.startswith("crash"):
            name = how.split(": ", 1)[-1]
            statement = ASSERTS[name].statement if name in ASSERTS else None
            return f"**crash** (`{statement}`)" if statement else f"**crash** ({name})"
        return "**silent**"
    return f"**{verdict}**"


def scope(row: dict) -> str:
    """What the verdict covers: its depth (all depths for a proof, the length of the
    counterexample, the search bound) and the sizes it holds for: the row's own `scope`
    when the prover writes one, else the configuration's."""
    depth, verdict = row.get("depth"), row.get("verdict")
    if verdict == "proved":
        what = f"all depths (k={depth})"
    elif verdict == "violated":
        what = f"at {depth} steps"
    elif verdict == "bounded":
        what = f"none within {depth} steps"
    else:
        what = (row.get("note") or "")[:60]
    given = row.get("scope")
    if isinstance(given, dict):
        size = ", ".join(
            f"{k} {'/'.join(map(str, v)) if isinstance(v, (list, tuple)) else v}" for k, v in given.items()
        )
    elif isinstance(given, (list, tuple)):
        size = ", ".join(map(str, given))
    elif given:
        size = str(given)
    else:
        try:
            cfg = config_of(row)
            size = f"requests {cfg.requests}, spec_tokens {cfg.spec_tokens}, pp {cfg.pp}"
        except ReportError:
            size = ""
    return f"{what}; {size}" if size else what


def link(base: str, rel: str) -> str:
    return f"{base.rstrip('/')}/{rel}" if base else rel


def summary_md(summary: dict, cxs: list[Counterexample], base: str, compact: bool = False) -> str:
    rows = summary["results"]
    by_trace = {(c.row["config"], c.prop): c for c in cxs if c.index == 0}
    counts = {v: sum(r.get("verdict") == v for r in rows) for v in ("proved", "violated", "bounded", "unknown")}
    crash = sum(1 for r in rows if r.get("verdict") == "violated" and (r.get("reaction") or "").startswith("crash"))
    off = [r for r in rows if r.get("verdict") != r.get("expected")]
    configs = list(dict.fromkeys(r["config"] for r in rows))
    lines = [
        "## vLLM async-scheduler contract: what the prover found",
        "",
        f"{len(rows)} verdicts over {len(configs)} configurations"
        + (" (a partial run)" if not summary.get("complete", True) else "")
        + f": **{counts['violated']} violated** ({crash} crash, {counts['violated'] - crash} silent), "
        f"{counts['proved']} proved, {counts['bounded']} bounded"
        + (f", **{counts['unknown']} unknown**" if counts["unknown"] else "")
        + f"; {'all as expected' if not off else f'**{len(off)} not as expected**'}. "
        "Reaction: **crash** = a vLLM assert kills the engine at that step; **silent** = the property "
        "is violated and nothing fires; holds = proved for every depth.",
        "",
    ]
    if off:
        lines += ["### Not as expected", ""]
        lines += md_table(
            [["configuration", "property", "expected", "got", "note"]]
            + [[f"`{r['config']}`", r["property"], r["expected"], r["verdict"], r.get("note", "")[:120]] for r in off]
        )
        lines.append("")
    lines += ["### Counterexamples", ""]
    table = [["configuration", "property", "vLLM reaction", "steps", "via", "page"]]
    for c in cxs:
        if c.index:
            continue
        via = ", ".join(c.row.get("mechanisms") or []) or "core path"
        page = f"[page]({link(base, c.page)})"
        table.append([f"`{c.cfg.name}`", c.prop, reaction(c.row), str(len(c.trace.steps)), via, page])
    lines += md_table(table) if len(table) > 1 else ["none"]
    lines.append("")
    lines += ["### Every verdict", ""]
    if compact:  # proved rows folded per configuration
        table = [["configuration", "property", "verdict", "scope", "vLLM reaction"]]
        for name in configs:
            mine = [r for r in rows if r["config"] == name]
            held = [r for r in mine if r.get("verdict") == "proved"]
            if held:
                table.append([f"`{name}`", f"{len(held)} properties", "proved", scope(held[0]), "holds"])
            for r in mine:
                if r.get("verdict") != "proved":
                    table.append(
                        [f"`{name}`", r["property"], r["verdict"], scope(r), _reaction_cell(r, by_trace, base)]
                    )
    else:
        table = [["configuration", "property", "verdict", "scope", "vLLM reaction"]]
        for r in rows:
            table.append([f"`{r['config']}`", r["property"], r["verdict"], scope(r), _reaction_cell(r, by_trace, base)])
    lines += md_table(table)
    lines += [
        "",
        f"_Generated by `make report` from `build/prove/summary.json` "
        f"({summary.get('seconds', '?')} s of proving). Each page has the interleaving, the variables "
        "that change, vLLM's lines and the one-line reproduction._",
        "",
    ]
    return "\n".join(lines)


def _reaction_cell(row: dict, by_trace: dict, base: str) -> str:
    text = reaction(row)
    c = by_trace.get((row["config"], row["property"]))
    return f"{text} ([page]({link(base, c.page)}))" if c else text


# ------------------------------------------------------------------ a page


def page_md(c: Counterexample, prove_dir: Path) -> str:
    cfg, trace, prop = c.cfg, c.trace, c.prop
    broken = violations_by_step(cfg, trace)
    fired = trace.fired[-1] if trace.fired else []
    title = "CRASH" if fired else "silent"
    up = "../" * (c.page.count("/"))
    lines = [
        f"# `{cfg.name}` · {prop}: {title} at step {len(trace.steps)}",
        "",
        f"[← all verdicts]({up}index.md)",
        "",
        f"**What goes wrong.** {sentence(cfg, trace, prop)}",
        "",
        f"**Property** `{prop}`: {PROPERTIES[prop].doc}.",
        "",
        f"**Configuration** `{cfg.name}`: {in_words(cfg.note, cfg.prof.release)}. Runner {cfg.runner}; events "
        f"{', '.join(sorted(cfg.events)) or 'none'}; faults {', '.join(sorted(cfg.faults)) or 'none'}; "
        f"profile {cfg.profile}; clamp {'on' if cfg.clamp else 'off'}; {cfg.requests} request(s), "
        f"pp {cfg.pp}, {cfg.spec_tokens} draft token(s) per step."
        + (f" Mechanisms this trace uses: {', '.join(trace.mechanisms)}." if trace.mechanisms else ""),
        "",
        "## The interleaving",
        "",
        "Steps are numbered as in the table below; shaded red: a property breaks there; "
        "amber: a fault or a KV-load failure.",
        "",
        "```mermaid",
        diagram(cfg, trace, prop, broken).rstrip("\n"),
        "```",
        "",
        "## What changes",
        "",
        "Only the variables that change; **bold**: changed at that step.",
        "",
    ]
    lines += md_table(change_table(cfg, trace, broken))
    lines += ["", f"_{LEGEND}._", ""]
    if c.module is not None:
        from codegen.cases import describe_expect

        lines += [
            "## What vLLM does on each release",
            "",
            "The model's prediction per arm of the generated case (every release, clamp off and on); "
            "the vLLM targets check it on the real scheduler.",
            "",
        ]
        arms = [["arm", "reaction"]]
        for label, (_, expect) in c.module.case.arms.items():
            arms.append([label, "; ".join(describe_expect(expect, prop, label))])
        lines += md_table(arms) + [""]
    refs = vllm_lines(cfg, trace, prop)
    lines += [
        f"## vLLM lines ({'vLLM ' + c.release if not cfg.prof.historical else cfg.profile + ', on ' + c.release})",
        "",
    ]
    for ref in refs:
        lines.append(f"- [{ref.where}]({ref.url}) `{ref.text}`: {ref.why} (`{ref.id}`)")
    if not refs:
        lines.append("- none cited for this release")
    lines += [
        "",
        "## Reproduce",
        "",
        "```",
        c.replay_command(),
        "```",
        "",
        f"Trace: `{Path(prove_dir) / c.trace_path}`" + (f" · generated test: `{c.module.path}`" if c.module else ""),
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------ writing


def foreign(out: Path) -> str | None:
    """A file in `out` this tool did not write (None: all ours, or no folder)."""
    if not out.exists():
        return None
    if not out.is_dir():
        return str(out)
    entries = [p for p in out.rglob("*") if p.is_file()]
    if not entries:
        return None
    try:
        listed = set(json.loads((out / MARKER).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return str(entries[0].relative_to(out))
    for p in entries:
        rel = p.relative_to(out).as_posix()
        if rel != MARKER and rel not in listed and not rel.startswith("html/"):
            return rel
    return None


def write_report(summary: dict, cxs: list[Counterexample], prove_dir: Path, folder: Path, base: str) -> dict:
    """Write index.md and the pages into `folder` (a staging folder); returns sizes."""
    pages = {}
    for c in cxs:
        pages[c.page] = page_md(c, prove_dir)
    text = summary_md(summary, cxs, base)
    if len(text) > COMMENT_LIMIT:
        text = summary_md(summary, cxs, base, compact=True)
    if len(text) > COMMENT_LIMIT:
        raise ReportError(
            f"the summary is {len(text)} characters even with proved rows folded, over GitHub's "
            f"{COMMENT_LIMIT} for one comment"
        )
    files = {"index.md": text, **pages}
    for rel, body in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    (folder / MARKER).write_text(
        json.dumps(
            {"note": "written by python -m report.render", "files": sorted(list(files) + ["check.json"])}, indent=1
        )
        + "\n"
    )
    return {"index_chars": len(text), "pages": len(pages)}


def swap(staging: Path, out: Path) -> None:
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f"{out.name}.old-", dir=out.parent))
        os.rename(out, old / "x")
    os.rename(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.render", description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="prove_dir", default="build/prove", type=Path)
    ap.add_argument("--out", default="build/report", type=Path)
    ap.add_argument(
        "--link-base",
        default=os.environ.get("REPORT_LINK_BASE", ""),
        help="prefix for the summary's page links (default: relative)",
    )
    ap.add_argument("--no-check", action="store_true", help="write the Markdown only; do not render it")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    staging = None
    try:
        where = foreign(args.out)
        if where is not None:
            raise ReportError(
                f"--out {args.out}: holds {where}, which report.render did not write; name a new folder or one it wrote"
            )
        summary = load_summary(args.prove_dir)
        progress(f"report: replaying the counterexamples of {args.prove_dir}/summary.json")
        cxs = counterexamples(summary, args.prove_dir)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{args.out.name}.{os.getpid()}.", dir=args.out.parent))
        sizes = write_report(summary, cxs, args.prove_dir, staging, args.link_base)
        progress(
            f"report: index.md {sizes['index_chars']} characters (limit {COMMENT_LIMIT}), {sizes['pages']} page(s)"
        )
        status = 0
        if not args.no_check:
            from report.check import RenderError, render_all

            try:
                result = render_all(staging, staging / "html")
            except RenderError as exc:
                raise ReportError(str(exc)) from None
            (staging / "check.json").write_text(json.dumps(result, indent=1) + "\n")
            progress(
                f"report: rendered {result['diagrams']} diagram(s) on {result['pages']} page(s) with Mermaid "
                f"{result['mermaid']} in {result['chromium']} ({result['seconds']:.1f} s)"
            )
            for e in result["errors"]:
                print(
                    f"error: {args.out}/{e['page']}, diagram {e['diagram']}: {e['message'].splitlines()[0]}",
                    file=sys.stderr,
                )
            status = 1 if result["errors"] else 0
        swap(staging, args.out)
        staging = None
        print(f"wrote {args.out}/index.md and {sizes['pages']} page(s) in {time.perf_counter() - started:.1f} s")
        return status
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing written", file=sys.stderr)
        return 130
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

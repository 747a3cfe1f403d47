"""The prover's results as a report a reviewer reads in a minute (`vllm-contract report`).

Writes index.md (the summary: the verdict table and the counterexamples with links to
their pages; it fits one GitHub PR comment, 65,536 characters) and pages/CONFIG/PROPERTY.md
(one page per counterexample: what goes wrong in one sentence, a Mermaid sequenceDiagram of
the interleaving, the variables that change, the vLLM lines linked at the release's tagged
source, the one-line reproduction).
"""

from __future__ import annotations

from pathlib import Path

from vllm_contract.codegen.export import as_markdown
from vllm_contract.model.results import VerdictRow
from vllm_contract.report.data import Counterexample, ReportError, config_of
from vllm_contract.report.mermaid import diagram
from vllm_contract.report.story import LEGEND, change_table, sentence, violations_by_step, vllm_lines, why
from vllm_contract.spec.citations import in_words
from vllm_contract.spec.config import FAULTS
from vllm_contract.spec.plugin_runners import PLUGINS
from vllm_contract.spec.profiles import release_order
from vllm_contract.spec.properties import ASSERTS, PROPERTIES
from vllm_contract.spec.verdicts import Fired, Kind, Reaction

COMMENT_LIMIT = 65_536  # GitHub's limit for one comment body
VERDICTS_PAGE = "verdicts.md"  # every verdict, when the index cannot hold them


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(cell(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows[1:]]
    return out


# ------------------------------------------------------------------ verdicts


def reaction(row: VerdictRow) -> str:
    """vLLM's reaction as the summary shows it: crash (with the assert), hang, silent, holds."""
    kind = row.verdict.kind
    if kind is Kind.PROVED:
        return "holds"
    if kind is Kind.BOUNDED:
        return "holds as far as searched"
    if kind is Kind.VIOLATED:
        name = row.fired.assert_name if row.fired else None
        if name:
            statement = ASSERTS[name].statement if name in ASSERTS else None
            return f"**crash** (`{statement}`)" if statement else f"**crash** ({name})"
        return f"**{(row.fired or Fired()).reaction.value}**"
    return f"**{row.verdict}**"


SHORT_SIZES = {"requests": "N=", "spec_tokens": "K=", "pp": "pp="}


def scope(row: VerdictRow, short: bool = False) -> str:
    """What the verdict covers: its depth (all depths for a proof, the length of the
    counterexample, the search bound) and the sizes it holds for: the row's own `scope`
    when the prover writes one, else the configuration's. `short`: as prove prints it
    (N= K= pp=), for the folded verdict table."""
    depth, kind = row.depth, row.verdict.kind
    if kind is Kind.PROVED:
        what = f"all depths (k={depth})"
    elif kind is Kind.VIOLATED:
        what = f"{depth} steps" if short else f"at {depth} steps"
    elif kind is Kind.BOUNDED:
        what = f"none in {depth} steps" if short else f"none within {depth} steps"
    else:
        what = (row.note or "")[:60]
    given = row.scope
    if isinstance(given, dict) and short:
        size = " ".join(
            f"{SHORT_SIZES.get(k, k + ' ')}{'/'.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
            for k, v in given.items()
        )
    elif isinstance(given, dict):
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
            size = (
                f"N={cfg.requests} K={cfg.spec_tokens} pp={cfg.pp}"
                if short
                else f"requests {cfg.requests}, spec_tokens {cfg.spec_tokens}, pp {cfg.pp}"
            )
        except ReportError:
            size = ""
    return f"{what}; {size}" if size else what


def link(base: str, rel: str) -> str:
    return f"{base.rstrip('/')}/{rel}" if base else rel


def summary_md(
    summary: dict, cxs: list[Counterexample], base: str, compact: bool = False, verdicts_page: bool = False
) -> str:
    """The index: findings, counterexamples, every verdict. `compact`: proved rows folded;
    `verdicts_page`: every verdict on its own page (VERDICTS_PAGE), linked from the index."""
    rows: list[VerdictRow] = summary["rows"]
    by_trace = {(c.row.config, c.prop): c for c in cxs if c.index == 0}
    counts = {k.value: sum(r.verdict.kind is k for r in rows) for k in Kind}
    violated = [r for r in rows if r.verdict.kind is Kind.VIOLATED]
    crash = sum(1 for r in violated if r.fired and r.fired.assert_name)
    hung = sum(1 for r in violated if (r.fired or Fired()).reaction is Reaction.HANG)
    undecided = [r for r in rows if r.verdict.kind is Kind.UNKNOWN]
    off = [r for r in rows if not r.ok and r.verdict.kind is not Kind.UNKNOWN]
    configs = list(dict.fromkeys(r.config for r in rows))
    if undecided:
        verdict_word = f"**{len(undecided)} could not be decided** (unknown: a solver limit, not a result)" + (
            f", **{len(off)} not as expected**" if off else ""
        )
    else:
        verdict_word = "all as expected" if not off else f"**{len(off)} not as expected**"
    lines = [
        "## vLLM async-scheduler contract: what the prover found",
        "",
        f"{len(rows)} verdicts over {len(configs)} configurations"
        + (" (a partial run)" if not summary.get("complete", True) else "")
        + f": **{counts['violated']} violated** ({crash} crash, "
        + (f"{hung} hang, " if hung else "")
        + f"{counts['violated'] - crash - hung} silent), "
        f"{counts['proved']} proved, {counts['bounded']} bounded"
        + (f", {counts['frontier']} frontier(s)" if counts["frontier"] else "")
        + f"; {verdict_word}. "
        "Reaction: **crash** = a vLLM assert kills the engine at that step; **hang** = nothing fires and "
        "the engine, run on by itself, never runs a request again; **silent** = the property "
        "is violated and nothing fires; holds = proved for every depth.",
        "",
    ]
    if undecided:
        lines += ["### Could not be decided", ""]
        lines += md_table(
            [["configuration", "property", "expected", "note"]]
            + [[f"`{r.config}`", r.property, r.expected, (r.note or "")[:120]] for r in undecided]
        )
        lines.append("")
    if off:
        lines += ["### Not as expected", ""]
        lines += md_table(
            [["configuration", "property", "expected", "got", "note"]]
            + [[f"`{r.config}`", r.property, r.expected, str(r.verdict), (r.note or "")[:120]] for r in off]
        )
        lines.append("")
    lines += _seed_md(rows)
    shortest = [c for c in cxs if not c.index]
    lines += findings_md(shortest, base)
    for kind, (title, note) in KINDS.items():
        mine = [c for c in shortest if kind_of(c.cfg) == kind]
        lines += [f"### {title} ({len(mine)})", "", note(mine), ""]
        lines += _cx_table(mine, base, compact) if mine else ["none"]
        lines.append("")
    lines += ["### Every verdict", ""]
    if verdicts_page:
        lines += [
            f"All {len(rows)} verdicts, a row each, are on their own page to keep this one comment: "
            f"[{VERDICTS_PAGE}]({link(base, VERDICTS_PAGE)}).",
            "",
        ]
        lines += _footer(summary)
        return "\n".join(lines)
    if compact:
        lines += [
            "Folded to fit one comment: a configuration's proved properties in one row, releases "
            "with the same rows side by side, sizes as `prove` prints them (N requests, K draft "
            "tokens); a crash's assert is in the tables above.",
            "",
        ]  # proved rows folded per configuration, releases with the same rows side by side
        table = [["configuration", "property", "verdict", "scope", "vLLM reaction"]]
        folded: dict = {}
        for name in configs:
            mine = [r for r in rows if r.config == name]
            scenario = name.split("@")[0]
            held = [r for r in mine if r.verdict.kind is Kind.PROVED]
            cells = []
            if held:
                cells.append((f"{len(held)} properties", "proved", scope(held[0], short=True), "holds"))
            for r in mine:  # the assert of a crash is in the tables above, on the row's page
                if r.verdict.kind is not Kind.PROVED:
                    cells.append((r.property, str(r.verdict), scope(r, short=True), reaction(r).split(" (")[0]))
            folded.setdefault((scenario, tuple(cells)), []).append(name.partition("@")[2] or "")
        for (scenario, cells), releases in folded.items():
            label = f"`{scenario}`" + (f" @ {', '.join(releases)}" if any(releases) else "")
            for cell_row in cells:
                table.append([label, *cell_row])
    else:
        table = [["configuration", "property", "verdict", "scope", "vLLM reaction"]]
        for r in rows:
            table.append([f"`{r.config}`", r.property, str(r.verdict), scope(r), _reaction_cell(r, by_trace, base)])
    lines += md_table(table)
    lines += [""] + _footer(summary)
    return "\n".join(lines)


def _footer(summary: dict) -> list[str]:
    return [
        f"_Generated by `make report` from `build/prove/summary.json` "
        f"({summary.get('seconds', '?')} s of proving). Each page has the interleaving, the variables "
        "that change, vLLM's lines and the one-line reproduction._",
        "",
    ]


def verdicts_md(summary: dict, cxs: list[Counterexample], base: str) -> str:
    """Every verdict, a row each (the page the index links when it cannot hold them)."""
    rows: list[VerdictRow] = summary["rows"]
    by_trace = {(c.row.config, c.prop): c for c in cxs if c.index == 0}
    table = [["configuration", "property", "verdict", "scope", "vLLM reaction"]]
    for r in rows:
        table.append([f"`{r.config}`", r.property, str(r.verdict), scope(r), _reaction_cell(r, by_trace, base)])
    return "\n".join(["## Every verdict", "", *md_table(table), "", *_footer(summary)])


def _seed_md(rows: list[VerdictRow]) -> list[str]:
    """The seed's deployment first (spec/matrix.py SEED): per configuration, what is proved
    and what is violated with vLLM's reaction."""
    mine = [r for r in rows if r.config.split("@")[0] in ("seed", "seed-cc")]
    if not mine:
        return []
    table = [["configuration", "proved", "violated (vLLM's reaction)", "not violated as far as searched"]]
    for name in dict.fromkeys(r.config for r in mine):
        of = [r for r in mine if r.config == name]
        proved = sum(r.verdict.kind is Kind.PROVED for r in of)
        broken = [f"{r.property}: {reaction(r)}" for r in of if r.verdict.kind is Kind.VIOLATED]
        bounded = [r.property for r in of if r.verdict.kind is Kind.BOUNDED]
        table.append([f"`{name}`", f"{proved} of {len(of)}", "; ".join(broken) or "none", ", ".join(bounded) or "-"])
    return [
        "### The seed's configuration",
        "",
        "V2, chunked prefill, budget 8192, up to 64 sequences (any number), a 9118-token prompt; "
        "`seed-cc` with the slot read stale (Confidential Computing); both with prefix caching on (any hit).",
        "",
        *md_table(table),
        "",
    ]


def _cx_table(cxs: list[Counterexample], base: str, compact: bool) -> list[str]:
    if compact:  # one row per scenario and property, its releases side by side
        table = [["scenario", "property", "vLLM reaction", "steps", "via", "pages"]]
        groups: dict = {}
        for c in cxs:
            via = ", ".join(c.row.mechanisms or []) or "core path"
            key = (c.cfg.scenario, c.prop, reaction(c.row), str(len(c.trace.steps)), via)
            groups.setdefault(key, []).append(c)
        for (scenario, prop, said, steps, via), group in groups.items():
            pages = " ".join(f"[{_where(c.cfg)}]({link(base, c.page)})" for c in group)
            table.append([f"`{scenario}`", prop, said, steps, via, pages])
    else:
        table = [["configuration", "property", "vLLM reaction", "steps", "via", "page"]]
        for c in cxs:
            via = ", ".join(c.row.mechanisms or []) or "core path"
            page = f"[page]({link(base, c.page)})"
            table.append([f"`{c.cfg.name}`", c.prop, reaction(c.row), str(len(c.trace.steps)), via, page])
    return md_table(table)


def kind_of(cfg) -> str:
    """Which table of the index a counterexample belongs to."""
    if cfg.prof.historical:
        return "historical"
    if cfg.run.plugin:
        return "plugin"
    if cfg.clamp or cfg.guard != "none" or cfg.runner != cfg.run.family:  # a runner variant is a change
        return "fixes"
    return "fault" if cfg.faults else "own"


def _faults_note(cxs: list[Counterexample]) -> str:
    used = sorted({f for c in cxs for f in c.cfg.faults})
    if not used:
        return "No counterexample needs an injected fault."
    return "What each fault stands for: " + "; ".join(f"**{f}**, {FAULTS[f]}" for f in used) + "."


KINDS = {
    "own": (
        "Real bugs: reachable with vLLM's own events",
        lambda cxs: (
            "Nothing injected: the scheduler's and the runner's own code paths, with requests, "
            "preemptions, aborts, KV-load failures, streaming sessions and pipeline parallelism as vLLM has them."
        ),
    ),
    "fault": ("Under an injected fault", _faults_note),
    "fixes": (
        "The clamp and the fixes",
        lambda cxs: (
            "What the seed's clamp, the step-reservation guard and the changed runners (the live-length "
            "rule, the recompute rollback) still let through; each configuration's page says what it holds."
        ),
    ),
    "plugin": (
        "Platform plugins' runners",
        lambda cxs: (
            "A platform plugin's own model runner (spec/plugin_runners/, docs/plugin-runners.md) against vLLM's "
            "scheduler: what the runner decides, read from the plugin's pinned code ("
            + ", ".join(sorted({c.cfg.run.plugin for c in cxs}))
            + "), checked against the releases each page names."
            + "".join(
                f" Not checked: {m.SOURCE.name}, {m.OUTSIDE} (spec/plugin_runners/)."
                for m in PLUGINS
                if getattr(m, "OUTSIDE", "")
            )
        ),
    ),
    "historical": (
        "Historical behaviours (regression suites)",
        lambda cxs: "Behaviours of earlier vLLM code kept as profiles so that their regression tests stay.",
    ),
}

# vLLM issues and PRs a finding explains or bears on, by the mechanism that reaches it:
# the seed's crash; a streaming update's final prefill chunk left unreserved (#35755, its
# fix PR #50692) and the /v1/realtime path (#30142)
REFERENCES = {
    "kv-load-failure": ("#57562",),
    "stream_update": ("#30142", "#35755", "#50692"),
    "over-delivery": ("#30142",),
    "under-drain": ("tpu-inference #3492",),
    "lost-sample": ("tpu-inference #2833",),
}


def findings_md(cxs: list[Counterexample], base: str) -> list[str]:
    """The real bugs numbered, one sentence each: a finding is what one mechanism does on
    one runner family, with the properties it breaks, vLLM's reaction per release and
    the vLLM issues it bears on."""
    groups: dict = {}
    for c in cxs:
        if kind_of(c.cfg) != "own":
            continue
        runner = "V2" if c.cfg.is_v2 else "V1"
        key = (tuple(sorted(c.row.mechanisms or [])), runner)
        groups.setdefault(key, []).append(c)
    if not groups:
        return []
    lines = ["### Findings", ""]
    # the engine-killing first, then the widest across releases
    order = sorted(
        groups.items(),
        key=lambda kv: (
            -len({c.release for c in kv[1] if c.row.fired and c.row.fired.assert_name}),
            -len({c.release for c in kv[1]}),
            kv[0],
        ),
    )
    for n, ((mechanisms, runner), group) in enumerate(order, 1):
        via = ", ".join(mechanisms) or "the core path (schedule and deliver)"
        props = sorted({c.prop for c in group})
        crash: dict = {}
        silent: set = set()
        for c in group:
            name = c.row.fired.assert_name if c.row.fired else None
            if name:
                crash.setdefault(ASSERTS[name].statement if name in ASSERTS else name, set()).add(c.release)
            else:
                silent.add(c.release)
        said = [f"**crash** on {_releases(rs)} (`{stmt}`)" for stmt, rs in sorted(crash.items())]
        crashing = set().union(*crash.values()) if crash else set()
        if silent - crashing:
            said.append(f"**silent** on {_releases(silent - crashing)}" + (" (no assert fires)" if crash else ""))
        refs = sorted({ref for m in mechanisms for ref in REFERENCES.get(m, ())})
        first = min(group, key=lambda c: (len(c.trace.steps), c.page))
        lines.append(
            f"{n}. **{via}**, {runner} runner: breaks {', '.join(props)}; "
            + "; ".join(said)
            + (f"; bears on {', '.join(refs)}" if refs else "")
            + f" ([shortest]({link(base, first.page)}), {len(first.trace.steps)} steps)."
        )
    return lines + [""]


def _releases(releases) -> str:
    return ", ".join(sorted(releases, key=release_order))


def _where(cfg) -> str:
    """A configuration's release, or its profile for a historical one."""
    return cfg.profile if cfg.prof.historical else cfg.prof.release


def _reaction_cell(row: VerdictRow, by_trace: dict, base: str) -> str:
    text = reaction(row)
    c = by_trace.get((row.config, row.property))
    return f"{text} ([page]({link(base, c.page)}))" if c else text


# ------------------------------------------------------------------ a page


def page_md(c: Counterexample, prove_dir: Path, exported: tuple | None = None) -> str:
    """`exported`: the page's vLLM test and why there is none (report.data.exported_tests)."""
    cfg, trace, prop = c.cfg, c.trace, c.prop
    broken = violations_by_step(cfg, trace)
    title = (c.row.fired or trace.fired_at_end).reaction.label
    up = "../" * (c.page.count("/"))
    lines = [
        f"# `{cfg.name}` · {prop}: {title} at step {len(trace.steps)}",
        "",
        f"[← all verdicts]({up}index.md)",
        "",
        f"_{LEGEND}._",
        "",
        f"**What goes wrong.** {sentence(cfg, trace, prop)}",
        "",
    ]
    reason = why(cfg, trace)
    if reason:
        lines += [f"**Why.** {reason}", ""]
    lines += [
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
    lines += [""]
    if c.module is not None:
        from vllm_contract.codegen.cases import describe_expect

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
    if exported is not None:
        mod, left_out, elsewhere = exported
        lines += ["## As a test of vLLM's own suite", ""]
        lines += as_markdown(mod) if mod is not None else [f"Not exported for vLLM {c.release}: {left_out}."]
        if elsewhere:
            name = c.module.case.name
            lines += [
                "",
                f"Exported for vLLM {', '.join(elsewhere)} too: `make export CASE={name} RELEASE=<release>` "
                "writes it (from the trace found on that release where it has one).",
            ]
        lines.append("")
    refs = vllm_lines(cfg, trace, prop)
    lines += [
        f"## vLLM lines ({'vLLM ' + c.release if not cfg.prof.historical else cfg.profile + ', on ' + c.release})",
        "",
    ]
    for ref in refs:
        where = f"[{ref.where}]({ref.url})" if ref.url else ref.where  # a PyPI pin has no web page
        lines.append(f"- {where} `{ref.text}`: {ref.why} (`{ref.id}`)")
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


def write_report(
    summary: dict, cxs: list[Counterexample], prove_dir: Path, folder, base: str, exported: dict | None = None
) -> dict:
    """Write index.md and the pages into `folder` (an OutFolder being written); returns sizes.
    `exported`: each page's vLLM test (report.data.exported_tests)."""
    pages = {}
    exported = exported or {}
    for c in cxs:
        pages[c.page] = page_md(c, prove_dir, exported.get(c.page))
    text = summary_md(summary, cxs, base)
    if len(text) > COMMENT_LIMIT:
        text = summary_md(summary, cxs, base, compact=True)
    if len(text) > COMMENT_LIMIT:  # the verdicts on a page of their own, linked from the index
        pages[VERDICTS_PAGE] = verdicts_md(summary, cxs, base)
        text = summary_md(summary, cxs, base, compact=True, verdicts_page=True)
    if len(text) > COMMENT_LIMIT:
        raise ReportError(
            f"the summary is {len(text)} characters even with every verdict on its own page, over "
            f"GitHub's {COMMENT_LIMIT} for one comment"
        )
    for rel, body in {"index.md": text, **pages}.items():
        folder.write_text(rel, body)
    return {"index_chars": len(text), "pages": len(pages)}

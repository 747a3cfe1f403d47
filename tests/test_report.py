"""`make report`: the summary and the pages, rendered in a real Markdown + Mermaid renderer.

The main test writes the whole report from the prover's results (build/prove, which
`make test` has just written; a small prover run when there are none) and renders every
page in headless Chromium with Mermaid: a diagram that does not parse fails it. The
renderer is installed by `make report-deps`; without it these tests fail with that
instruction, they are never skipped.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
from pathlib import Path

import pytest
from vllm_contract.report import render
from vllm_contract.report.check import missing, render_text
from vllm_contract.report.mermaid import esc

from tests.test_bad_inputs import default_sigint
from vllm_contract.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["v2-kvfail@0.32.0", "kvfail-stream@0.33.0", "h4-stream", "v1@0.32.0"]  # v1: proved rows to fold


def need_renderer() -> None:
    why = missing()
    if why:
        pytest.fail(f"the Mermaid renderer is not installed ({why}); run `make report-deps`")


@pytest.fixture(scope="module")
def prove_dir(prove_results) -> Path:
    return prove_results(SMALL)


def _made_report(prove_dir: Path) -> Path | None:
    """build/report when `make report` wrote it from these prover results with the report
    code here now (make test has just rendered it: a second rendering would check the
    same pages again), else None."""
    made = ROOT / "build" / "report"
    check = made / "check.json"
    if prove_dir.resolve() != (ROOT / "build" / "prove").resolve() or not check.is_file():
        return None
    written = check.stat().st_mtime
    sources = [prove_dir / "summary.json", *(ROOT / "report").rglob("*.py"), *(ROOT / "report").rglob("*.mjs")]
    return made if all(p.stat().st_mtime < written for p in sources) else None


@pytest.fixture(scope="module")
def report_dir(prove_dir, tmp_path_factory) -> Path:
    need_renderer()
    made = _made_report(prove_dir)
    if made is not None:
        return made
    out = tmp_path_factory.mktemp("report") / "report"
    code = cli(["report", "--from", str(prove_dir), "--out", str(out)])
    check = json.loads((out / "check.json").read_text()) if (out / "check.json").is_file() else {}
    assert code == 0, f"vllm-contract report exited {code}; renderer errors: {check.get('errors')}"
    return out


@pytest.mark.slow
def test_every_diagram_renders(report_dir, prove_dir):
    check = json.loads((report_dir / "check.json").read_text())
    summary = json.loads((prove_dir / "summary.json").read_text())
    traces = sum(1 + len(r.get("classes", [])) for r in summary["results"] if r["verdict"] == "violated")
    assert check["errors"] == []
    assert check["diagrams"] == traces > 0  # one diagram per counterexample page
    assert (report_dir / "html" / "index.html").is_file()


def _labels(line: str, scenario: str, release: str) -> bool:
    """A row of the verdict table for that configuration: `name`, or `scenario` @ its releases."""
    if line.startswith(f"| `{scenario}@{release}` |") or (not release and line.startswith(f"| `{scenario}` |")):
        return True
    head = f"| `{scenario}` @ "
    return line.startswith(head) and release in line[len(head) :].split(" |")[0].split(", ")


@pytest.mark.slow
def test_summary_fits_one_comment_and_links_every_page(report_dir, prove_dir):
    index = (report_dir / "index.md").read_text()
    assert len(index) <= render.COMMENT_LIMIT
    summary = json.loads((prove_dir / "summary.json").read_text())
    lines = index.split("### Every verdict")[1].splitlines()
    if f"]({render.VERDICTS_PAGE})" in index:  # too many for the index: every verdict on its own page
        lines = (report_dir / render.VERDICTS_PAGE).read_text().splitlines()
    for row in summary["results"]:  # every verdict is in the table (releases side by side when folded)
        scenario, _, release = row["config"].partition("@")
        cells = [f"| {row['property']} | {row['verdict']} |"]
        if row["verdict"] == "proved":  # folded when the index would not fit otherwise (build/prove's whole matrix)
            cells.append("properties | proved |")
        assert any(_labels(line, scenario, release) and any(c in line for c in cells) for line in lines), row
    links = re.findall(r"\]\((pages/[^)]+\.md)\)", index)
    assert links and all((report_dir / link).is_file() for link in links)
    pages = sorted(p.relative_to(report_dir).as_posix() for p in (report_dir / "pages").rglob("*.md"))
    assert set(links) <= set(pages)


def test_the_index_opens_with_the_numbered_findings_then_the_grouped_tables(report_dir):
    index = (report_dir / "index.md").read_text()
    heads = [line for line in index.splitlines() if line.startswith("### ")]
    order = ["### Findings", "### Real bugs", "### Under an injected fault", "### The clamp and the fixes"]
    at = [next(i for i, h in enumerate(heads) if h.startswith(o)) for o in order]
    assert at == sorted(at) and heads[-1] == "### Every verdict"
    findings = index.split("### Findings")[1].split("###")[0].strip().splitlines()
    assert findings[0].startswith("1. **kv-load-failure**, V2 runner: breaks ")
    assert "counter-nonnegative" in findings[0].split(" on ")[0]
    assert "**crash** on" in findings[0] and "`assert request.num_output_placeholders >= 0`" in findings[0]
    assert "bears on #57562" in findings[0]
    assert all(re.match(rf"{n}\. \*\*", line) for n, line in enumerate(findings, 1))
    faults = index.split("### Under an injected fault")[1].split("###")[0]
    assert "What each fault stands for: **" in faults or faults.strip().endswith("none")


@pytest.mark.slow
def test_a_page_says_what_goes_wrong(report_dir):
    page = (report_dir / "pages" / "v2-kvfail@0.32.0" / "counter-nonnegative.md").read_text()
    assert "**What goes wrong.**" in page and "KV-load failure" in page
    # the legend first, then why: the slot's stale GPU count against the scheduler's rolled-back one
    assert page.index("_L prompt tokens, T num_tokens") < page.index("**What goes wrong.**")
    # the numbers are the solver's pick of a shortest trace; the reasoning is fixed
    why = re.search(
        r"\*\*Why\.\*\* At step \d+ the scheduler schedules (\d+) token\(s\) of r0 as a prefill chunk and reserves "
        r"no placeholder, but the V2 runner samples a token \(g \+ n = (\d+) \+ \1 = (\d+) < prefill_len = \3\? no "
        r"-> samples\)\. Before that step the scheduler's c \(num_computed_tokens\) is 0, the runner's g "
        r"\(v2_num_computed\) \2 \(apart by \2\), since step \d+, where c \2→0 while g stays \2 \(a KV-load failure "
        r"reported with step 1's output rolls r0's num_computed_tokens back from \2 to 0\)\.",
        page,
    )
    assert why, page
    assert "`assert request.num_output_placeholders >= 0` fires" in page
    assert "```mermaid\nsequenceDiagram" in page
    # only the variables that change: P does, the stale count never does here
    header = next(line for line in page.splitlines() if line.startswith("| step | event | picks |"))
    assert "| P |" in header and "| S |" not in header
    # vLLM's lines, at the release's tag on GitHub
    assert "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/core/sched/async_scheduler.py#L" in page
    assert "--target=vllm --vllm=0.32.0" in page
    # the case as a test of vLLM's own suite (what `make export` writes), collapsed, with
    # where to paste it, how to run it and where it fails
    exported = page.split("## As a test of vLLM's own suite")[1].split("## vLLM lines")[0]
    assert "pytest tests/v1/core/test_contract_v2_kvfail__counter_nonnegative.py" in exported
    assert "as released at vLLM's `assert request.num_output_placeholders >= 0` in step 7" in exported
    assert "passes with the step-reservation guard" in exported
    module = exported.split("```python\n")[1].split("\n```")[0]
    names = {n.name for n in ast.parse(module).body if isinstance(n, ast.FunctionDef)}
    assert {"test_v2_kvfail__counter_nonnegative", "test_v2_kvfail__healthy_path_control"} <= names


@pytest.mark.slow
def test_a_diagram_that_does_not_parse_fails(tmp_path):
    need_renderer()
    good = "sequenceDiagram\n    A->>B: " + esc("c 0→1; P < 0 # fine") + "\n"
    bad = "sequenceDiagram\n    A-->>>B oops\n"
    result = render_text([good, bad], tmp_path)
    assert [e["diagram"] for e in result["errors"]] == [1]
    assert result["errors"][0]["page"] == "d001.md"
    assert "Parse error" in result["errors"][0]["message"]


@pytest.mark.slow
def test_a_note_that_runs_past_its_box_or_over_another_fails(tmp_path):
    """What finding 1's step 7 note did before its properties went one a line: Mermaid
    sizes a note over two participants by their distance, not by its text."""
    need_renderer()
    head = "sequenceDiagram\n    participant S as Scheduler\n    participant R as Runner\n"
    fits = head + "    Note over S,R: step 7 violates<br/>counter-nonnegative<br/>no-token-while-prefilling\n"
    long = (
        head
        + "    Note over S,R: step 7 violates no-token-while-prefilling, counter-nonnegative, placeholder-accounting\n"
    )
    result = render_text([fits, long], tmp_path)
    assert [e["page"] for e in result["errors"]] == ["d001.md"], result["errors"]  # the second diagram
    assert "runs" in result["errors"][0]["message"] and "past its box" in result["errors"][0]["message"]


def test_escaping_keeps_mermaid_statements_whole():
    assert esc("a; b") == "a#59; b"
    assert esc("x < 0 >= y") == "x #lt; 0 #gt;= y"
    assert esc("#1") == "#35;1"


def test_the_summary_folds_proved_rows_when_it_would_not_fit(prove_dir, monkeypatch):
    from vllm_contract.model.results import load_summary
    from vllm_contract.report.data import counterexamples

    summary = load_summary(prove_dir)
    cxs = counterexamples(summary, prove_dir)
    full = render.summary_md(summary, cxs, "")
    folded = render.summary_md(summary, cxs, "", compact=True)
    assert len(folded) < len(full)
    assert "properties | proved |" in folded


def test_out_holding_foreign_files_is_refused(tmp_path, prove_dir, capsys):
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli(["report", "--from", str(prove_dir), "--out", str(out), "--no-check"]) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"


def test_missing_results_are_one_line(tmp_path, capsys):
    assert cli(["report", "--from", str(tmp_path / "nothing"), "--out", str(tmp_path / "r"), "--no-check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "make prove" in err


def test_an_unknown_verdict_is_could_not_run_never_as_expected(tmp_path, prove_dir, capsys):
    """A row the solver could not decide is shown apart and exits 3, even where the
    matrix expected nothing in particular of it."""
    import shutil

    copy = tmp_path / "prove"
    shutil.copytree(prove_dir, copy)
    data = json.loads((copy / "summary.json").read_text())
    row = next(r for r in data["results"] if r["verdict"] == "proved")
    row["verdict"], row["note"] = "unknown", "timeout: the induction step at k=3 ran past 1 s"
    (copy / "summary.json").write_text(json.dumps(data, indent=1) + "\n")
    out = tmp_path / "report"
    assert cli(["report", "--from", str(copy), "--out", str(out), "--no-check"]) == 3
    assert "could not be decided" in capsys.readouterr().err
    index = (out / "index.md").read_text()
    assert "all as expected" not in index
    assert "**1 could not be decided**" in index and "### Could not be decided" in index


def _started(pid: int) -> str | None:
    """A process's start time (with its pid, who it is), or None once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def descendants(root: int) -> set[int]:
    """Every process below `root` now, from /proc (the test's own walk, not report.check's)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = set(), [root]
    while todo:
        parent_pid = todo.pop()
        below = [pid for pid, parent in parents.items() if parent == parent_pid and pid not in found]
        found.update(below)
        todo += below
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM to its group", "SIGTERM to its pid", "SIGINT to its pid"])
def test_no_renderer_process_outlives_a_stopped_report(how, prove_dir, tmp_path):
    """Node and Chromium (puppeteer starts Chromium in a group and session of its own)
    end with report, however it is stopped while it renders."""
    import os
    import signal
    import subprocess
    import sys
    import time

    need_renderer()
    command = [sys.executable, "-m", "vllm_contract", "report", "--from", str(prove_dir)]
    run = subprocess.Popen(
        [*command, "--out", str(tmp_path / "report")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a shell's job is
        preexec_fn=default_sigint,  # a Ctrl-C reaches it even where the run inherited SIGINT ignored
    )
    seen: dict[int, str] = {}
    try:
        deadline, browser = time.monotonic() + 300, None
        while run.poll() is None and time.monotonic() < deadline:
            for pid in descendants(run.pid):
                started = _started(pid)
                if started is not None:
                    seen.setdefault(pid, started)
                    if browser is None and _cmdline(pid).split(b"\0")[0].endswith(b"chromium"):
                        browser = time.monotonic()
            # Chromium's own processes started too: waited for, not timed (on a loaded host
            # they came more than a second after Chromium itself)
            if browser is not None and len(seen) > 3 and time.monotonic() - browser > 1.0:
                break
            time.sleep(0.05)
        assert run.poll() is None and browser is not None, "report ended, or never started Chromium"
        sig = signal.SIGINT if "SIGINT" in how else signal.SIGTERM
        if "group" in how:
            os.killpg(run.pid, sig)
        else:
            run.send_signal(sig)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    assert run.returncode == (130 if sig == signal.SIGINT else 143), err
    assert len(seen) > 3, seen  # Node, Chromium and Chromium's own processes
    deadline = time.monotonic() + 10
    while True:
        alive = [pid for pid, started in seen.items() if _started(pid) == started]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    leftover = {pid: _cmdline(pid)[:80] for pid in alive}
    for pid in alive:  # never leave them to the next test, whatever this one says
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not leftover, f"still running after report ended: {leftover}"

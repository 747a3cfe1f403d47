"""vLLM source citations as data (spec/citations.toml), and the check that they still hold.

Every place where the contract cites vLLM refers to an entry of citations.toml by id. An
entry holds the cited text and, per release, the line where that text starts in the
release's package. `check(tree, release)` re-finds each text in a vLLM tree, so a line
that moved, changed or vanished is reported by name instead of silently citing the
wrong code.

Referring to a citation from code (what `find_ids` reads):
  - `[cite:ID]` anywhere in a comment or string; several ids: `[cite:ID1 ID2]`;
  - `[ID]` in a comment or string, the short form, for an id with at least one hyphen
    and a first segment of two or more characters (`[is-prefill-chunk]`);
  - the `cite` / `source` field of a Property, Assert, VarDecl or Event record: ids
    separated by spaces, commas or semicolons; text in parentheses is a remark.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import io
import re
import tokenize
import tomllib
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TOML_PATH = Path(__file__).with_name("citations.toml")
REPO_URL = "https://github.com/vllm-project/vllm/blob/v{release}/vllm/{file}#L{span}"

ID_RE = r"[a-z][a-z0-9]+(?:-[a-z0-9.]*[a-z0-9])+"
RELEASE_RE = re.compile(r"^\d+\.\d+\.\d+$")
_MARKER = re.compile(r"\[(cite:)?(" + ID_RE + r"(?:[ ,]+" + ID_RE + r")*)\]")
_ID = re.compile(r"^" + ID_RE + r"$")
# inline line citations of the old style, e.g. `sched:1634-1636`, `config/vllm.py:577`
LEGACY_RE = re.compile(
    r"\b(?:sched|async|req|v1r|v1b|out|v2s|v2b|v2r|v2a|core):\d+(?:-\d+)?"
    r"|\b[a-z_/]+\.py:\d+(?:-\d+)?"
)

# record types whose field holds citation ids: type name -> (module, field)
RECORD_FIELDS = {
    "VarDecl": ("vllm_contract.spec.vocabulary", "source"),
    "Event": ("vllm_contract.spec.events", "source"),
    "Property": ("vllm_contract.spec.properties", "cite"),
    "Assert": ("vllm_contract.spec.properties", "cite"),
    "Runner": ("vllm_contract.spec.runner_variants", "cite"),
}

# the detail of a citation whose file the tree does not have
FILE_GONE = "file not in the tree"

# how close a block must be to count as the cited text "changed" rather than "vanished"
SIMILAR = 0.6


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split("."))


@dataclass(frozen=True)
class Citation:
    """One cited location: the text, and where it starts in each release listed."""

    id: str
    file: str
    text: str
    lines: dict[str, int]  # release -> first line of the text there
    note: str = ""
    files: dict[str, str] = dataclasses.field(default_factory=dict)  # per-release file
    texts: dict[str, str] = dataclasses.field(default_factory=dict)  # per-release text
    gone: str = ""  # the first release without the cited mechanism
    # a platform plugin's code (spec/plugin_runners/): the plugin's name and the line the
    # text starts at in its pinned code (lines stays empty: it is no vLLM release's)
    plugin: str = ""
    pinned: int = 0

    def base_for(self, release: str | None, oldest: str | None = None) -> str | None:
        """The release whose text and line a tree of `release` is compared with, or None
        when the citation does not apply to it: the release itself when listed; for a
        release not listed, the newest listed one before it (None once it is gone);
        release None is "after every release". A tree older than `oldest`, the oldest
        release any citation records, is compared with the citation's oldest lines when
        it records that release (the mechanism was there when recording began); a
        citation first recorded later was introduced then, and does not apply."""
        if release in self.lines:
            return release
        if self.gone and (release is None or release_key(release) >= release_key(self.gone)):
            return None
        older = [r for r in self.lines if release is None or release_key(r) < release_key(release)]
        if older:
            return max(older, key=release_key)
        if (
            oldest is not None
            and oldest in self.lines
            and release is not None
            and release_key(release) < release_key(oldest)
        ):
            return oldest
        return None

    def introduced(self) -> str:
        """The first release this citation records."""
        return min(self.lines, key=release_key)

    def file_in(self, release: str) -> str:
        return self.files.get(release, self.file)

    def text_in(self, release: str) -> str:
        return self.texts.get(release, self.text)

    def releases(self) -> list[str]:
        return sorted(self.lines, key=release_key)


def parse(data: dict) -> dict[str, Citation]:
    """Citation records from the parsed TOML; raises ValueError on a malformed entry."""
    out = {}
    for cid, entry in data.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{cid}: not a table")
        if not _ID.match(cid):
            raise ValueError(f"{cid}: an id is kebab-case with at least one hyphen")
        if "plugin" in entry:
            out[cid] = _plugin_entry(cid, entry)
            continue
        lines, files, texts = {}, {}, {}
        for key, value in entry.items():
            if RELEASE_RE.match(key):
                if not isinstance(value, int) or value < 1:
                    raise ValueError(f"{cid}: line for {key} must be a positive integer")
                lines[key] = value
            elif key.startswith("text_") or key.startswith("file_"):
                release = key[5:].replace("_", ".")
                if not RELEASE_RE.match(release):
                    raise ValueError(f"{cid}: {key}: expected text_X_Y_Z or file_X_Y_Z")
                if key.startswith("text_"):
                    texts[release] = _text(value)
                else:
                    files[release] = value
            elif key not in ("file", "text", "note", "gone"):
                raise ValueError(f"{cid}: unknown key {key!r}")
        for key in ("file", "text"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise ValueError(f"{cid}: missing {key}")
        if not lines:
            raise ValueError(f'{cid}: no release line ("X.Y.Z" = N)')
        stray = (set(texts) | set(files)) - set(lines)
        if stray:
            raise ValueError(f"{cid}: per-release text or file for unlisted release {sorted(stray)}")
        gone = entry.get("gone", "")
        if gone and (not RELEASE_RE.match(gone) or any(release_key(r) >= release_key(gone) for r in lines)):
            raise ValueError(f"{cid}: gone = {gone!r} must be a release after every release it lists")
        out[cid] = Citation(cid, entry["file"], _text(entry["text"]), lines, entry.get("note", ""), files, texts, gone)
    return out


def _plugin_entry(cid: str, entry: dict) -> Citation:
    """A citation of a platform plugin's pinned code: plugin, file (from the plugin's
    tree root), line and text; no release keys."""
    stray = sorted(set(entry) - {"plugin", "file", "line", "text", "note"})
    if stray:
        raise ValueError(f"{cid}: a plugin citation has plugin, file, line, text and note; not {stray}")
    for key in ("plugin", "file", "text"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise ValueError(f"{cid}: missing {key}")
    line = entry.get("line")
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        raise ValueError(f"{cid}: line must be a positive integer (where the text starts in the pinned code)")
    return Citation(
        cid, entry["file"], _text(entry["text"]), {}, entry.get("note", ""), plugin=entry["plugin"], pinned=line
    )


def vllm_only(cits: dict[str, Citation]) -> dict[str, Citation]:
    """The citations of vLLM's code (not of a plugin's)."""
    return {cid: c for cid, c in cits.items() if not c.plugin}


def of_plugin(cits: dict[str, Citation], plugin: str) -> dict[str, Citation]:
    """The citations of one plugin's pinned code."""
    return {cid: c for cid, c in cits.items() if c.plugin == plugin}


def _text(raw: str) -> str:
    """A TOML multi-line string ends with the newline before its closing quotes."""
    return raw[:-1] if raw.endswith("\n") else raw


@lru_cache(maxsize=None)
def _load(path: Path, mtime: float) -> dict[str, Citation]:
    with open(path, "rb") as f:
        return parse(tomllib.load(f))


def load(path: Path = TOML_PATH) -> dict[str, Citation]:
    """All citations, by id (cached until the file changes)."""
    return _load(path, path.stat().st_mtime)


def releases(cits: dict[str, Citation] | None = None) -> list[str]:
    """Every release the citations know of, oldest first."""
    cits = load() if cits is None else cits
    known = {r for c in cits.values() for r in c.lines} | {c.gone for c in cits.values() if c.gone}
    return sorted(known, key=release_key)


def resolve(cid: str, release: str) -> tuple[str, int, int, str]:
    """(file, first line, last line, text) of a citation in a release it lists."""
    cits = load()
    if cid not in cits:
        raise KeyError(f"no citation {cid!r} in {TOML_PATH.name}")
    c = cits[cid]
    if c.plugin:  # a plugin's pinned code, whatever vLLM release
        return c.file, c.pinned, c.pinned + len(c.text.split("\n")) - 1, c.text
    if release not in c.lines:
        raise KeyError(f"citation {cid!r} is not in vLLM {release} (listed: {', '.join(c.releases())})")
    text = c.text_in(release)
    first = c.lines[release]
    return c.file_in(release), first, first + len(text.split("\n")) - 1, text


def ref(cid: str, release: str) -> tuple[str, str]:
    """("scheduler.py:1634-1636", the GitHub URL at the release's tag) for a citation."""
    file, first, last, _ = resolve(cid, release)
    span = f"{first}" if first == last else f"{first}-{last}"
    plugin = load()[cid].plugin
    if plugin:
        from vllm_contract.spec.plugin_runners import SOURCES

        source = SOURCES[plugin]
        return f"{Path(file).name}:{span} ({source.label})", source.url(file, first, last)
    url = REPO_URL.format(release=release, file=file, span=span if first == last else f"{first}-L{last}")
    return f"{Path(file).name}:{span}", url


def in_words(text: str, release: str) -> str:
    """Prose with its `[cite:...]` markers as file:line of a release (for docstrings and
    reports: a reader gets the line, not the id)."""

    def one(match: re.Match) -> str:
        refs = []
        for cid in match.group(2).replace(",", " ").split():
            try:
                refs.append(ref(cid, release)[0])
            except KeyError:
                refs.append(cid)
        return ", ".join(refs)

    return _MARKER.sub(one, text)


# ---- checking against a tree ------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """Where a citation's text is in a tree. status: ok | moved | changed | vanished."""

    id: str
    release: str  # the release whose recorded line and text were looked for
    status: str
    file: str
    line: int  # the recorded line
    found: int | None = None  # where the text (or the nearest similar block) starts now
    diff: tuple[str, ...] = ()  # for "changed": the differing lines, - recorded / + now
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "ok":
            return f"{self.id}: ok at {self.file}:{self.line}"
        if self.status == "moved":
            return f"{self.id}: moved {self.file}:{self.line} -> {self.found}{self._more()}"
        if self.status == "changed":
            return f"{self.id}: changed {self.file}:{self.line}, nearest block at {self.found}{self._more()}"
        return f"{self.id}: vanished {self.file}:{self.line}{self._more()}"

    def _more(self) -> str:
        return f" ({self.detail})" if self.detail else ""


Problem = Finding  # what check() returns: the findings that are not ok


def tree_version(tree_root: Path | str) -> str | None:
    """The version a vLLM tree says it is (vllm/_version.py), if it says."""
    path = Path(tree_root) / "vllm" / "_version.py"
    if not path.exists():
        return None
    m = re.search(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", path.read_text(), re.M)
    return m.group(1) if m else None


def _norm(lines: list[str]) -> list[str]:
    return [line.rstrip() for line in lines]


def _at(file_lines: list[str], want: list[str], start: int) -> bool:
    """The text starts at 1-based line `start`."""
    i = start - 1
    return 0 <= i and i + len(want) <= len(file_lines) and file_lines[i : i + len(want)] == want


def _exact(file_lines: list[str], want: list[str]) -> list[int]:
    """Every 1-based line where the text starts."""
    n = len(want)
    return [i + 1 for i, line in enumerate(file_lines) if line == want[0] and file_lines[i : i + n] == want]


def _similar(file_lines: list[str], want: list[str], near: int) -> tuple[float, int, int]:
    """The block most like the text: (ratio, first line, length); ties go to the block
    nearest `near`. Compared character by character with indentation stripped, as a
    reader compares code. Blocks that share a line with the text are tried first; the
    whole file is scanned only when none does."""
    target = "\n".join(s.strip() for s in want)
    stripped = [s.strip() for s in file_lines]
    sm = difflib.SequenceMatcher(autojunk=False)
    sm.set_seq2(target)
    n = len(want)
    best = (0.0, 1, n)

    def consider(start: int, length: int) -> None:
        nonlocal best
        if start < 0 or length < 1 or start + length > len(file_lines):
            return
        sm.set_seq1("\n".join(stripped[start : start + length]))
        if sm.real_quick_ratio() < best[0] or sm.quick_ratio() < best[0]:
            return
        r = sm.ratio()
        if r > best[0] + 1e-9 or (abs(r - best[0]) <= 1e-9 and abs(start + 1 - near) < abs(best[1] - near)):
            best = (r, start + 1, length)

    where: dict[str, list[int]] = {}
    for j, line in enumerate(stripped):
        where.setdefault(line, []).append(j)
    starts = sorted(
        {j - i for i, line in enumerate(s.strip() for s in want) if len(line) > 3 for j in where.get(line, ())}
    )
    for start in starts or _likeliest_starts(stripped, want, near):
        consider(start, n)
    # let the block grow or shrink by a few lines at either end (lines inserted or removed)
    _, first, length = best
    for d_first in range(-3, 4):
        for d_len in range(-3, 4):
            consider(first - 1 + d_first, length + d_len - d_first)
    # a block that still begins and ends with the text's first and last lines shows the
    # whole change in its diff, even when a shorter block scores higher
    r, first, length = best
    lo, hi = first - 1, first - 1 + length
    heads = [j for j in range(lo - 6, lo + 7) if 0 <= j < len(stripped) and stripped[j] == want[0].strip()]
    tails = [j + 1 for j in range(hi - 7, hi + 6) if 0 <= j < len(stripped) and stripped[j] == want[-1].strip()]
    if heads and tails:
        lo2, hi2 = min(heads, key=lambda j: abs(j - lo)), min(tails, key=lambda j: abs(j - hi))
        if lo2 < hi2 and (lo2, hi2) != (lo, hi):
            sm.set_seq1("\n".join(stripped[lo2:hi2]))
            best = (sm.ratio(), lo2 + 1, hi2 - lo2)
    return best


def _likeliest_starts(stripped: list[str], want: list[str], near: int, keep: int = 24) -> list[int]:
    """Where to compare when the text shares no line with the file: the `keep` blocks
    sharing the most words with it (nearest `near` first among equals). A character
    comparison of every block costs seconds per citation on a 2,000-line file; this
    costs a count of words, and a block rewritten line by line still shares its names."""
    words = Counter(re.findall(r"\w+", " ".join(s.strip() for s in want)))
    per_line = [Counter(re.findall(r"\w+", line)) for line in stripped]
    n = len(want)
    scored = []
    for start in range(max(len(stripped) - n + 1, 1)):
        block = sum(per_line[start : start + n], Counter())
        scored.append((-sum((block & words).values()), abs(start + 1 - near), start))
    return sorted(start for *_, start in sorted(scored)[:keep])


def _diff(want: list[str], got: list[str], limit: int = 3) -> tuple[str, ...]:
    out = []
    for line in difflib.unified_diff(want, got, lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        out.append(line)
    return tuple(out[:limit]) + ((f"... {len(out) - limit} more",) if len(out) > limit else ())


def anchor(
    tree_root: Path | str, release: str | None, cits: dict[str, Citation] | None = None, progress=None
) -> list[Finding]:
    """Look for every citation that applies to `release` in the tree at `tree_root` (the
    folder holding vllm/). A citation that lists the release is looked for at its line
    there; one that does not is re-anchored from its newest release before (see
    Citation.base_for); release None means a tree after every recorded release. A
    plugin's citations are not looked for (anchor_plugin)."""
    cits = vllm_only(load() if cits is None else cits)
    oldest = releases(cits)[0] if cits else None
    todo = [
        (c, base, c.file_in(base), c.lines[base], c.text_in(base))
        for c in cits.values()
        if (base := c.base_for(release, oldest))
    ]
    return _anchor_in(Path(tree_root) / "vllm", todo, progress)


def anchor_plugin(
    tree_root: Path | str, plugin: str, cits: dict[str, Citation] | None = None, progress=None
) -> list[Finding]:
    """Look for every citation of a plugin's pinned code in a tree of that plugin (the
    folder its package folders are in: an unpacked wheel or sdist, or a checkout), each at
    the line it records."""
    cits = of_plugin(load() if cits is None else cits, plugin)
    todo = [(c, "pinned", c.file, c.pinned, c.text) for c in cits.values()]
    return _anchor_in(Path(tree_root), todo, progress)


def _anchor_in(root: Path, todo: list, progress=None) -> list[Finding]:
    """Each (citation, base, file, line, text) of todo looked for under root: at its line,
    moved (found once elsewhere, or nearest where its neighbours moved when found more
    than once), changed (a similar block) or vanished."""
    files: dict[str, list[str] | None] = {}

    def lines_of(file: str) -> list[str] | None:
        if file not in files:
            path = root / file
            files[file] = _norm(path.read_text(encoding="utf-8").split("\n")) if path.is_file() else None
        return files[file]

    findings: dict[str, Finding] = {}
    ambiguous: dict[str, list[int]] = {}
    for c, base, file, line, text in todo:
        want = _norm(text.split("\n"))
        have = lines_of(file)
        if have is None:
            findings[c.id] = Finding(c.id, base, "vanished", file, line, detail=FILE_GONE)
        elif _at(have, want, line):
            findings[c.id] = Finding(c.id, base, "ok", file, line)
        else:
            hits = _exact(have, want)
            if len(hits) == 1:
                findings[c.id] = Finding(c.id, base, "moved", file, line, hits[0])
            elif hits:
                ambiguous[c.id] = hits
    # a text found more than once goes to the match nearest where its neighbours moved
    for c, base, file, line, _ in todo:
        if c.id not in ambiguous:
            continue
        hits = ambiguous[c.id]
        predicted = line + _shift_near(findings, base, file, line)
        found = min(hits, key=lambda h: abs(h - predicted))
        status = "ok" if found == line else "moved"
        findings[c.id] = Finding(
            c.id,
            base,
            status,
            file,
            line,
            None if status == "ok" else found,
            detail=f"{len(hits)} exact matches, took the one nearest line {predicted}",
        )
    slow = [item for item in todo if item[0].id not in findings]
    for i, (c, base, file, line, text) in enumerate(slow):
        if progress:
            progress(f"{c.id}: not found as cited, looking for the nearest block ({i + 1}/{len(slow)})")
        want = _norm(text.split("\n"))
        have = lines_of(file)
        assert have is not None  # a file that is gone has its finding ("vanished") already
        predicted = line + _shift_near(findings, base, file, line)
        ratio, first, length = _similar(have, want, predicted)
        got = have[first - 1 : first - 1 + length]
        unrelated = _unrelated(want, got, have, first, predicted)
        if ratio >= SIMILAR and not unrelated:
            findings[c.id] = Finding(c.id, base, "changed", file, line, first, _diff(want, got), f"{ratio:.0%} similar")
        else:
            why = unrelated or f"best block {ratio:.0%} similar, at line {first}"
            findings[c.id] = Finding(c.id, base, "vanished", file, line, None, detail=f"text not in the file; {why}")
    return [findings[c.id] for c, *_ in todo]


# names too common in vLLM's scheduler to tell one mechanism from another
_COMMON_NAMES = frozenset(
    {"request", "requests", "req_id", "request_id", "num_tokens", "scheduler_output", "self", "return"}
)
# how far (lines) from where its neighbours moved a changed block may be without sharing a name
NEAR = 40


def _names(lines: list[str]) -> set[str]:
    """The distinctive identifiers of some code: names with an underscore, less the common ones."""
    return {n for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", "\n".join(lines)) if "_" in n.strip("_")} - _COMMON_NAMES


def _unrelated(want: list[str], got: list[str], have: list[str], first: int, predicted: int) -> str:
    """Why the most similar block is not the cited mechanism changed, or "": a block far from
    where the neighbouring citations moved that keeps none of the cited text's distinctive
    names is an unrelated line that happens to look alike (a `.clear()` for a deleted
    set's `.clear()`); the names no longer anywhere in the file say what went."""
    names = _names(want)
    if not names or names & _names(got) or abs(first - predicted) <= NEAR:
        return ""
    text = "\n".join(have)
    gone = sorted(n for n in names if n not in text)
    if gone:
        return f"{', '.join(gone)} no longer in the file"
    return f"the most similar block (line {first}) is far from where its neighbours moved and shares none of its names"


def _shift_near(findings: dict[str, Finding], base: str, file: str, line: int) -> int:
    """How far the uniquely found citations nearest `line` in the same file moved."""
    moves = [
        (abs(f.line - line), (f.found or f.line) - f.line)
        for f in findings.values()
        if f.file == file and f.release == base and f.status in ("ok", "moved") and "exact matches" not in f.detail
    ]
    return min(moves)[1] if moves else 0


def check(tree_root: Path | str, release: str | None, cits: dict[str, Citation] | None = None) -> list[Finding]:
    """The citations that do not hold in the tree: moved, changed or vanished."""
    return [f for f in anchor(tree_root, release, cits) if not f.ok]


# ---- references from code ----------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    id: str
    path: str
    line: int
    how: str  # "marker" | "field"


def find_ids(path: Path | str) -> list[Reference]:
    """The citation ids a Python source file refers to (see the module docstring)."""
    path = Path(path)
    source = path.read_text(encoding="utf-8")
    refs: list[Reference] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.STRING):
            continue
        for m in _MARKER.finditer(tok.string):
            line = tok.start[0] + tok.string[: m.start()].count("\n")
            refs.extend(Reference(i, str(path), line, "marker") for i in re.split(r"[ ,]+", m.group(2)))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for value in _field_values(node):
                refs.extend(Reference(i, str(path), value.lineno, "field") for i in field_ids(value.value))
    return refs


def field_ids(value: str) -> list[str]:
    """The ids in a record's cite/source field: tokens outside parentheses."""
    bare = re.sub(r"\([^()]*\)", " ", value)
    bare = _MARKER.sub(lambda m: " " + m.group(2) + " ", bare)
    return [t for t in re.split(r"[\s,;]+", bare) if _ID.match(t)]


def _field_values(node: ast.Call):
    """The string constants given as the citation field of a record constructor call."""
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name not in RECORD_FIELDS:
        return
    module, field = RECORD_FIELDS[name]
    for kw in node.keywords:
        if kw.arg == field:
            yield from _strings(kw.value)
            return
    index = _field_index(module, name, field)
    if index < len(node.args):
        yield from _strings(node.args[index])


def _strings(node: ast.AST):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, ast.JoinedStr):
        for part in node.values:
            yield from _strings(part)


@lru_cache(maxsize=None)
def _field_index(module: str, name: str, field: str) -> int:
    import importlib

    cls = getattr(importlib.import_module(module), name)
    return [f.name for f in dataclasses.fields(cls)].index(field)


def find_legacy(path: Path | str) -> list[tuple[int, str]]:
    """Inline `abbr:line` citations left in a file: (line, citation)."""
    out: list[tuple[int, str]] = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
        out.extend((n, m.group(0)) for m in LEGACY_RE.finditer(line))
    return out

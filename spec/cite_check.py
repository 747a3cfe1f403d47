"""Re-anchor every vLLM citation against a tree: the first thing to run on a new release.

    python -m spec.cite_check --vllm <folder holding vllm/> [--release X.Y.Z] [--write] [--all]

Prints, per citation, ok / moved (old line -> new line) / changed (with the differing
lines) / vanished, then totals; exits 0 only when every citation is ok. Without
--release the release is the one the tree's vllm/_version.py names, when it is a plain
X.Y.Z; otherwise the tree counts as newer than every recorded release. With --write
(and --release) the lines found for ok and moved citations are recorded for that
release in spec/citations.toml; changed and vanished ones are left for a person to
decide (a new text_X_Y_Z, or gone = "X.Y.Z").
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import tomllib
from pathlib import Path

from spec import citations as C

ORDER = {"changed": 0, "vanished": 1, "moved": 2, "ok": 3}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spec.cite_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", required=True, type=Path, help="the folder holding vllm/ (site-packages for an install)")
    ap.add_argument("--release", help="the release the tree is (X.Y.Z); default: from vllm/_version.py")
    ap.add_argument("--write", action="store_true", help="record the found lines for --release in citations.toml")
    ap.add_argument("--all", action="store_true", help="list ok citations one per line too")
    ap.add_argument("--toml", type=Path, default=C.TOML_PATH, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if not (args.vllm / "vllm").is_dir():
        print(f"cite-check: {args.vllm} holds no vllm/ folder (pass the folder above vllm/, e.g. site-packages)")
        return 2
    if args.release and not C.RELEASE_RE.match(args.release):
        print(f"cite-check: --release {args.release!r} is not X.Y.Z")
        return 2
    if args.write and not args.release:
        print("cite-check: --write needs --release X.Y.Z (the release whose lines are recorded)")
        return 2
    cits = C.load(args.toml)
    release, said = args.release, C.tree_version(args.vllm)
    if release is None and said and C.RELEASE_RE.match(said):
        release = said
    where = f"vLLM {release}" if release else f"a tree after {C.releases(cits)[-1]} (it says {said or 'no version'})"
    print(f"cite-check: {len(cits)} citations against {where} at {args.vllm}")

    started = time.monotonic()

    def progress(msg: str) -> None:
        if time.monotonic() - started > 1.0:
            print(f"  ... {msg}", file=sys.stderr, flush=True)

    findings = C.anchor(args.vllm, release, cits, progress=progress)
    skipped = len(cits) - len(findings)
    _table(findings, release, args.all)

    counts = {s: sum(f.status == s for f in findings) for s in ORDER}
    totals = ", ".join(f"{n} {s}" for s, n in counts.items())
    not_in = f"; {skipped} not in this release" if skipped else ""
    print(f"\ncite-check: {len(findings)} checked: {totals}{not_in} ({time.monotonic() - started:.1f} s)")

    if args.write:
        found = {f.id: (f.found or f.line) for f in findings if f.status in ("ok", "moved")}
        changed = write_lines(args.toml, release, found)
        print(f"cite-check: recorded {changed} line(s) for {release} in {args.toml}")
    elif counts["moved"]:
        print(
            f"cite-check: to record the moved lines: python -m spec.cite_check --vllm {args.vllm} "
            f"--release {release or 'X.Y.Z'} --write"
        )
    if counts["changed"] or counts["vanished"]:
        print(
            "cite-check: for each changed or vanished citation, read the code: if the mechanism is the "
            'same, add its new text as text_X_Y_Z and the line; if it is gone, set gone = "X.Y.Z" and '
            "cite what replaced it under a new id"
        )
    return 0 if all(f.ok for f in findings) else 1


def _table(findings: list[C.Finding], release: str | None, show_ok: bool) -> None:
    rows = sorted(findings, key=lambda f: (ORDER[f.status], f.file, f.line))
    width = max((len(f.id) for f in rows), default=10)
    ok = 0
    for f in rows:
        if f.ok and not show_ok:
            ok += 1
            continue
        loc = f"{Path(f.file).name}:{f.line}"
        if f.status == "moved":
            loc += f" -> {f.found}"
        elif f.status == "changed":
            loc += f" ~ {f.found}"
        base = "" if f.release == release else f" [from {f.release}]"
        more = f"  {f.detail}" if f.detail else ""
        print(f"  {f.status:<8} {f.id:<{width}}  {loc}{base}{more}")
        for d in f.diff:
            print(f"  {'':<8} {'':<{width}}    {d.strip() if d.startswith('...') else d[0] + ' ' + d[1:].strip()}")
    if ok:
        print(f"  ok       {ok} citation(s) at their recorded line (--all lists them)")


# ---- recording lines in citations.toml ------------------------------------------------------

_HEADER = re.compile(r'^\[(?:"([^"]+)"|([A-Za-z0-9_-]+))\]\s*$')
_LINE = re.compile(r'^"(\d+\.\d+\.\d+)" = (\d+)\s*$')


def write_lines(path: Path, release: str, found: dict[str, int]) -> int:
    """Set `"release" = line` in each entry of `found`, editing only those lines (the
    rest of the file stays byte for byte); returns how many lines changed."""
    lines = path.read_text(encoding="utf-8").split("\n")
    entries = _entries(lines)
    changed = 0
    # edit from the bottom so earlier positions stay valid
    for cid in sorted(found, key=lambda i: entries[i][0], reverse=True):
        start, stop = entries[cid]
        want = f'"{release}" = {found[cid]}'
        at = [i for i in range(start + 1, stop) if _LINE.match(lines[i])]
        same = [i for i in at if _LINE.match(lines[i]).group(1) == release]
        if same:
            if lines[same[0]] != want:
                lines[same[0]] = want
                changed += 1
            continue
        later = [i for i in at if C.release_key(_LINE.match(lines[i]).group(1)) > C.release_key(release)]
        if later:
            pos = later[0]
        elif at:
            pos = at[-1] + 1
        else:
            pos = next(i for i in range(start + 1, stop) if lines[i].startswith("file =")) + 1
        lines.insert(pos, want)
        changed += 1
    text = "\n".join(lines)
    parsed = C.parse(tomllib.loads(text))  # never write a file that does not load
    assert all(parsed[cid].lines[release] == line for cid, line in found.items())
    if changed:
        path.write_text(text, encoding="utf-8")
    return changed


def _entries(lines: list[str]) -> dict[str, tuple[int, int]]:
    """id -> (header index, index of the line after the entry), skipping string bodies."""
    out: dict[str, tuple[int, int]] = {}
    current, start, in_text = None, 0, False
    for i, line in enumerate(lines):
        if in_text:
            in_text = line.count("'''") % 2 == 0
            continue
        if line.startswith("#"):
            continue
        if line.count("'''") % 2 == 1:
            in_text = True
            continue
        m = _HEADER.match(line)
        if m:
            if current:
                out[current] = (start, i)
            current, start = m.group(1) or m.group(2), i
    if current:
        out[current] = (start, len(lines))
    return out


if __name__ == "__main__":
    sys.exit(main())

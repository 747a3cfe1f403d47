"""Recording the lines `vllm-contract cite-check --write` found for a release in spec/citations.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from vllm_contract.spec import citations as C

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
        # the entry's `"release" = line` lines: (index, release)
        at = [(i, m.group(1)) for i in range(start + 1, stop) if (m := _LINE.match(lines[i]))]
        same = [i for i, r in at if r == release]
        if same:
            if lines[same[0]] != want:
                lines[same[0]] = want
                changed += 1
            continue
        later = [i for i, r in at if C.release_key(r) > C.release_key(release)]
        if later:
            pos = later[0]
        elif at:
            pos = at[-1][0] + 1
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

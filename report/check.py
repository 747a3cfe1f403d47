"""Render a report folder in a real Markdown + Mermaid renderer (report/check.mjs).

    python -m report.check REPORT_DIR [--html OUT_DIR]

The renderer is Mermaid (the version GitHub-style viewers run) in headless Chromium,
driven by puppeteer-core, and marked for the Markdown; `make report-deps` installs them
(npm ci from package-lock.json, Debian's chromium). A diagram that does not parse or
lay out is an error naming the page and the diagram.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).with_name("check.mjs")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


class RenderError(RuntimeError):
    """The renderer is missing or did not run; one line with the fix."""


def missing() -> str | None:
    """What of the renderer is not installed here (None: all of it)."""
    if shutil.which("node") is None:
        return "node is not installed: install Node.js 20 or newer"
    for package in ("marked", "mermaid", "puppeteer-core"):
        if not (ROOT / "node_modules" / package / "package.json").is_file():
            return f"node_modules/{package} is missing: run `make report-deps` (npm ci)"
    if not Path(CHROMIUM).is_file():
        return f"{CHROMIUM} is missing: run `make report-deps` (apt-get install chromium)"
    return None


def render_all(folder: Path, html: Path | None = None, timeout_s: float = 300) -> dict:
    """Render every page of `folder`; returns check.mjs's JSON (errors listed there)."""
    why = missing()
    if why:
        raise RenderError(f"the Mermaid renderer cannot run: {why}")
    command = ["node", str(SCRIPT), str(folder), "--chromium", CHROMIUM]
    if html is not None:
        command += ["--html", str(html)]
    try:
        done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RenderError(f"the Mermaid renderer ran past {timeout_s:g} s on {folder}") from None
    if done.returncode not in (0, 1):
        raise RenderError(f"the Mermaid renderer failed (exit {done.returncode}) on {folder}; its message is above")
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RenderError(f"the Mermaid renderer printed no result: {done.stdout[-300:]!r}") from None


def render_text(diagrams: list[str], workdir: Path) -> dict:
    """Render loose diagrams (tests): each becomes a page of its own."""
    for i, text in enumerate(diagrams):
        (workdir / f"d{i:03d}.md").write_text(f"```mermaid\n{text}```\n")
    return render_all(workdir)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m report.check", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--html", type=Path)
    args = ap.parse_args(argv)
    try:
        result = render_all(args.folder, args.html)
    except RenderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for e in result["errors"]:
        print(f"error: {args.folder}/{e['page']}, diagram {e['diagram']}: {e['message'].splitlines()[0]}")
    print(
        f"{result['diagrams']} diagram(s) on {result['pages']} page(s): {len(result['errors'])} failed "
        f"(Mermaid {result['mermaid']}, {result['chromium']}, {result['seconds']:.1f} s)"
    )
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

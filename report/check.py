"""Render a report folder in a real Markdown + Mermaid renderer (report/check.mjs).

The renderer is Mermaid (the version GitHub-style viewers run) in headless Chromium,
driven by puppeteer-core, and marked for the Markdown; `make report-deps` installs them
(npm ci from package-lock.json, Debian's chromium). A diagram that does not parse or
lay out is an error naming the page and the diagram.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
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
    # Node and the Chromium it starts run in a process group of their own, ended with us:
    # on every exit path here (an interrupt, SIGTERM, a timeout) the whole group is
    # killed, and if this process is killed outright Node gets SIGTERM from the kernel and
    # closes its browser (check.mjs)
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=None,
        text=True,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    try:
        stdout, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RenderError(f"the Mermaid renderer ran past {timeout_s:g} s on {folder}") from None
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if process.returncode not in (0, 1):
        raise RenderError(f"the Mermaid renderer failed (exit {process.returncode}) on {folder}; its message is above")
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RenderError(f"the Mermaid renderer printed no result: {stdout[-300:]!r}") from None


def _die_with_parent() -> None:
    from model.workers import die_with_parent

    die_with_parent(signal.SIGTERM)


def render_text(diagrams: list[str], workdir: Path) -> dict:
    """Render loose diagrams (tests): each becomes a page of its own."""
    for i, text in enumerate(diagrams):
        (workdir / f"d{i:03d}.md").write_text(f"```mermaid\n{text}```\n")
    return render_all(workdir)

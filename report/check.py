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
import threading
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
    # Node runs in a process group of its own and Chromium in another (puppeteer starts it
    # detached); both end with us. On every exit path here (an interrupt, SIGTERM, a
    # timeout) `_end` asks Node to close its browser, then kills both groups. If this
    # process is killed outright, Node gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and
    # closes its browser, and Chromium, which talks to Node over a pipe, ends when Node does
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
            _end(process)
    if process.returncode not in (0, 1):
        raise RenderError(f"the Mermaid renderer failed (exit {process.returncode}) on {folder}; its message is above")
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RenderError(f"the Mermaid renderer printed no result: {stdout[-300:]!r}") from None


CLOSE_WAIT_S = 5.0  # how long Node may take to close its browser before both are killed


def _end(process: subprocess.Popen) -> None:
    """End Node and every process it started, whatever group or session they are in:
    their groups are noted first (Chromium's is its own, and its processes stay in it
    when Node is gone), Node is asked to close its browser (SIGTERM, CLOSE_WAIT_S), then
    every group noted and Node's are killed."""
    with _signals_held():  # a second Ctrl-C must not cut this short and leave the browser running
        groups = {process.pid} | {_group(pid) for pid in descendants(process.pid)}
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(CLOSE_WAIT_S)
        for group in sorted(g for g in groups if g and g != os.getpgrp()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM wait until the block ends (in the main thread; elsewhere they reach it anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def descendants(root: int) -> set[int]:
    """Every process below `root` now (Linux /proc: each process's parent)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _group(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return 0


def _die_with_parent() -> None:
    from vllm_contract.model.workers import die_with_parent

    die_with_parent(signal.SIGTERM)


def render_text(diagrams: list[str], workdir: Path) -> dict:
    """Render loose diagrams (tests): each becomes a page of its own."""
    for i, text in enumerate(diagrams):
        (workdir / f"d{i:03d}.md").write_text(f"```mermaid\n{text}```\n")
    return render_all(workdir)

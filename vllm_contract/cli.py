"""`vllm-contract`: one command, a subcommand for everything the Makefile runs.

    vllm-contract --help                 the subcommands
    vllm-contract SUBCOMMAND --help      its options and exit statuses

Each subcommand lives in vllm_contract/commands/<name>.py: its one-line help, its
exit statuses, its arguments and `run(args) -> exit status`. An error a subcommand
raises (spec/errors.py) is printed here as one line, `error: ...`, and its status is the
exit status; nothing else reaches the terminal as a traceback but a bug of our own.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from vllm_contract.parsing import Parser, statuses_epilog
from vllm_contract.spec.errors import ContractError, ExitStatus

# the subcommands, in the order --help lists them
COMMANDS = (
    "prove",
    "generate",
    "check-generated",
    "export",
    "export-check",
    "report",
    "review",
    "explain",
    "diff-versions",
    "cite-check",
    "fuzz",
    "bench",
    "fetch-vllm",
    "preflight",
    "fetch-plugin",
    "fix-trees",
    "fix-check",
    "vllm-tests",
)


def command_module(name: str):
    return importlib.import_module("vllm_contract.commands." + name.replace("-", "_"))


def build_parser() -> Parser:
    parser = Parser(
        prog="vllm-contract",
        description="A formal model of vLLM's reservation/discard contract, with generated conformance tests.",
        epilog=statuses_epilog({s: s.meaning for s in ExitStatus}) + "\n\nvllm-contract SUBCOMMAND --help for each.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND", parser_class=Parser)
    for name in COMMANDS:
        module = command_module(name)
        child = sub.add_parser(
            name,
            description=(module.__doc__ or "").strip(),
            epilog=statuses_epilog(module.STATUSES),
            formatter_class=argparse.RawDescriptionHelpFormatter,
            prog=f"vllm-contract {name}",
            help=module.HELP,
        )
        module.add_arguments(child)
        child.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return ExitStatus.BAD_INPUT
        return int(args.run(args))
    except ContractError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.status)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return int(ExitStatus.INTERRUPTED)


def entry() -> None:
    """The console script. Output piped into a reader that stops early (`| head`) ends
    the command quietly, as other command-line tools do."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 0
    sys.exit(status)

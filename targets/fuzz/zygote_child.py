"""A fuzz campaign's process for one release: it loads the release and forks the workers.

Started by the campaign's LocalPool (targets/fuzz/campaign_run.py) through adapter/child.py,
with the socket it talks on passed as a descriptor.
"""

from __future__ import annotations

from multiprocessing.connection import Connection

NAME = "fuzz-release-process"


def add_arguments(parser) -> None:
    parser.add_argument("release", help="the vLLM release this process loads")
    parser.add_argument("--fd", type=int, required=True, help="the descriptor of the socket to the campaign")
    parser.add_argument("--coordinator", type=int, required=True, help="the campaign's process id")


def run(args) -> int:
    from vllm_contract.targets.fuzz.campaign_run import zygote

    zygote(args.release, Connection(args.fd), args.coordinator)
    return 0

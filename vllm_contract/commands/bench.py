"""Benchmarks, with ratios side by side in one run; results are committed under bench/results/.

  prover            the prover's and the suites' costs against their targets (default)
  peers             the BMC against a random walk, Hypothesis and BFS on every violated case
  scaling           counterexample searches on bigger instances (requests, pp, K)
  real-runner       every generated case on vLLM's scheduler with vLLM's own model runner
  kernel-agreement  per V2 case: does the live kernel agree where the snapshot kernel does not?
  kernels-gpu       the discard kernels on a GPU (correctness only under the interpreter)
  runner-measure    conditions about the real runner's positions and input ids, checked
  speed             make prove cold against warm, first counterexamples against a random walk, make test's stages
  explain           make explain over the whole matrix for three kinds of counters
  fuzz-scaling      one fuzz campaign on 1 and 2 local workers and on a two-node Ray cluster
  monitor           vLLM's scheduler with and without the contract monitor: step time and memory

Arguments after the benchmark's name are its own (`vllm-contract bench peers --help`);
every benchmark takes --small, a size of seconds that only checks it runs (and writes no
committed result).
"""

from __future__ import annotations

import argparse
import importlib

from vllm_contract.spec.errors import ExitStatus

NAME = "bench"
STATUSES = {
    ExitStatus.OK: "measured",
    ExitStatus.FINDING: "measured, and a target or a check was missed (the benchmark says which)",
    ExitStatus.BAD_INPUT: "bad input",
}
BENCHES = {
    "prover": "vllm_contract.bench.prover_bench",
    "peers": "vllm_contract.bench.peers",
    "scaling": "vllm_contract.bench.scaling",
    "real-runner": "vllm_contract.bench.real_runner_bench",
    "kernel-agreement": "vllm_contract.bench.kernel_agreement",
    "kernels-gpu": "vllm_contract.bench.kernels_gpu",
    "runner-measure": "vllm_contract.bench.runner_measure",
    "speed": "vllm_contract.bench.speed",
    "explain": "vllm_contract.bench.explain_speed",
    "fuzz-scaling": "vllm_contract.bench.fuzz_scaling",
    "monitor": "vllm_contract.bench.monitor_cost",
}
HELP = "run a benchmark (" + ", ".join(BENCHES) + ")"


def add_arguments(parser) -> None:
    parser.add_argument("which", nargs="?", default="prover", choices=BENCHES, help="the benchmark (default: prover)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own arguments")


def run(args) -> int:
    module = importlib.import_module(BENCHES[args.which])
    return int(module.main(args.args) or 0)

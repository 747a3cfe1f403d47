"""What the real-runner target costs: every generated case on vLLM's scheduler + runner.

Runs in one process per vLLM tree (vLLM is imported once), as pytest would: the
`runner` and `runner-clamp` targets replay every generated case's arms of the loaded
release. Prints a table (import and first build, the whole suite, per case, per step,
V1 against V2) against the 3-minute target on this machine kind, and the same numbers
as one line per measure for bench/results/.

    vllm-contract bench real-runner [--vllm 0.32.0|0.33.0] [--out FILE]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TARGET_SECONDS = 180.0  # all generated cases on the real-runner targets, 2 cores


def cases(small: bool = False):
    from vllm_contract.bench import generated_cases

    found = generated_cases()
    return itertools.islice(found, 2) if small else found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm", default=None)
    ap.add_argument("--out", default=None, help="also write the report to this file")
    ap.add_argument(
        "--small",
        action="store_true",
        help="two generated modules (a check that it runs)",
    )
    ns = ap.parse_args(argv)

    started = time.perf_counter()
    from vllm_contract.adapter import current as vllm_env

    vllm_env.select(ns.vllm)
    from vllm_contract.spec.errors import TargetUnavailable
    from vllm_contract.targets.harness import replay_case
    from vllm_contract.targets.real_runner import RealRunnerTarget, preflight

    load = time.perf_counter()
    vllm_env.load()
    line = preflight()
    first = time.perf_counter() - load
    targets = [RealRunnerTarget(clamp=False), RealRunnerTarget(clamp=True)]

    per_case, per_step = [], {"v1": [], "v2": []}
    ran = skipped = failed = steps = 0
    suite = time.perf_counter()
    for path, case in cases(ns.small):
        for target in targets:
            t0 = time.perf_counter()
            try:
                arms = replay_case(case, target)
            except TargetUnavailable:
                skipped += 1
                continue
            except AssertionError as exc:  # a divergence: counted, reported below
                failed += 1
                print(f"FAILED {path} on {target.name}: {str(exc).splitlines()[0]}", file=sys.stderr)
                continue
            dt = time.perf_counter() - t0
            ran += len(arms)
            n = len(case.steps) * len(arms)
            steps += n
            per_case.append(dt)
            kind = "v1" if case.config["runner"] == "v1" else "v2"
            per_step[kind].append(dt / max(n, 1))
    suite = time.perf_counter() - suite
    total = time.perf_counter() - started

    def ms(values):
        return f"{1000 * statistics.median(values):.0f} ms" if values else "-"

    rows = [
        ("tree", vllm_env.describe()),
        ("runner", line),
        ("cores", str(os.cpu_count())),
        ("import vLLM, build and step a V1 and a V2 runner (once per process)", f"{first:.1f} s"),
        ("arms run / skipped cases / failed", f"{ran} / {skipped} / {failed}"),
        ("steps replayed", str(steps)),
        ("all generated cases, runner + runner-clamp", f"{suite:.1f} s"),
        ("the same, process start to end (imports included)", f"{total:.1f} s"),
        (
            "target",
            f"{TARGET_SECONDS:.0f} s: {'met' if total <= TARGET_SECONDS else 'OVER'} ({total / TARGET_SECONDS:.2f}x)",
        ),
        ("median per case (both arms of a module on one target)", ms(per_case)),
        ("median per step, V1 cases", ms(per_step["v1"])),
        ("median per step, V2 cases (Triton interpreter)", ms(per_step["v2"])),
    ]
    width = max(len(k) for k, _ in rows)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    print(text)
    if ns.out:
        Path(ns.out).write_text(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

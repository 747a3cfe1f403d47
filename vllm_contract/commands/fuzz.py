"""Differential fuzzing, model against vLLM: random traces from the model replayed on a vLLM tree.

Every preset (targets/fuzz_presets.py) is played under the profile of the tree loaded
(--vllm, else $VLLM, else 0.32.0), so each release is fuzzed against its own model;
divergences are shrunk and printed as traces. --runner real replays on vLLM's own V1/V2
model runner too (targets/real_runner). Progress is shown every few seconds; Ctrl-C
stops with a summary of what ran, marked partial.
"""

from __future__ import annotations

import time
from collections import Counter

from spec.errors import ExitStatus, UsageError
from vllm_contract.outfolder import Terminated, interrupts
from vllm_contract.parsing import whole

NAME = "fuzz"
HELP = "differential fuzzing: random model traces replayed on a vLLM tree, divergences shrunk"
STATUSES = {
    ExitStatus.OK: "no divergence",
    ExitStatus.FINDING: "divergences found (each printed as a shrunk trace)",
    ExitStatus.COULD_NOT_RUN: "no divergence, but some traces could not be played (counted by cause)",
    ExitStatus.BAD_INPUT: "bad input (an unknown preset or mask, a campaign too large without --yes)",
    ExitStatus.TREE: "the vLLM tree does not load or cannot be driven",
    ExitStatus.INTERRUPTED: "interrupted: the summary of what ran is printed, marked partial",
    ExitStatus.TERMINATED: "terminated: the summary of what ran is printed, marked partial",
}
# above this many traces a campaign is confirmed with --yes (its cost is estimated first)
CONFIRM_ABOVE = 200_000
SECONDS_PER_TRACE = 0.12  # measured: 10,500 traces of length 40 in about 21 minutes on 2 cores


def add_arguments(parser) -> None:
    from targets.fuzz import RUNNERS
    from targets.fuzz_presets import KNOWN, PRESETS

    parser.add_argument("--config", action="append", help=f"preset(s): {', '.join(PRESETS)}")
    parser.add_argument("--cases", type=whole(1), default=100, help="traces per preset (make fuzz CASES=N)")
    parser.add_argument("--length", type=whole(1, 10_000), default=30, help="steps per trace at most")
    parser.add_argument("--seed", type=whole(0), default=0)
    parser.add_argument("--known", action="append", default=[], help=f"mask: {', '.join(KNOWN)} or 'all'")
    parser.add_argument("--no-minimize", action="store_true")
    parser.add_argument("--engine", action="store_true", help="also compare the engine loop's has_requests")
    parser.add_argument(
        "--runner",
        choices=RUNNERS,
        default="model",
        help="who decides what the runner returns: the model (default), or vLLM's own V1/V2 model runner",
    )
    parser.add_argument(
        "--vllm",
        default=None,
        help="vLLM tree: 0.32.0 (installed), 0.33.0 (make vllm-0.33.0) or a checkout path "
        "(default: $VLLM, else 0.32.0)",
    )
    parser.add_argument("--yes", action="store_true", help=f"run a campaign of more than {CONFIRM_ABOVE:,} traces")


def run(args) -> int:
    from targets.fuzz import format_trace, fuzz_config, new_target
    from targets.fuzz_presets import KNOWN, PRESETS

    unknown = [n for n in args.config or [] if n not in PRESETS]
    if unknown:
        raise UsageError(f"unknown --config {', '.join(unknown)}; presets: {', '.join(PRESETS)}")
    bad = [n for n in args.known if n != "all" and n not in KNOWN]
    if bad:
        raise UsageError(f"unknown --known {', '.join(bad)}; use {', '.join(KNOWN)} or 'all'")
    known = list(KNOWN) if "all" in args.known else args.known
    names = list(dict.fromkeys(args.config or PRESETS))  # a preset named twice runs once
    planned = len(names) * args.cases
    if planned > CONFIRM_ABOVE and not args.yes:
        hours = planned * SECONDS_PER_TRACE * (args.length / 40) / 3600
        raise UsageError(
            f"{planned:,} traces ({args.cases:,} per preset x {len(names)}) would take about {hours:,.0f} hour(s) "
            f"here; add --yes to run it, or ask for fewer --cases"
        )
    from targets import vllm_env

    vllm_env.select(args.vllm)
    print(f"fuzzing {vllm_env.preflight()}", flush=True)
    if args.runner == "real":
        from targets import real_runner

        print(f"with {real_runner.preflight()}", flush=True)
    target = new_target(args.runner)
    profile = vllm_env.tree().profile
    totals = {"divergent": 0, "traces": 0, "steps": 0}
    not_played: Counter = Counter()
    fired: Counter = Counter()
    runner_total: Counter = Counter()
    excluded_total: Counter = Counter()
    started = time.time()
    last = [started]
    done: list[str] = []

    def progress(message: str) -> None:
        print(message, flush=True)

    current: dict = {}

    def tick(preset: str, case: int, rep) -> None:
        current["rep"] = rep
        now = time.time()
        if now - last[0] >= 2:
            last[0] = now
            traces = totals["traces"] + case
            rate = traces / max(now - started, 1e-9)
            print(
                f"   ... {preset}: {case}/{args.cases} traces; {traces}/{planned} in all, {rate:.1f} traces/s, "
                f"{totals['divergent'] + sum(rep.signatures.values())} divergent so far",
                flush=True,
            )

    interrupted = None
    try:
        with interrupts():
            print(f"{planned} trace(s): {args.cases} per preset x {len(names)} preset(s)", flush=True)
            for name in names:
                rep = fuzz_config(
                    PRESETS[name].with_(profile=profile),
                    args.cases,
                    args.length,
                    args.seed,
                    target,
                    known,
                    minimize=not args.no_minimize,
                    runner=args.runner,
                    engine=args.engine,
                    log=progress,
                    tick=lambda case, rep, name=name: tick(name, case, rep),
                )
                done.append(rep.config)
                div = sum(rep.signatures.values())
                totals["divergent"] += div
                totals["traces"] += rep.cases
                totals["steps"] += rep.steps
                fired.update(rep.fired)
                print(
                    f"== {name}: {rep.cases} traces, {rep.steps} steps, {div} divergent "
                    f"({len(rep.signatures)} kinds), model-fatal ends {dict(rep.fired)}, {rep.seconds:.1f}s"
                )
                if rep.excluded:
                    excluded_total.update(rep.excluded)
                    print(
                        "   kept out (ended early at real_runner.beyond_runner_contract, or a pick redrawn): "
                        + ", ".join(f"{k} {v}" for k, v in rep.excluded.items())
                    )
                if rep.could_not_run:
                    not_played.update(rep.could_not_run)
                    print(
                        f"   could not run {sum(rep.could_not_run.values())} trace(s): "
                        + "; ".join(f"{cause} (x{n})" for cause, n in rep.could_not_run.items())
                    )
                if rep.runner:
                    runner_total.update(rep.runner)
                    print("   runner: " + ", ".join(f"{k} {v}" for k, v in rep.runner.items()))
                for found in rep.divergences:
                    print(f"-- {found.signature} x{rep.signatures[found.signature]} (seed {found.seed})")
                    print(format_trace(found.init, found.steps))
                    print(found.message)
    except Terminated:
        interrupted = ExitStatus.TERMINATED
    except KeyboardInterrupt:
        interrupted = ExitStatus.INTERRUPTED
    if interrupted is not None and current.get("rep") is not None and current["rep"].config not in done:
        rep = current["rep"]  # the preset that was cut short: what it ran counts
        totals["divergent"] += sum(rep.signatures.values())
        totals["traces"] += rep.cases
        totals["steps"] += rep.steps
        fired.update(rep.fired)
        not_played.update(rep.could_not_run)
    ends = ", ".join(f"{k} {v}" for k, v in sorted(fired.items())) or "none"
    scope = ""
    if interrupted is not None:
        left = [n for n in names if n not in done]
        scope = (
            f"PARTIAL (stopped by {'SIGTERM' if interrupted == ExitStatus.TERMINATED else 'Ctrl-C'}): "
            f"{len(done)} of {len(names)} preset(s) completed; not run or cut short: {', '.join(left)}; "
        )
    unplayed = sum(not_played.values())
    print(
        f"total: {scope}{totals['traces']} traces, {totals['steps']} steps, {totals['divergent']} divergent"
        + (f", {unplayed} could not run" if unplayed else "")
        + "; vLLM "
        f"asserts that ended a trace (fired in the model and in vLLM at the same step): {ends}; "
        f"{time.time() - started:.0f}s"
    )
    for cause, n in not_played.items():
        print(f"could not run (x{n}): {cause}")
    if excluded_total:
        print("kept out: " + ", ".join(f"{k} {v}" for k, v in excluded_total.items()))
    if runner_total:
        print("runner (per scheduled request): " + ", ".join(f"{k} {v}" for k, v in runner_total.items()))
    if interrupted is not None:
        return interrupted
    if totals["divergent"]:
        return ExitStatus.FINDING
    if unplayed:
        return ExitStatus.COULD_NOT_RUN
    return ExitStatus.OK

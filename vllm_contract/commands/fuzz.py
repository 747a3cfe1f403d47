"""Differential fuzzing, model against vLLM: a campaign of random model traces replayed on vLLM trees.

A campaign is releases x presets x runner modes x traces (targets/fuzz/campaign.py), run as
shards of 25 traces on --workers local processes (default: one per core), on a Ray
instance started here (--ray local) or on a Ray cluster (--ray ADDRESS, or --ray and
$RAY_ADDRESS). Each preset (targets/fuzz/presets.py) is played under the profile of the
release that runs it; --runner real replays on vLLM's own V1/V2 model runner too.

--out DIR holds the result: results.json (every trace a row, sorted by release, preset,
runner and index: the same bytes whatever the workers), summary.txt, timings.json
(times and hosts), cases/*.itf.json (each kind of divergence shrunk, for `vllm-contract
generate --trace`, with the command that replays its trace) and shards/ (each finished
shard, as it finishes). An interrupted campaign goes on with --resume; Ctrl-C stops it
with a result marked PARTIAL. Progress (traces/s, shards, divergences) every 2 s. One
campaign at a time writes --out (a lock file beside it, .NAME.lock, with the owner's pid).
Memory does not grow with the campaign: shards are computed as they are handed out, and
their rows are kept in shards/, not in memory.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import MutableMapping
from pathlib import Path

from vllm_contract.outfolder import OutFolder, Terminated, exclusive, interrupts, write_atomic
from vllm_contract.parsing import whole
from vllm_contract.spec.errors import ContractError, CouldNotRun, ExitStatus, UsageError

NAME = "fuzz"
HELP = "differential fuzzing: a campaign of random model traces on vLLM trees, on local workers or Ray"
STATUSES = {
    ExitStatus.OK: "no divergence",
    ExitStatus.FINDING: "divergences found (each a shrunk case under --out/cases)",
    ExitStatus.COULD_NOT_RUN: "no divergence, but some traces could not be played (counted by cause); no Ray to run on",
    ExitStatus.BAD_INPUT: "bad input (an unknown preset or mask, a campaign too large without --yes, no Ray for --ray)",
    ExitStatus.TREE: "a vLLM tree does not load or cannot be driven (the shards done stay for --resume)",
    ExitStatus.INTERRUPTED: "interrupted: what ran is written, marked PARTIAL; --resume goes on",
    ExitStatus.TERMINATED: "terminated: what ran is written, marked PARTIAL; --resume goes on",
}
# above this many traces a campaign is confirmed with --yes (its cost is estimated first)
CONFIRM_ABOVE = 200_000
SECONDS_PER_TRACE = 0.12  # measured: 10,500 traces of length 40 in about 21 minutes on 2 cores
DEFAULTS = {"cases": 100, "length": 30, "seed": 0, "runner": "model", "shard_size": 25}
TOOL = "vllm-contract fuzz"
RAY_MISSING = "--ray needs Ray, which is not installed here: pip install 'vllm-contract[ray]' (make venv does)"


def add_arguments(parser) -> None:
    from vllm_contract.targets.fuzz.presets import KNOWN, PRESETS

    parser.add_argument(
        "--presets", action="append", help=f"comma-separated presets (default all): {', '.join(PRESETS)}"
    )
    parser.add_argument("--config", action="append", help="a preset (the same as --presets, one name)")
    parser.add_argument(
        "--releases",
        action="append",
        help="comma-separated vLLM trees: releases, 'all', or checkout paths (default: $VLLM, else 0.32.0)",
    )
    parser.add_argument("--vllm", help="one vLLM tree (the same as --releases, one tree)")
    parser.add_argument("--runner", help="model, real or model,real: who decides what a step returns (default: model)")
    parser.add_argument("--cases", type=whole(1), help="traces per release, preset and runner (default 100)")
    parser.add_argument("--length", type=whole(1, 10_000), help="steps per trace at most (default 30)")
    parser.add_argument("--seed", type=whole(0), help="the campaign's seed (default 0)")
    parser.add_argument("--index", type=whole(0), help="play one trace, this index of each preset (a replay line)")
    parser.add_argument("--known", action="append", help=f"mask: {', '.join(KNOWN)} or 'all'")
    parser.add_argument("--no-minimize", dest="minimize", action="store_const", const=False)
    parser.add_argument("--engine", action="store_const", const=True, help="also compare the engine's has_requests")
    parser.add_argument("--shard-size", type=whole(1), help="traces per shard (default 25)")
    parser.add_argument("--workers", type=whole(1), help="worker processes or Ray actors (default: one per core)")
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run on Ray: 'local' starts an instance here, an address joins a cluster (alone: $RAY_ADDRESS)",
    )
    parser.add_argument("--out", type=Path, default=Path("build/fuzz"), help="the campaign's folder (build/fuzz)")
    parser.add_argument("--resume", action="store_true", help="go on with the campaign in --out")
    parser.add_argument("--yes", action="store_true", help=f"run a campaign of more than {CONFIRM_ABOVE:,} traces")


# ------------------------------------------------------------------ the campaign from the arguments


def _names(values: list[str] | None) -> list[str]:
    return list(dict.fromkeys(n.strip() for v in values or [] for n in v.split(",") if n.strip()))


def campaign_from(args):
    """The campaign the arguments name (checked); None for what --resume reads from the folder."""
    from vllm_contract.spec.profiles import RELEASE_NAMES
    from vllm_contract.targets.fuzz.campaign import Campaign
    from vllm_contract.targets.fuzz.differential import RUNNERS
    from vllm_contract.targets.fuzz.presets import KNOWN, PRESETS, runnable_presets

    for option, given in (("--config", args.config), ("--presets", args.presets)):
        unknown = [n for n in _names(given) if n not in PRESETS]
        if unknown:
            raise UsageError(f"unknown {option} {', '.join(unknown)}; presets: {', '.join(PRESETS)}")
    bad = [n for n in _names(args.known) if n != "all" and n not in KNOWN]
    if bad:
        raise UsageError(f"unknown --known {', '.join(bad)}; use {', '.join(KNOWN)} or 'all'")
    runners = _names([args.runner]) if args.runner else None
    if runners is not None and (not runners or any(r not in RUNNERS for r in runners)):
        raise UsageError(f"--runner {args.runner}: choose model, real or model,real")
    releases = _names(args.releases) + ([args.vllm] if args.vllm else [])
    if "all" in releases:
        releases = [r for r in releases if r != "all"] + list(RELEASE_NAMES)
    given = {
        "presets": _names(args.presets) + _names(args.config) or None,
        "releases": list(dict.fromkeys(releases)) or None,
        "runners": runners,
        "known": (list(KNOWN) if "all" in _names(args.known) else _names(args.known)) if args.known else None,
        "cases": args.cases,
        "length": args.length,
        "seed": args.seed,
        "engine": args.engine,
        "minimize": args.minimize,
        "first": args.index,
        "shard_size": args.shard_size,
    }
    if args.resume:
        return None, {k: v for k, v in given.items() if v is not None}
    index = args.index
    releases = tuple(given["releases"] or [os.environ.get("VLLM") or "0.32.0"])
    campaign = Campaign(
        seed=args.seed if args.seed is not None else DEFAULTS["seed"],
        cases=1 if index is not None else args.cases or DEFAULTS["cases"],
        length=args.length or DEFAULTS["length"],
        releases=releases,
        presets=tuple(given["presets"] or runnable_presets(releases)),
        runners=tuple(runners or [DEFAULTS["runner"]]),
        known=tuple(given["known"] or ()),
        engine=bool(args.engine),
        minimize=args.minimize is not False,
        first=index or 0,
        shard_size=args.shard_size or DEFAULTS["shard_size"],
    )
    return campaign, given


def _resumed(out: Path, given: dict):
    """The campaign in `out` (--resume), refusing options that would make it another."""
    from vllm_contract.targets.fuzz.campaign import Campaign

    try:
        record = json.loads((out / "campaign.json").read_text())
        campaign = Campaign.from_record(record["campaign"], record["shard_size"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"--resume: {out} holds no campaign to go on with; start one without --resume") from None
    mine = {**campaign.record(), "shard_size": campaign.shard_size}
    differ = [k for k, v in given.items() if (list(v) if isinstance(v, tuple) else v) != mine.get(k)]
    if differ:
        raise UsageError(
            f"--resume goes on with the campaign in {out} as it was started; drop "
            + ", ".join("--" + k.replace("_", "-") for k in differ)
            + " or start another campaign in another --out"
        )
    return campaign


# ------------------------------------------------------------------ the folder


def out_folder(path: Path) -> OutFolder:
    return OutFolder(path, TOOL)


def start_folder(out: Path, campaign) -> None:
    """A fresh campaign: the folder is replaced whole by one holding campaign.json and an empty shards/."""
    folder = _staged(out, campaign, keep_shards=False)
    try:
        folder.commit()
    finally:
        folder.abort()


def _staged(out: Path, campaign, keep_shards: bool) -> OutFolder:
    """The folder's next version begun in a staging folder: campaign.json, and shards/
    holding the shards finished so far (hard links: the files are written once) or none."""
    folder = out_folder(out)
    staging = folder.begin()
    try:
        folder.write_text("campaign.json", json.dumps(_campaign_json(campaign), indent=1) + "\n")
        folder.adopt("shards/*")
        (staging / "shards").mkdir()
        for path in sorted((out / "shards").glob("*.json")) if keep_shards else ():
            try:
                os.link(path, staging / "shards" / path.name)
            except OSError:
                shutil.copy2(path, staging / "shards" / path.name)
    except BaseException:
        folder.abort()
        raise
    return folder


def _campaign_json(campaign) -> dict:
    from vllm_contract.targets.fuzz.campaign import FORMAT

    return {"format": FORMAT, "campaign": campaign.record(), "shard_size": campaign.shard_size}


class ShardFiles(MutableMapping):
    """A campaign's finished shards as the run loop sees them (number -> result), kept in
    shards/ and not in memory: only their numbers are held here, each result is written
    whole as it is stored (a reader, or --resume, never sees half of one) and read back
    when asked for. So a campaign's memory does not grow with the shards it has run."""

    def __init__(self, out: Path, campaign, numbers=()):
        self.folder, self.campaign = out / "shards", campaign
        self.numbers: set[int] = set(numbers)

    def path(self, number: int) -> Path:
        return self.folder / f"{number:05d}.json"

    def __setitem__(self, number: int, result: dict) -> None:
        from dataclasses import asdict

        record = {"shard": asdict(self.campaign.shard(number)), "result": result}
        write_atomic(self.path(number), json.dumps(record) + "\n")
        self.numbers.add(number)

    def __getitem__(self, number: int) -> dict:
        if number not in self.numbers:
            raise KeyError(number)
        return json.loads(self.path(number).read_text())["result"]

    def __delitem__(self, number: int) -> None:
        raise TypeError("a finished shard stays finished")

    def __contains__(self, number: object) -> bool:
        return number in self.numbers

    def __iter__(self):
        return iter(sorted(self.numbers))

    def __len__(self) -> int:
        return len(self.numbers)


def checkpointed(out: Path, campaign) -> tuple[ShardFiles, dict]:
    """The shards and cases a previous run of this campaign finished (a file that does not
    match the campaign, or is damaged, is run again); the shards stay on disk."""
    from dataclasses import asdict

    from vllm_contract.targets.fuzz.campaign import CaseKey

    numbers, cases = set(), {}
    for path in sorted((out / "shards").glob("*.json")):
        try:
            record = json.loads(path.read_text())
            if "shard" in record:
                number = record["shard"]["number"]
                if (
                    isinstance(number, int)
                    and 0 <= number < campaign.shard_count
                    and asdict(campaign.shard(number)) == record["shard"]
                    and path.name == f"{number:05d}.json"
                    and isinstance(record["result"].get("rows"), list)
                ):
                    numbers.add(number)
            else:
                cases[CaseKey(**record["key"])] = record["result"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return ShardFiles(out, campaign, numbers), cases


def checkpoint(out: Path, task: tuple, result: dict) -> None:
    """A finished case, written whole (a shard is written as ShardFiles stores it)."""
    from dataclasses import asdict

    kind, _campaign, what = task
    if kind == "case":
        write_atomic(out / "shards" / what.file(), json.dumps({"key": asdict(what), "result": result}) + "\n")


def write_result(out: Path, campaign, done, cases: dict, times: dict, stop: str | None):
    """results.json, summary.txt, timings.json and the cases, beside the shards, swapped in
    whole; results.json is written row by row from the shards (never held whole)."""
    from vllm_contract.targets.fuzz.campaign import case_file, divergence_itf, dump_chunks, merge, summary

    results = merge(campaign, done, cases)
    folder = _staged(out, campaign, keep_shards=True)
    try:
        folder.write_chunks("results.json", dump_chunks(results))
        text = summary(results, stop)
        folder.write_text("summary.txt", text)
        folder.write_text("timings.json", json.dumps(times, indent=1) + "\n")
        from vllm_contract.model.itf import text as itf_text

        for key, found in sorted(cases.items(), key=lambda kv: case_file(kv[0])):
            if found.get("reproduced"):
                folder.write_text(case_file(key), itf_text(divergence_itf(campaign, key, found)))
        folder.commit()
    finally:
        folder.abort()
    return results, text


# ------------------------------------------------------------------ running


RAY_CONNECT_S = 5.0  # a TCP connection to --ray's address must open within this


def make_pool(args, workers: int | None):
    """Local worker processes, or Ray (imported only here). An address nobody answers at
    is one line of ours before Ray is asked (Ray itself retries for minutes)."""
    from vllm_contract.targets.fuzz.campaign_run import LocalPool, default_workers

    if args.ray is None:
        return LocalPool(workers or default_workers())
    address = args.ray or os.environ.get("RAY_ADDRESS", "")
    if not address:
        raise UsageError("--ray alone joins $RAY_ADDRESS, which is not set: give --ray local or --ray ADDRESS")
    if address not in ("local", "auto"):
        reachable(address)
    from vllm_contract.targets.fuzz.campaign_ray import RayPool

    try:
        return RayPool(address, workers or (default_workers() if address == "local" else None))
    except Exception as exc:  # Ray's own errors: a cluster not there, an instance that does not start
        what = "start a Ray instance here" if address == "local" else f"join the Ray cluster at {address}"
        cause = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise CouldNotRun(f"--ray: could not {what} ({cause}); nothing was run") from None


def reachable(address: str, seconds: float = RAY_CONNECT_S) -> None:
    """Raise CouldNotRun unless a TCP connection to `address` (HOST:PORT, or ray://HOST:PORT)
    opens within `seconds`; UsageError when it is not an address."""
    import socket

    where = address.split("://", 1)[-1]
    host, _, port = where.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--ray {address}: expected HOST:PORT (the address `ray start --head` printed), or 'local'")
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as exc:
        why = "no answer within {:g} s".format(seconds) if isinstance(exc, TimeoutError) else exc.strerror or exc
        raise CouldNotRun(
            f"--ray {address}: nothing answers there ({why}); start the cluster's head there "
            f"(`ray start --head --port {port}`) or give the address it printed, or use --ray local; nothing was run"
        ) from None


def ray_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def run(args) -> int:
    campaign, given = campaign_from(args)
    if args.ray is not None and not ray_installed():
        raise UsageError(RAY_MISSING)
    folder = out_folder(args.out)
    folder.check()
    if campaign is None:
        campaign = _resumed(args.out, given)
    workers = args.workers
    planned = campaign.traces
    if planned > CONFIRM_ABOVE and not args.yes:
        hours = planned * SECONDS_PER_TRACE * (campaign.length / 40) / 3600 / (workers or 2)
        raise UsageError(
            f"{planned:,} traces ({campaign.cases:,} per release, preset and runner) would take about "
            f"{hours:,.0f} hour(s) on {workers or 2} worker(s) here; add --yes to run it, or ask for fewer --cases"
        )
    if args.ray is None or args.ray == "local":
        from vllm_contract.adapter import tree as vllm_tree

        for release in campaign.releases:  # a tree that is not here: one line now, before any work
            vllm_tree.resolve(release)
    with exclusive(args.out):  # a second campaign into --out: one line now, before Ray or a worker starts
        pool = make_pool(args, workers)
        try:
            return execute(campaign, pool, args.out, args.resume)
        finally:
            pool.close()


def execute(campaign, pool, out: Path, resume: bool = False, on_dispatch=None, say=None) -> int:
    """Run the campaign on the pool into `out` and write its result; the exit status.
    The pool is the caller's to close. One campaign at a time writes `out` (a lock beside it)."""
    with exclusive(out):
        return _execute(campaign, pool, out, resume, on_dispatch, say)


def _execute(campaign, pool, out: Path, resume: bool, on_dispatch, say) -> int:
    from vllm_contract.targets.fuzz import campaign_run
    from vllm_contract.targets.fuzz.campaign import timings

    say = say or (lambda line: print(line, flush=True))
    if resume:
        done, cases = checkpointed(out, campaign)
    else:
        start_folder(out, campaign)
        done, cases = ShardFiles(out, campaign), {}
    say(
        f"{campaign.traces:,} trace(s): {campaign.cases:,} per release, preset and runner x "
        f"{len(campaign.releases)} release(s) x {len(campaign.presets)} preset(s) x {len(campaign.runners)} "
        f"runner(s); {campaign.shard_count:,} shard(s) of up to {campaign.shard_size}, on {pool.how}"
        + (f"; resumed: {len(done)} shard(s) and {len(cases)} case(s) done before" if resume else "")
    )
    groups = _Groups(campaign, done, say)

    def on_done(task: tuple, result: dict) -> None:
        checkpoint(out, task, result)
        if task[0] == "shard":
            groups.finished(task[2], result)

    started = time.time()
    stop, records, timing = None, [], {}
    try:
        with interrupts():
            dispatched = on_dispatch or (lambda handle, task: None)
            campaign_run.run(campaign, pool, done, cases, on_done, say, dispatched, timing=timing, records=records)
    except Terminated:
        stop = "SIGTERM"
    except KeyboardInterrupt:
        stop = "Ctrl-C"
    except ContractError as exc:
        kept = f"{out} keeps the {len(done)} shard(s) done: --resume goes on once it is fixed"
        raise type(exc)(f"{exc}; {kept}") from None
    times = timings(records, time.time() - started, pool.how, timing.get("ready"))
    try:
        with interrupts():
            results, text = write_result(out, campaign, done, cases, times, stop)
    except KeyboardInterrupt as exc:  # the folder is as it was: the shards done, for --resume
        what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(
            f"{what} while writing the result: {out} keeps the {len(done)} shard(s) done and no merged result; "
            "--resume writes it",
            file=sys.stderr,
        )
        return ExitStatus.TERMINATED if isinstance(exc, Terminated) else ExitStatus.INTERRUPTED
    print(text, end="", flush=True)
    rate = f"{times['traces_per_second']:.1f}" if times["traces_per_second"] else "no"
    print(f"wrote {out}/results.json, summary.txt, timings.json; {rate} traces/s on {pool.how}", flush=True)
    if stop is not None and not results["complete"]:
        print(
            f"{'terminated (SIGTERM)' if stop == 'SIGTERM' else 'interrupted'}: {out} holds a PARTIAL result; "
            f"--resume goes on",
            file=sys.stderr,
        )
        return ExitStatus.TERMINATED if stop == "SIGTERM" else ExitStatus.INTERRUPTED
    if stop is not None:  # the signal came after the last task: nothing was stopped
        print(f"{stop} came after the last task: {out} holds the complete result", file=sys.stderr)
    totals = results["totals"]
    if totals["divergent"]:
        return ExitStatus.FINDING
    if totals["could_not_run"] or not results["complete"]:
        return ExitStatus.COULD_NOT_RUN
    return ExitStatus.OK


class _Groups:
    """Says each new kind of divergence as it comes, and each (release, preset, runner) as
    its last shard finishes (its rows read back then, once)."""

    def __init__(self, campaign, done, say):
        from vllm_contract.targets.fuzz.campaign import groups
        from vllm_contract.targets.fuzz.differential import DIVERGED

        self.prefix = DIVERGED + ": "
        self.campaign, self.done, self.say = campaign, done, say
        self.left = {g: len(campaign.group_numbers(g)) for g in groups(campaign)}
        for number in done:
            self.left[campaign.shard(number).group] -= 1
        self.seen: set = set()

    def finished(self, shard, result: dict) -> None:
        for index, _steps, _end, outcome in result["rows"]:
            if outcome.startswith(self.prefix) and (shard.group, outcome) not in self.seen:
                self.seen.add((shard.group, outcome))
                self.say(f"   [{' '.join(shard.group)}] new divergence {outcome[len(self.prefix) :]} (trace {index})")
        self.left[shard.group] -= 1
        if self.left[shard.group]:
            return
        traces = steps = divergent = 0
        fatal: Counter = Counter()
        for number in self.campaign.group_numbers(shard.group):
            for _index, length, end, outcome in self.done[number]["rows"]:
                traces, steps = traces + 1, steps + length
                divergent += outcome.startswith(self.prefix)
                if end.startswith("fatal: "):
                    fatal.update(end[len("fatal: ") :].split(","))
        self.say(
            f"== {' '.join(shard.group)}: {traces} traces, {steps} steps, {divergent} "
            f"divergent, model-fatal ends {dict(sorted(fatal.items()))}"
        )

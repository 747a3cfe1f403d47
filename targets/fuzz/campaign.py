"""A fuzz campaign as tasks: releases x runner modes x presets x trace indices, cut into shards.

A campaign (`Campaign`) is cut into shards of `shard_size` traces of one release, runner
mode and preset (`Campaign.shards`). A shard runs in a worker process that loaded that
release, one vLLM tree per process (`Worker`; the workers, local or on Ray, and the loop
that hands them shards: targets/fuzz/campaign_run.py). Each trace's seed derives from
(campaign seed, release, preset, index) alone (`trace_seed`) and every trace is kept as
a row, so the merged result (`merge`) is the same bytes whatever the number of workers or
nodes, the order shards finish in, the shard size, or how often a shard was retried.
Timings and hosts are kept apart (`timings`).

Every kind of divergence (its signature) in each (release, preset, runner) becomes a
case: its first trace, once that group's shards are done, is drawn again by a task of
its own (`CaseKey`), shrunk and written as an ITF trace (`divergence_itf`) that
`vllm-contract generate --trace` turns into a generated module, with the command that
replays that one trace (`replay_line`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import socket
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, Iterable, Iterator, Mapping

from vllm_contract.model.interpreter import Interpreter, flat, nested
from vllm_contract.model.itf import to_itf
from vllm_contract.model.trace import Step, Trace, replay
from vllm_contract.spec import expectations
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TargetUnavailable
from vllm_contract.spec.properties import ASSERTS
from vllm_contract.targets.fuzz.differential import DIVERGED, NOT_PLAYED, new_target, play, shrunk, target_class
from vllm_contract.targets.fuzz.presets import PRESETS, ignore_known, left_out_because, runs_on
from vllm_contract.targets.harness import observes

FORMAT = "vllm-contract fuzz campaign 1"
SHARD_SIZE = 25  # traces per shard: 3 s on the scheduler, about 10 s with the real runner (progress, retries)
RETRIES = 2  # a shard whose worker dies this many times more is counted as could not run
REPLAY_OUT = "build/fuzz-replay"
MESSAGE_LINES = 12  # of a divergence's message in summary.txt (all of it in results.json)


@dataclass(frozen=True)
class Campaign:
    """What a campaign runs; `record()` is what its result says it ran (the shard size
    is left out: the result does not depend on it)."""

    seed: int
    cases: int  # traces per release, preset and runner mode: indices first .. first + cases - 1
    length: int
    releases: tuple[str, ...]
    presets: tuple[str, ...]
    runners: tuple[str, ...] = ("model",)
    known: tuple[str, ...] = ()
    engine: bool = False
    minimize: bool = True
    first: int = 0
    shard_size: int = SHARD_SIZE

    def record(self) -> dict:
        record = asdict(self)
        del record["shard_size"]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in record.items()}

    @staticmethod
    def from_record(record: Mapping, shard_size: int = SHARD_SIZE) -> "Campaign":
        data = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items()}
        return Campaign(**data, shard_size=shard_size)

    @cached_property
    def _groups(self) -> tuple[tuple[str, str, str], ...]:
        """(release, runner, preset) in shard order, each preset on the releases that have its
        runner (a V1 preset is no trace of 0.34.0's: left_out)."""
        return tuple((r, m, p) for r in self.releases for m in self.runners for p in self.presets if runs_on(p, r))

    @property
    def left_out(self) -> list[tuple[str, str]]:
        """(release, preset) pairs the campaign does not run: the release lacks the preset's runner."""
        return [(r, p) for r in self.releases for p in self.presets if not runs_on(p, r)]

    @property
    def traces(self) -> int:
        return len(self._groups) * self.cases

    @property
    def per_group(self) -> int:
        """Shards per (release, runner, preset)."""
        return -(-self.cases // self.shard_size)

    @property
    def shard_count(self) -> int:
        return len(self._groups) * self.per_group

    def shard(self, number: int) -> "Shard":
        """Shard `number`, computed: a campaign never lists its shards (a billion traces a
        preset would be tens of millions of them). A release's shards come together (a
        worker holds one release), then its runner modes, then its presets."""
        if not 0 <= number < self.shard_count:
            raise IndexError(f"shard {number} of a campaign of {self.shard_count}")
        group, k = divmod(number, self.per_group)
        release, runner, preset = self._groups[group]
        start = self.first + k * self.shard_size
        stop = min(start + self.shard_size, self.first + self.cases)
        return Shard(number, release, preset, runner, start, stop)

    def shards(self, numbers: range | None = None) -> Iterator["Shard"]:
        """Every shard (or those numbered in `numbers`), drawn one at a time."""
        for number in range(self.shard_count) if numbers is None else numbers:
            yield self.shard(number)

    def group_numbers(self, group: tuple[str, str, str]) -> range:
        """The numbers of one (release, preset, runner)'s shards."""
        release, preset, runner = group
        index = self._groups.index((release, runner, preset))
        return range(index * self.per_group, (index + 1) * self.per_group)

    def release_numbers(self, release: str) -> range:
        """The numbers of one release's shards (they come together)."""
        indices = [i for i, g in enumerate(self._groups) if g[0] == release]
        if not indices:
            return range(0)
        return range(indices[0] * self.per_group, (indices[-1] + 1) * self.per_group)


def finished_in(done: Mapping[int, Any], numbers: range) -> list[int]:
    """The numbers in `numbers` that `done` holds, in order, in time bounded by the smaller of the two."""
    if len(done) < len(numbers):
        return sorted(n for n in done if n in numbers)
    return [n for n in numbers if n in done]


@dataclass(frozen=True)
class Shard:
    number: int
    release: str
    preset: str
    runner: str
    start: int
    stop: int

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.release, self.preset, self.runner)

    def describe(self) -> str:
        return f"{self.release} {self.preset} {self.runner} traces {self.start}-{self.stop - 1}"


@dataclass(frozen=True)
class CaseKey:
    """The first trace of one kind of divergence in one group: drawn again, shrunk, written as a case."""

    release: str
    preset: str
    runner: str
    index: int
    signature: str

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.release, self.preset, self.runner)

    def file(self) -> str:
        """Its checkpoint's name under shards/."""
        return "case-" + hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16] + ".json"

    def describe(self) -> str:
        return f"{self.release} {self.preset} {self.runner} trace {self.index} ({self.signature})"


def trace_seed(seed: int, release: str, preset: str, index: int) -> int:
    """The seed of one trace, from what names it alone (never from the worker or the order run)."""
    digest = hashlib.sha256(f"{seed}/{release}/{preset}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


# ------------------------------------------------------------------ a worker's half


class Worker:
    """A process's half of a campaign: one release loaded (adapter/current.py allows one
    tree per process), a target per runner mode, built on first use."""

    def __init__(self, release: str):
        self.release = release
        self.profile = ""
        self.targets: dict[str, Any] = {}
        self.factory = new_target

    def prepare(self) -> str:
        """Select, load and preflight the release (raises TreeError, one line per missing piece)."""
        from vllm_contract.adapter import current as vllm_env
        from vllm_contract.adapter.preflight import preflight

        vllm_env.select(self.release)
        line = preflight()
        self.profile = vllm_env.tree().profile
        return line

    def target(self, runner: str):
        if runner not in self.targets:
            if runner == "real" and self.factory is new_target:
                from vllm_contract.targets import real_runner

                real_runner.preflight()
            self.targets[runner] = self.factory(runner)
        return self.targets[runner]

    def run(self, task: tuple) -> dict:
        """One task, ("shard", Campaign, Shard) or ("case", Campaign, CaseKey): its result, the
        seconds it took and where it ran. A target that cannot run here raises
        TargetUnavailable; any other exception is the task's `error`, with its traceback."""
        kind, campaign, what = task
        started, cpu = time.time(), time.process_time()
        try:
            if kind == "shard":
                result = run_shard(campaign, what, self.target(what.runner), self.profile)
            else:
                result = run_case(campaign, what, self.target(what.runner), self.profile)
        except TargetUnavailable:
            raise
        except Exception as exc:  # a bug of ours or vLLM's, in one task: counted, never a pass
            result = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0], "traceback": traceback.format_exc()}
        return {
            "result": result,
            "seconds": time.time() - started,
            "cpu": time.process_time() - cpu,
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }


def _config(preset: str, profile: str) -> Config:
    return PRESETS[preset].with_(profile=profile)


def run_shard(campaign: Campaign, shard: Shard, target, profile: str) -> dict:
    """Every trace of the shard on the target: a row each, and what the real runner fed."""
    cfg = _config(shard.preset, profile)
    ignore = ignore_known(campaign.known, shard.runner)
    rows, runner, redrawn = [], Counter(), Counter()
    for index in range(shard.start, shard.stop):
        seed = trace_seed(campaign.seed, shard.release, shard.preset, index)
        played = play(cfg, seed, campaign.length, target, ignore, shard.runner, campaign.engine)
        rows.append(played.row(index))
        runner.update(played.runner)
        redrawn.update(played.redrawn)
    return {"profile": profile, "rows": rows, "runner": dict(runner), "redrawn": dict(redrawn)}


def run_case(campaign: Campaign, key: CaseKey, target, profile: str) -> dict:
    """The trace of `key` drawn and replayed again, shrunk (unless --no-minimize): what its case is made of."""
    cfg = _config(key.preset, profile)
    ignore = ignore_known(campaign.known, key.runner)
    seed = trace_seed(campaign.seed, key.release, key.preset, key.index)
    played = play(cfg, seed, campaign.length, target, ignore, key.runner, campaign.engine)
    if played.outcome != DIVERGED or played.why != key.signature:
        return {"reproduced": False, "again": played.row(key.index)[3]}
    if campaign.minimize:
        played = shrunk(cfg, played, target, ignore, campaign.engine)
    return {
        "reproduced": True,
        "config": cfg.record(),
        "init": played.init,
        "steps": [[event, nested(args)] for event, args in played.steps],
        "message": played.message,
    }


# ------------------------------------------------------------------ merging


def groups(campaign: Campaign) -> list[tuple[str, str, str]]:
    """(release, preset, runner) in the order results are written: the campaign's own groups
    (one membership rule, `Campaign._groups`), a release's presets together."""
    release, runner, preset = (
        {name: i for i, name in enumerate(names)} for names in (campaign.releases, campaign.runners, campaign.presets)
    )
    by_result = sorted(campaign._groups, key=lambda g: (release[g[0]], preset[g[2]], runner[g[1]]))
    return [(r, p, m) for r, m, p in by_result]


def case_keys(
    campaign: Campaign, done: Mapping[int, dict], only: Iterable[tuple[str, str, str]] | None = None
) -> list[CaseKey]:
    """The first trace of each kind of divergence in every group (of `only`) whose shards are all done."""
    keys = []
    for group in groups(campaign) if only is None else only:
        numbers = campaign.group_numbers(group)
        finished = finished_in(done, numbers)
        if len(finished) != len(numbers):
            continue
        first: dict[str, int] = {}
        for number in finished:
            for index, _steps, _end, outcome in done[number]["rows"]:
                if outcome.startswith(DIVERGED + ": "):
                    first.setdefault(outcome[len(DIVERGED) + 2 :], index)
        keys += [CaseKey(*group, index, sig) for sig, index in sorted(first.items(), key=lambda kv: kv[1])]
    return keys


def release_slug(release: str) -> str:
    """A release as part of a file name (a checkout's path as a short digest)."""
    if re.fullmatch(r"[0-9A-Za-z.+-]+", release):
        return release
    return "checkout-" + hashlib.sha1(release.encode()).hexdigest()[:8]


def case_file(key: CaseKey) -> str:
    return f"cases/fuzz-{release_slug(key.release)}-{key.preset}-{key.runner}-{key.index}.itf.json"


def replay_line(campaign: Campaign, release: str, preset: str, runner: str, index: int) -> str:
    """The command that plays that one trace again (into its own folder, never the campaign's)."""
    words = ["vllm-contract", "fuzz", "--releases", release, "--presets", preset, "--runner", runner]
    words += ["--seed", str(campaign.seed), "--length", str(campaign.length), "--index", str(index)]
    words += [w for name in campaign.known for w in ("--known", name)]
    words += ["--engine"] * campaign.engine + ["--no-minimize"] * (not campaign.minimize)
    words += ["--out", REPLAY_OUT]
    return shlex.join(words)


class Rows:
    """A group's rows as the merged result holds them: read from its finished shards each
    time they are iterated (`dump` writes them one by one), never held all at once."""

    def __init__(self, done: Mapping[int, dict], numbers: list[int]):
        self.done, self.numbers = done, numbers

    def __iter__(self) -> Iterator[list]:
        for number in self.numbers:  # a group's shards are consecutive ranges of its indices
            yield from self.done[number]["rows"]


def missing_ranges(campaign: Campaign, numbers: range, finished: list[int]) -> list[list[int]]:
    """The trace indices of a group's shards not done, as [first, last] ranges (neighbours joined)."""
    out: list[list[int]] = []
    expected = numbers.start
    for number in [*finished, numbers.stop]:
        if number > expected:
            out.append([campaign.shard(expected).start, campaign.shard(number - 1).stop - 1])
        expected = number + 1
    return out


def merge(campaign: Campaign, done: Mapping[int, dict], cases: Mapping[CaseKey, dict]) -> dict:
    """The campaign's result from its finished shards and cases: every trace a row, sorted
    by (release, preset, runner, index); counts per group and in all; the divergences,
    each with its case. Complete only when every shard is done. The rows are `Rows`,
    read from `done` as they are written: a result of many shards is never held whole."""
    keys = {(k.group, k.signature): k for k in case_keys(campaign, done)}
    out_groups, divergences = [], []
    totals: Counter = Counter()
    for group in groups(campaign):
        numbers = campaign.group_numbers(group)
        finished = finished_in(done, numbers)
        rows = Rows(done, finished)
        kinds: Counter = Counter()
        first: dict[str, int] = {}
        fatal, kept, unplayed, runner = Counter(), Counter(), Counter(), Counter()
        traces = steps = 0
        profile = None
        for number in finished:
            part = done[number]
            profile = profile or part.get("profile")
            runner.update(part.get("runner", {}))
            kept.update(part.get("redrawn", {}))
            for index, length, end, outcome in part["rows"]:
                traces += 1
                steps += length
                if outcome.startswith(DIVERGED + ": "):
                    sig = outcome[len(DIVERGED) + 2 :]
                    kinds[sig] += 1
                    first.setdefault(sig, index)
                elif outcome.startswith(NOT_PLAYED + ": "):
                    unplayed[outcome[len(NOT_PLAYED) + 2 :]] += 1
                if end.startswith("fatal: "):
                    fatal.update(_fatal_end(name, group[2]) for name in end[len("fatal: ") :].split(","))
                elif end.startswith("excluded: "):
                    kept[end[len("excluded: ") :]] += 1
        missing = missing_ranges(campaign, numbers, finished)
        record = {
            "release": group[0],
            "preset": group[1],
            "runner": group[2],
            "profile": profile,
            "traces": traces,
            "steps": steps,
            "divergent": sum(kinds.values()),
            "kinds": dict(sorted(kinds.items())),
            "could_not_run": dict(sorted(unplayed.items())),
            "fatal_ends": dict(sorted(fatal.items())),
            "kept_out": dict(sorted(kept.items())),
            "runner_inputs": dict(sorted(runner.items())),
            **({"missing": missing} if missing else {}),
            "rows": rows,
        }
        out_groups.append(record)
        totals.update(
            traces=record["traces"],
            steps=record["steps"],
            divergent=record["divergent"],
            could_not_run=sum(unplayed.values()),
        )
        for sig, index in sorted(first.items(), key=lambda kv: kv[1]):
            key = keys.get((group, sig))
            found = cases.get(key) if key is not None else None
            item = {
                "release": group[0],
                "preset": group[1],
                "runner": group[2],
                "signature": sig,
                "traces": kinds[sig],
                "first": index,
                "seed": trace_seed(campaign.seed, group[0], group[1], index),
                "replay": replay_line(campaign, *group, index),
            }
            if found is None:
                item["case"] = None
                item["why_no_case"] = "its group's shards are not all done" if key is None else "not shrunk yet"
            elif not found.get("reproduced"):
                item["case"] = None
                item["why_no_case"] = found.get("error") or f"drawn and replayed again it gave: {found.get('again')}"
            else:
                item["case"] = case_file(key)
                item["case_steps"] = len(found["steps"])
                item["message"] = found["message"]
            divergences.append(item)
    totals["cases"] = sum(1 for d in divergences if d["case"])
    complete = len(done) == campaign.shard_count
    return {
        "format": FORMAT,
        "campaign": campaign.record(),
        "complete": complete and len(keys) == sum(1 for k in keys.values() if k in cases),
        "totals": {k: totals[k] for k in ("traces", "steps", "divergent", "could_not_run", "cases")},
        "groups": out_groups,
        "divergences": divergences,
    }


def divergence_itf(campaign: Campaign, key: CaseKey, found: Mapping) -> dict:
    """The shrunk trace of a divergence as ITF: the configuration record, `kind`
    divergence, what diverged and the command that replays the campaign's trace; what
    `vllm-contract generate --trace FILE` makes a case of."""
    cfg = expectations.from_record(found["config"])
    steps = [Step(event, flat(args)) for event, args in found["steps"]]
    trace = Trace(config=cfg.name, init=flat(found["init"]), steps=steps, goal="", kind="divergence")
    trace.states, trace.checks, trace.observed = replay(Interpreter(cfg), trace.init, trace.steps)
    target = "vLLM's scheduler with its own model runner" if key.runner == "real" else "vLLM's scheduler"
    description = (
        f"a random trace on which {target} ({key.release}) differed from the model: {key.signature} "
        f"(`vllm-contract fuzz`, trace {key.index} of preset {key.preset}, seed {campaign.seed})"
    )
    doc = to_itf(trace, cfg.record(), description)
    doc["#meta"]["divergence"] = {
        "release": key.release,
        "preset": key.preset,
        "runner": key.runner,
        "index": key.index,
        "signature": key.signature,
        "message": found["message"],
    }
    doc["#meta"]["replay"] = replay_line(campaign, key.release, key.preset, key.runner, key.index)
    return doc


def timings(records: Iterable[dict], wall: float, how: str, ready: float | None) -> dict:
    """What the merged result leaves out: where and how long each task ran, retries, the
    rate (`traces_per_second` from the first worker ready to the end: vLLM's import apart)."""
    records = list(records)
    traces = sum(r.get("traces", 0) for r in records)
    working = wall - (ready or 0.0)
    return {
        "how": how,
        "seconds": round(wall, 3),
        "first_worker_ready_after": None if ready is None else round(ready, 3),
        "traces": traces,
        "traces_per_second": round(traces / working, 3) if traces and working > 0 else None,
        "tasks": records,
    }


# ------------------------------------------------------------------ writing


def dump(document: Any) -> str:
    """JSON as the results are written: keys in a fixed order, a list of plain values on one
    line (a row), everything else indented; the same document, the same bytes."""
    return "".join(dump_chunks(document))


def dump_chunks(value: Any, depth: int = 0) -> Iterator[str]:
    """`dump`'s text in pieces, for a writer that never holds it whole (`Rows` are read as they go)."""
    pad, inner = " " * depth, " " * (depth + 1)
    if isinstance(value, dict):
        if not value:
            yield "{}"
            return
        for i, (key, item) in enumerate(value.items()):
            yield ("{\n" if i == 0 else ",\n") + f"{inner}{json.dumps(key)}: "
            yield from dump_chunks(item, depth + 1)
        yield "\n" + pad + "}"
    elif isinstance(value, Rows) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value)):
        empty = True
        for item in value:
            yield ("[\n" if empty else ",\n") + inner
            empty = False
            yield from dump_chunks(item, depth + 1)
        yield "[]" if empty else "\n" + pad + "]"
    else:
        yield json.dumps(value)
    if depth == 0:
        yield "\n"


def _fatal_end(name: str, runner: str) -> str:
    """How a trace the model ended at an assert is counted: by the assert's name where the
    target sees it (harness.observes), else said to be the model's alone (a runner's assert
    where the model decides the runner's returns, or one vLLM has no statement for)."""
    if observes(target_class(runner), name):
        return name
    if not ASSERTS[name].statement:
        return f"{name} (the model's alone: vLLM has no such assert)"
    return f"{name} (the model's alone: vLLM's {ASSERTS[name].site} did not run)"


def _left_out_lines(campaign: Campaign) -> list[str]:
    """One line per release and reason that leaves presets out (presets.left_out_because):
    those presets are no traces of it."""
    grouped: dict[tuple, list[str]] = {}
    for release, preset in campaign.left_out:
        grouped.setdefault((release, left_out_because(preset, release)), []).append(preset)
    return [
        f"left out: {len(names)} {kind} preset(s) on {release} ({why}): {', '.join(names)}"
        for (release, (kind, why)), names in grouped.items()
    ]


def _counts(counter: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counter.items()) or "none"


def summary(results: Mapping, stopped: str | None = None) -> str:
    """The result in a few lines (summary.txt); the first says whether it is complete."""
    c, t = results["campaign"], results["totals"]
    if results["complete"]:
        head = "complete"
    else:
        planned = Campaign.from_record(c).traces
        why = f"stopped by {stopped}" if stopped else "not every task ran"
        head = f"PARTIAL ({why}): {t['traces']} of {planned} trace(s) run, not a full campaign"
    lines = [
        f"fuzz campaign: {head}",
        f"  seed {c['seed']}; traces {c['first']}-{c['first'] + c['cases'] - 1} of each preset, at most "
        f"{c['length']} steps; releases {', '.join(c['releases'])}; runner {', '.join(c['runners'])}; "
        f"{len(c['presets'])} preset(s); masks {', '.join(c['known']) or 'none'}"
        + ("; the engine loop compared" if c["engine"] else "")
        + ("; not shrunk" if not c["minimize"] else ""),
        f"total: {t['traces']} traces, {t['steps']} steps, {t['divergent']} divergent, "
        f"{t['could_not_run']} could not run, {t['cases']} case(s)",
        *_left_out_lines(Campaign.from_record(c)),
        "",
        f"{'release':<10} {'runner':<6} {'preset':<20} {'traces':>6} {'steps':>7} {'divergent':>9} {'not run':>7}"
        "  vLLM asserts that ended a trace in both",
    ]
    fatal, kept, unplayed, runner = Counter(), Counter(), Counter(), Counter()
    for g in results["groups"]:
        lines.append(
            f"{g['release']:<10} {g['runner']:<6} {g['preset']:<20} {g['traces']:>6} {g['steps']:>7} "
            f"{g['divergent']:>9} {sum(g['could_not_run'].values()):>7}  {_counts(g['fatal_ends'])}"
            + (f"  (missing traces {', '.join(f'{a}-{b}' for a, b in g['missing'])})" if g.get("missing") else "")
        )
        fatal.update(g["fatal_ends"])
        kept.update(g["kept_out"])
        unplayed.update(g["could_not_run"])
        runner.update(g["runner_inputs"])
    lines += [
        "",
        f"vLLM asserts that ended a trace (fired in the model and in vLLM at the same step, unless marked the "
        f"model's alone): {_counts(fatal)}",
    ]
    for cause, n in sorted(unplayed.items()):
        lines.append(f"could not run (x{n}): {cause}")
    if kept:
        lines.append(f"kept out (ended at the runner's contract, or a pick drawn again): {_counts(kept)}")
    if runner:
        lines.append(f"runner (per scheduled request): {_counts(runner)}")
    for d in results["divergences"]:
        lines += [
            "",
            f"divergence {d['release']} {d['preset']} {d['runner']}: {d['signature']} x{d['traces']} "
            f"(first: trace {d['first']})",
            f"  case:   {d['case'] or 'none (' + d['why_no_case'] + ')'}",
            f"  replay: {d['replay']}",
        ]
        if d.get("message"):
            shown = d["message"].splitlines()
            lines += ["  " + line for line in shown[:MESSAGE_LINES]]
            if len(shown) > MESSAGE_LINES:
                lines.append(f"  ({len(shown) - MESSAGE_LINES} more line(s) in results.json)")
    return "\n".join(lines) + "\n"

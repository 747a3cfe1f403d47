"""A counterexample in words: what each step does, the sentence that says what goes wrong,
the table of the variables that change, and the vLLM lines involved.

Everything here is read off the replayed trace (states, transition checks, the runner's
rule as the schedule event evaluated it), so the words say what the spec computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_contract.model import hang
from vllm_contract.model.interpreter import Interpreter, args_for, nested
from vllm_contract.spec import citations
from vllm_contract.spec.catalog import BY_NAME
from vllm_contract.spec.citations import field_ids
from vllm_contract.spec.config import Config
from vllm_contract.spec.properties import ASSERTS, PROPERTIES
from vllm_contract.spec.vocabulary import SHORT_LABELS, Status

LABEL = dict(SHORT_LABELS)
LEGEND = (
    "L prompt tokens, T num_tokens, c num_computed_tokens, P num_output_placeholders, "
    "F in flight, S stale, D drop_stale_output, X is_prefill_chunk, drafts len(spec_token_ids), "
    "Nr V1 CachedRequestState.num_tokens, g / pl / tl the V2 slot's num_computed_tokens / "
    "prefill_len / total_len, in flight: steps scheduled and not yet delivered"
)

# vLLM lines behind each optional mechanism a trace can use (spec/citations.toml ids)
MECHANISM_CITES = {
    "kv-load-failure": "kv-load-failure-detected kv-failure-truncates-computed skip-failed-kv-load",
    "stale-slot-read": "v2-add-writes-slot v2-remove-frees-slot",
    "over-delivery": "v1-cached-outputs-extend",
    "under-drain": "stale-drain stale-output-blocks-resume",
    "lost-sample": "update-only-nonempty-output max-tokens-skip",
    "session-stop": "handle-stopped-request resumable-stop-rollback",
}


def fmt(var: str, value) -> str:
    if var == "status":
        return Status.NAMES.get(value, str(value))
    if isinstance(value, bool):
        return "T" if value else "F"
    return str(value)


def picks(cfg: Config, event: str, args: dict) -> str:
    """An event's arguments that differ from their defaults, as `name=value`."""
    ev = Interpreter(cfg).event(event)
    defaults = {a.name: ([a.fallback()] * cfg.requests if a.over else a.fallback()) for a in ev.args(cfg)}
    named = nested(args_for(ev, cfg, nested(args)))
    return " ".join(f"{k}={v}" for k, v in named.items() if v != defaults.get(k))


@dataclass
class Scheduled:
    """One request in one schedule step, as scheduler and runner saw it."""

    r: int
    n: int  # tokens scheduled
    reserved: int  # placeholders reserved
    sampled: int  # tokens the runner returns
    discards: bool
    rule: str  # the runner's rule, evaluated


def scheduled(cfg: Config, trace, t: int) -> list[Scheduled]:
    """The requests step t (0-based, a schedule) scheduled."""
    before, after = trace.states[t], trace.states[t + 1]
    pos = before[("queue_len",)]
    obs = trace.observed[t] or {}
    out = []
    for r in range(cfg.requests):
        n = after[("q_scheduled", pos, r)]
        if not n:
            continue
        out.append(
            Scheduled(
                r,
                n,
                after[("q_reserved", pos, r)],
                after[("q_sampled", pos, r)],
                bool(obs.get("discard", [False] * cfg.requests)[r]),
                _rule(cfg, obs, r),
            )
        )
    return out


def _rule(cfg: Config, obs: dict, r: int) -> str:
    """The runner variant's rule on request r's row, evaluated (spec/runner_variants.py)."""
    row = (obs.get("v1_rows" if cfg.is_v1 else "v2_rows") or [None] * cfg.requests)[r]
    return cfg.run.explain(row) if row else ""


def delivered_step(trace, t: int) -> int | None:
    """Which schedule step (1-based) the deliver at step t (0-based) carries."""
    queue = []
    for i, step in enumerate(trace.steps[: t + 1]):
        if step.event == "schedule":
            queue.append(i + 1)
        elif step.event == "deliver" and queue:
            head = queue.pop(0)
            if i == t:
                return head
    return None


def changes(cfg: Config, before: dict, after: dict, r: int) -> list[str]:
    """`c 2→0`-style changes of request r's shown variables."""
    out = []
    for var, label in SHORT_LABELS:
        key = (var, r)
        if key in before and before[key] != after[key]:
            out.append(f"{label} {fmt(var, before[key])}→{fmt(var, after[key])}")
    return out


# ------------------------------------------------------------------ mechanisms, in words


def events_in_words(cfg: Config, trace) -> list[tuple[int, str]]:
    """(step, phrase) for every step that uses an optional mechanism or a front-end call."""
    out = []
    for t, step in enumerate(trace.steps):
        args = nested(step.args)
        before, after = trace.states[t], trace.states[t + 1]
        n = t + 1
        if step.event == "deliver":
            failed = args.get("kv_fail_req", -1)
            if failed is not None and failed >= 0:
                out.append(
                    (
                        n,
                        f"a KV-load failure reported with step {delivered_step(trace, t)}'s output rolls "
                        f"r{failed}'s num_computed_tokens back from {before[('num_computed_tokens', failed)]} "
                        f"to {after[('num_computed_tokens', failed)]}",
                    )
                )
            for r, stop in enumerate(args.get("stop", [])):
                if stop and cfg.has("stream") and before.get(("resumable", r)):
                    out.append((n, f"r{r}'s streaming session stops on a stop token"))
        elif step.event == "schedule":
            for r, stale in enumerate(args.get("stale_read", [])):
                if stale:
                    out.append(
                        (
                            n,
                            f"the V2 runner reads r{r}'s slot as its previous occupant left it "
                            "(the add_request writes are lost)",
                        )
                    )
            for r, extra in enumerate(args.get("extra", [])):
                if extra:
                    out.append((n, f"the runner commits {extra} token(s) more than 1 + accepted drafts for r{r}"))
        elif step.event == "preempt":
            out.append((n, f"r{args['req']} is preempted"))
        elif step.event == "reset_prefix_cache":
            out.append((n, "reset_prefix_cache preempts every running request"))
        elif step.event == "stream_update":
            out.append((n, f"a streaming update adds {args['new_tokens']} token(s) to r{args['req']}"))
        elif step.event == "abort":
            out.append((n, f"r{args['req']} is aborted"))
    return out


def disagreement(cfg: Config, trace, t: int) -> str | None:
    """The runner's and the scheduler's decisions at schedule step t, when they differ."""
    for s in scheduled(cfg, trace, t):
        if s.discards != (s.reserved == 0):
            if s.discards:
                return (
                    f"the runner discards r{s.r}'s sample at step {t + 1} although the scheduler reserved "
                    f"{s.reserved} placeholder(s) for it ({s.rule})"
                )
            return (
                f"the runner samples r{s.r} at step {t + 1} although the scheduler reserved nothing: "
                f"it classified the step as a prefill chunk ({s.rule})"
            )
    return None


def violation_in_words(cfg: Config, trace, prop: str) -> str:
    """What the last step does to the property, with the values."""
    t = len(trace.steps) - 1
    before, after = trace.states[t], trace.states[t + 1]
    n = t + 1
    reqs = range(cfg.requests)
    if prop == "counter-nonnegative":
        r = next((r for r in reqs if after[("num_output_placeholders", r)] < 0), 0)
        return (
            f"at step {n} r{r}'s num_output_placeholders goes from {before[('num_output_placeholders', r)]} "
            f"to {after[('num_output_placeholders', r)]}"
        )
    if prop == "computed-nonnegative":
        r = next((r for r in reqs if after[("num_computed_tokens", r)] < 0), 0)
        return (
            f"at step {n} r{r}'s num_computed_tokens goes from {before[('num_computed_tokens', r)]} "
            f"to {after[('num_computed_tokens', r)]}"
        )
    if prop == "predicates-agree" and trace.steps[t].event == "schedule":
        return disagreement(cfg, trace, t) or f"runner and scheduler disagree at step {n}"
    if prop == "no-token-while-prefilling":
        k = delivered_step(trace, t)
        return (
            f"at step {n} the output of step {k} appends a token although the scheduler classified "
            f"step {k} as a prefill chunk and reserved nothing for it"
        )
    if prop == "placeholder-accounting":

        def owed(r):
            return sum(
                after[("q_reserved", i, r)]
                for i in range(cfg.queue_depth)
                if i < after[("queue_len",)]
                and after[("q_scheduled", i, r)]
                and after[("q_epoch", i, r)] == after[("epoch", r)]
            )

        r = next(
            (
                r
                for r in reqs
                if after[("status", r)] != Status.FINISHED and after[("num_output_placeholders", r)] != owed(r)
            ),
            0,
        )
        return (
            f"after step {n} r{r} holds {after[('num_output_placeholders', r)]} placeholder(s) while its "
            f"in-flight steps reserved {owed(r)}"
        )
    if prop == "safe-frontier-nonnegative":
        r = next((r for r in reqs if nested(trace.steps[t].args).get("stop", [0] * cfg.requests)[r]), 0)
        return (
            f"at step {n} r{r}'s session stops with a negative safe frontier "
            f"(c - P computed from c = {before[('num_computed_tokens', r)]})"
        )
    if prop == "scheduled-tokens-positive":
        return f"at step {n} a request is scheduled a non-positive number of tokens"
    if prop == "padding-intact":
        return f"at step {n} a padded admission is cut below 1 + num_spec_tokens"
    if prop == "stale-count-nonnegative":
        return f"at step {n} num_stale_output_tokens would go below 0"
    if prop == "logits-covered":
        return f"at step {n} a request with nothing left to decode is scheduled only its drafts"
    if prop == "session-keep-covers-computed":
        return f"at step {n} a session update keeps fewer tokens than the session has computed"
    return f"{prop} is violated at step {n}"


def reaction_in_words(cfg: Config, trace) -> str:
    last = trace.fired[-1] if trace.fired else []
    where = f"vLLM {cfg.prof.release}" if not cfg.prof.historical else f"the historical profile {cfg.profile}"
    if last:
        statement = ASSERTS[last[0]].statement
        what = f"`{statement}`" if statement else f"{last[0]} ({ASSERTS[last[0]].doc})"
        return f"on {where} {what} fires: the engine dies"
    if getattr(trace, "stuck", ()):
        return f"on {where} no assert fires and the engine, run on by itself, hangs: {hang.short(trace.stuck)}"
    return f"on {where} no assert fires: the violation is silent"


def sentence(cfg: Config, trace, prop: str) -> str:
    """One sentence: what goes wrong, in the order it happens."""
    who = (
        f"With {cfg.run.phrase}"
        + (" and the clamp" if cfg.clamp else "")
        + (" and the step-reservation guard" if cfg.guard != "none" else "")
    )
    parts = [(n, f"at step {n} {phrase}") for n, phrase in events_in_words(cfg, trace)]
    if prop != "predicates-agree":
        for t, step in enumerate(trace.steps[:-1]):
            if step.event == "schedule" and trace.checks[t].get("predicates-agree") is False:
                parts.append((t + 1, disagreement(cfg, trace, t) or f"runner and scheduler disagree at step {t + 1}"))
                break
    parts.sort(key=lambda p: p[0])
    body = violation_in_words(cfg, trace, prop)
    lead = "; ".join(p for _, p in parts) if parts else "on the core path alone (schedule and deliver)"
    return f"{who}: {lead}; {body}, and {reaction_in_words(cfg, trace)}."


# ------------------------------------------------------------------ the table of changes


def changing_columns(cfg: Config, trace) -> list[tuple]:
    """The (variable, request) pairs that change somewhere in the trace, plus the queue length."""
    cols = []
    for r in range(cfg.requests):
        for var, _ in SHORT_LABELS:
            key = (var, r)
            if key in trace.states[0] and any(s[key] != trace.states[0][key] for s in trace.states[1:]):
                cols.append(key)
    if any(s[("queue_len",)] != trace.states[0][("queue_len",)] for s in trace.states[1:]):
        cols.append(("queue_len",))
    return cols


def column_label(key: tuple, requests: int) -> str:
    if key == ("queue_len",):
        return "in flight"
    label = LABEL[key[0]]
    return label if requests == 1 else f"r{key[1]}.{label}"


def change_table(cfg: Config, trace, violated_at: dict[int, list[str]] | None = None) -> list[list[str]]:
    """Rows [step, event, picks, value per changing column, what breaks]; a value that
    changed at that step is bold."""
    cols = changing_columns(cfg, trace)
    head = ["step", "event", "picks"] + [column_label(k, cfg.requests) for k in cols] + ["violated"]
    rows = [head]
    for t, state in enumerate(trace.states):
        if t == 0:
            event, pick = "init", " ".join(f"{k}={v}" for k, v in nested(trace.init).items())
        else:
            step = trace.steps[t - 1]
            event, pick = step.event, picks(cfg, step.event, step.args)
        cells = []
        for key in cols:
            value = fmt(key[0], state[key])
            changed = t > 0 and trace.states[t - 1][key] != state[key]
            cells.append(f"**{value}**" if changed else value)
        broken = (violated_at or {}).get(t, [])
        rows.append([str(t), event, pick] + cells + [", ".join(broken)])
    return rows


def violations_by_step(cfg: Config, trace) -> dict[int, list[str]]:
    """Properties first violated at each step (1-based), and the assert that fires."""
    it = Interpreter(cfg)
    out: dict[int, list[str]] = {}
    seen = set()
    for t in range(len(trace.steps)):
        names = [p for p, ok in trace.checks[t].items() if not ok]
        props = it.state_properties(trace.states[t + 1])
        names += [p for p, ok in props.items() if not ok and PROPERTIES[p].applies(cfg)]
        fresh = [p for p in dict.fromkeys(names) if p not in seen]
        seen.update(fresh)
        fired = trace.fired[t] if trace.fired else []
        if fired:
            fresh.append("assert fires: " + ", ".join(fired))
        if fresh:
            out[t + 1] = fresh
    return out


# ------------------------------------------------------------------ vLLM lines


@dataclass(frozen=True)
class Line:
    id: str
    where: str  # file.py:first-last
    url: str
    text: str  # the first cited line, stripped
    why: str


def vllm_lines(cfg: Config, trace, prop: str) -> list[Line]:
    """The vLLM lines behind a counterexample, in the release it was found on: the
    property, the assert that fires, the runner's rule, each mechanism and front-end event."""
    release = cfg.prof.release
    known = citations.load()
    wanted: list[tuple[str, str]] = []

    def add(ids: str, why: str) -> None:
        for cid in field_ids(ids):
            wanted.append((cid, why))

    add(PROPERTIES[prop].cite, f"the property ({prop})")
    for fired in trace.fired[-1] if trace.fired else []:
        add(ASSERTS[fired].cite, "the assert that fires")
    add(cfg.run.cite, "the runner's discard rule")
    for mechanism in trace.mechanisms or []:
        if mechanism in MECHANISM_CITES:
            add(MECHANISM_CITES[mechanism], mechanism)
        elif mechanism in BY_NAME:
            add(BY_NAME[mechanism].source, f"the {mechanism} event")
    out, seen = [], set()
    for cid, why in wanted:
        if cid in seen or cid not in known or not (known[cid].plugin or release in known[cid].lines):
            continue
        seen.add(cid)
        where, url = citations.ref(cid, release)
        text = next((line.strip() for line in known[cid].text_in(release).split("\n") if line.strip()), "")
        out.append(Line(cid, where, url, text, why))
    return out


# ------------------------------------------------------------------ why, in words

# the counts each side decides with: (scheduler's variable, runner's variable), per runner kind
VIEWS = {
    "v2": (("num_computed_tokens", "v2_num_computed"), ("num_prompt_tokens", "v2_prefill_len")),
    "v1": (("num_tokens", "v1_num_tokens"),),
}


def _label(var: str) -> str:
    return f"{LABEL[var]} ({var})"


def why(cfg: Config, trace) -> str | None:
    """Why it goes wrong, read off the trace: the first schedule step where the runner's
    discard and the scheduler's reservation disagree, which counts the two sides decide
    with differ there and by how much, and the step where they came apart. Without such a
    step (an injected fault acting alone): the steps where a mechanism acts."""
    events = events_in_words(cfg, trace)
    for t, step in enumerate(trace.steps):
        if step.event != "schedule":
            continue
        for sc in scheduled(cfg, trace, t):
            runner_chunk, scheduler_chunk = sc.discards, sc.reserved == 0
            if runner_chunk == scheduler_chunk:
                continue
            before = trace.states[t]
            who = "the V2 runner" if cfg.is_v2 else "the V1 runner"
            if scheduler_chunk:
                what = (
                    f"At step {t + 1} the scheduler schedules {sc.n} token(s) of r{sc.r} as a prefill chunk and "
                    f"reserves no placeholder, but {who} samples a token ({sc.rule})"
                )
            else:
                what = (
                    f"At step {t + 1} the scheduler reserves {sc.reserved} placeholder(s) for r{sc.r}, but {who} "
                    f"discards its sample ({sc.rule})"
                )
            what += "".join(f"; at this step {phrase}" for at, phrase in events if at == t + 1)
            apart = []
            for mine, theirs in VIEWS["v2" if cfg.is_v2 else "v1"]:
                a, b = before.get((mine, sc.r)), before.get((theirs, sc.r))
                if a is None or b is None or a == b:
                    continue
                text = f"the scheduler's {_label(mine)} is {a}, the runner's {_label(theirs)} {b}"
                text += f" (apart by {abs(a - b)})"
                since = _came_apart(trace, t, sc.r, mine, theirs)
                if since is not None:
                    n, changed = since
                    text += f", since step {n}, where {changed}"
                    text += "".join(f" ({phrase})" for at, phrase in events if at == n)
                apart.append(text)
            because = "; ".join(apart) if apart else "the two sides' counts agree: the rules themselves differ"
            return f"{what}. Before that step {because}. The vLLM lines below are where each side decides."
    if events:
        return (
            "The runner and the scheduler agree on every prefill chunk; what breaks it: "
            + "; ".join(f"at step {at}, {phrase}" for at, phrase in events)
            + "."
        )
    return None


def _came_apart(trace, t: int, r: int, mine: str, theirs: str) -> tuple[int, str] | None:
    """The last step before t after which the two counts differ and before which they did
    not, and what changed there."""
    for i in range(t - 1, -1, -1):
        b, a = trace.states[i], trace.states[i + 1]
        if b.get((mine, r)) == b.get((theirs, r)) and a.get((mine, r)) != a.get((theirs, r)):
            moved = [f"{LABEL[v]} {b[(v, r)]}→{a[(v, r)]}" for v in (mine, theirs) if b.get((v, r)) != a.get((v, r))]
            still = [f"{LABEL[v]} stays {a[(v, r)]}" for v in (mine, theirs) if b.get((v, r)) == a.get((v, r))]
            return i + 1, " while ".join([", ".join(moved)] + still) if moved else "they diverge"
    return None

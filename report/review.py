"""`make review BASE=<tree or release> HEAD=<tree>`: what a change to vLLM fixes and breaks.

    python -m vllm_contract.report.review --base 0.33.0 --head /path/to/vllm-checkout [--fuzz N] [--out build/review]

Runs on both trees, each in a process of its own (one vLLM tree per process,
report/observe.py): every known counterexample and healthy path (the generated cases,
on the arms of each tree's profile, clamp off and on) and a short fuzz (N random traces
per fuzz preset, drawn once from the head's model and replayed on both). For each it
records what vLLM itself does, whatever the model predicts: which assert fires where,
where the tree first differs from the model, which properties its own state violates.
Then it compares base with head:

  fixed            violates on base, holds on head (never a head that hangs)
  still broken     violates on both (a changed reaction, crash <-> silent, is listed apart)
  newly broken     holds on base, violates (or raises, or hangs) on head

After each trace both trees run on by themselves (report/observe.py): a head that leaves a
request behind that base does not is breaking, and the summary's first line says how many
of the breaking things are hangs and names the first; a hang is never fixed, holds or
"same as the model" unless the model predicts that very hang.
and re-anchors every citation of spec/citations.toml in both trees: what moved, what
changed, what exists in one tree only.

Writes --out/summary.md (fits one PR comment), summary.json, base.json, head.json.
Exit 0: head breaks nothing base did not; 1: head breaks something (a case, a healthy
path or a fuzz trace that holds on base violates or raises on head); 2: bad input;
3: an observer crashed; 4: a tree does not load (one line, the cause and the fix).
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from pathlib import Path

from vllm_contract.adapter import child
from vllm_contract.codegen.export import as_markdown, outcome_words
from vllm_contract.spec import citations as C
from vllm_contract.spec.errors import CouldNotRun, TreeError
from vllm_contract.spec.heartbeat import to_stderr
from vllm_contract.spec.properties import ASSERTS
from vllm_contract.spec.verdicts import Reaction

ROOT = Path(__file__).resolve().parent.parent
COMMENT_LIMIT = 65_536


log = to_stderr


# ------------------------------------------------------------------ fuzz traces


def fuzz_traces(profile: str, per_preset: int, seed: int, length: int = 30) -> list[dict]:
    """Random traces from the model under `profile`, one list for both trees."""
    from vllm_contract.model.sampler import random_trace
    from vllm_contract.targets.fuzz.presets import PRESETS, runnable_presets

    out = []
    release = profile.removeprefix("vllm-")
    for name in runnable_presets((release,)):  # V1's presets end with V1 (0.33.0)
        cfg = PRESETS[name].with_(profile=profile).validate()
        for i in range(per_preset):
            rng = random.Random(seed * 100003 + i * 7919 + len(out))
            init, steps, _ = random_trace(cfg, rng, length)
            out.append(
                {
                    "id": f"{name}#{i}",
                    "preset": name,
                    "config": cfg.record(),
                    "init": init,
                    "steps": [(e, [[list(k), v] for k, v in a.items()]) for e, a in steps],
                }
            )
    return out


# ------------------------------------------------------------------ observing both trees


def check_source(side: str, tree) -> None:
    """A tree's source has every internal the observer reads (adapter/internals.py); else
    TreeFailure, one line per missing internal, said for its side."""
    from vllm_contract.adapter import internals
    from vllm_contract.adapter.tree import nearest_release

    found = internals.probe(tree.package, (internals.SCHEDULER,))
    if found.missing:
        nearest, _ = nearest_release(tree.version)
        raise TreeFailure("\n".join(f"{side} ({tree.label}): {line}" for line in found.problems(tree.title, nearest)))


def observe_both(base: str, head: str, traces_file: Path, out: Path, cases: str = "*") -> tuple[dict, dict]:
    """report/observe_child.py on each tree, in two processes at once; their progress is shown."""
    procs = {}
    for side, spec in (("base", base), ("head", head)):
        args = ["--vllm", spec, "--out", str(out / f"{side}.json"), "--traces", str(traces_file), "--cases", cases]
        procs[side] = child.start("vllm_contract.report.observe_child", args, child.environment(), ROOT)
    tails: dict[str, list[str]] = {"base": [], "head": []}

    def pump(side):
        for line in procs[side].stderr:
            line = line.rstrip("\n")
            tails[side].append(line)
            if line.startswith(("observe", "  ", "error")):
                log(f"[{side}] {line}")

    threads = [threading.Thread(target=pump, args=(s,), daemon=True) for s in procs]
    for t in threads:
        t.start()
    try:
        codes = {}
        while len(codes) < len(procs):  # the first side to fail stops the other
            for side, p in procs.items():
                if side not in codes and p.poll() is not None:
                    codes[side] = p.returncode
            if any(code != 0 for code in codes.values()):
                break
            time.sleep(0.2)
    finally:  # interrupted, or one side failed: no observer runs on (they also die with this process)
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    for t in threads:
        t.join()
    for side, code in sorted(codes.items(), key=lambda kv: kv[1] == 0):  # a failed side first
        if code == 4:
            at = next((i for i, ln in enumerate(tails[side]) if ln.startswith("error:")), None)
            said = tails[side][at:] if at is not None else [f"the {side} tree does not load"]
            said[0] = said[0].removeprefix("error: ")
            where = f"{side} ({base if side == 'base' else head})"
            raise TreeFailure("\n".join(f"{where}: {line}" for line in said if line.strip()))
        if code != 0:
            raise ObserverCrash(f"the {side} observer failed (exit {code}): " + " | ".join(tails[side][-4:]))
    return (json.loads((out / "base.json").read_text()), json.loads((out / "head.json").read_text()))


class TreeFailure(TreeError):
    """A tree does not load in its observer."""


class ObserverCrash(CouldNotRun):
    """An observer ended without a result."""


# ------------------------------------------------------------------ comparing


def violated(entry: dict) -> set[str]:
    """What the tree violates on an observation: its properties, plus "raises" for an
    error other than an assert (vLLM raised something the contract does not name) and
    "hangs" for a request it leaves behind, run on by itself."""
    obs = entry["observed"]
    out = set(obs.get("violations") or {})
    if obs.get("error"):
        out.add("raises")
    if obs.get("stuck"):
        out.add("hangs")
    return out


def hangs(entry: dict) -> bool:
    """The tree, run on by itself after the trace, left a request behind."""
    return bool(entry["observed"].get("stuck"))


def hang_text(obs: dict) -> str:
    """The requests a tree left behind, each with what holds it."""
    from vllm_contract.model.hang import WHY

    return "; ".join(f"r{r} never runs again, {WHY[why][0]} ({held})" for r, why, held in obs["stuck"])


def unpredicted_hang(entry: dict) -> bool:
    """The tree hangs, and the model does not predict that very hang (the same requests, for
    the same reason)."""
    obs = entry["observed"]
    return bool(obs.get("stuck")) and [s[:2] for s in obs["stuck"]] != [list(s) for s in obs.get("model_stuck") or []]


def could_not_run(entry: dict) -> str | None:
    return entry["observed"].get("could_not_run")


def describe(entry: dict) -> str:
    obs = entry["observed"]
    if obs.get("could_not_run"):
        return f"could not run: {obs['could_not_run'][:160]}"
    if obs.get("fired"):
        name, step, where = obs["fired"]
        statement = ASSERTS[name].statement if name in ASSERTS else name
        return f"crash at {step}: `{statement}` ({where})"
    if obs.get("error"):
        return f"error: {obs['error'][:120]}"
    if obs.get("stuck"):
        return f"hang: {hang_text(obs)}"
    if obs.get("violations"):
        return "silent: " + ", ".join(f"{p}@{s}" for p, s in sorted(obs["violations"].items(), key=lambda x: x[1]))
    return "holds"


def differs(entry: dict) -> str:
    """Where the tree's own observation first left the model of its profile."""
    obs = entry["observed"]
    if obs.get("could_not_run"):
        return "not run"
    d = obs.get("diverged")
    hung = ""
    if unpredicted_hang(entry):
        model = obs.get("model_stuck") or []
        other = ", ".join(f"r{r} {w}" for r, w in model)
        hung = "the tree hangs where the model " + (f"predicts another hang ({other})" if model else "predicts no hang")
    elif obs.get("model_stuck") and not obs.get("stuck") and not obs.get("fired") and not obs.get("error"):
        hung = "the model predicts a hang the tree does not show"
    if not d:
        return hung or "same as the model"
    said = [hung] if hung else []
    for k, (model, tree) in list(d["keys"].items())[:3]:
        if k == "fired":
            said.append(f"the model fires {model or 'nothing'}, the tree {tree or 'nothing'}")
        else:
            said.append(f"{k} {model} in the model, {tree} in the tree")
    return f"step {d['step']} {d['event']}: " + "; ".join(said)


def unguarded(b: dict, h: dict) -> list[str]:
    """The asserts base fired that head no longer fires while head's own state violates the
    property the assert guards: the engine no longer stops on wrong output."""
    fired = b["observed"].get("fired")
    if not fired or h["observed"].get("fired"):
        return []
    name = fired[0]
    guarded = ASSERTS[name].property if name in ASSERTS else None
    if guarded and guarded in (h["observed"].get("violations") or {}):
        return [name]
    return []


def _empty() -> dict:
    return {
        "fixed": [],
        "still": [],
        "new": [],
        "reaction": [],
        "unguarded": [],
        "could_not_run": [],
        "runner_removed": [],
        "both_hold": 0,
    }


def compare(base: dict, head: dict) -> dict:
    """Pair the observations of the same case arm (module, clamp) and fuzz trace.

    An arm either tree could not run is counted as could-not-run, with its cause, and
    nothing else. Otherwise: fixed when base violates the case's property and head does
    not; still broken when both do; newly broken when head violates a property (or
    raises) that base does not. A reaction that changed from crash to silent while the
    property stays violated is breaking (the engine no longer stops on wrong output), and
    so is an assert of base that head no longer fires while head violates what it
    guards. A healthy path or a fuzz trace has no property of its own: any violation counts."""
    result = {**_empty(), "unpaired": 0}
    index = {(c["module"], c["clamp"]): c for c in base["cases"]}
    for h in head["cases"]:
        b = index.get((h["module"], h["clamp"]))
        if b is None:
            result["unpaired"] += 1
            continue
        item = {
            "case": h["case"],
            "kind": h["kind"],
            "property": h["property"],
            "clamp": h["clamp"],
            "module": h["module"],
            "base": describe(b),
            "head": describe(h),
            "base_reaction": b["reaction"],
            "head_reaction": h["reaction"],
            "head_differs": differs(h),
            "base_differs": differs(b),
        }
        _classify(result, item, b, h, h["property"])
    fuzz = {**_empty(), "traces": 0, "base_diverged": 0, "head_diverged": 0}
    findex = {f["id"]: f for f in base["fuzz"]}
    for h in head["fuzz"]:
        b = findex.get(h["id"])
        if b is None:
            continue
        fuzz["traces"] += 1
        fuzz["base_diverged"] += bool(b["observed"].get("diverged"))
        fuzz["head_diverged"] += bool(h["observed"].get("diverged"))
        item = {
            "trace": h["id"],
            "case": h["id"],
            "clamp": False,
            "base": describe(b),
            "head": describe(h),
            "base_reaction": b["reaction"],
            "head_reaction": h["reaction"],
            "head_differs": differs(h),
        }
        _classify(fuzz, item, b, h, None)
    result["fuzz"] = fuzz
    result["could_not_run_causes"] = causes(result["could_not_run"] + fuzz["could_not_run"])
    return result


def _classify(result: dict, item: dict, b: dict, h: dict, prop: str | None) -> None:
    if h["observed"].get("runner_removed"):  # the runner the arm runs on is gone from head (V1, 0.34.0)
        result["runner_removed"].append({**item, "cause": could_not_run(h)})
        return
    missing = [(side, could_not_run(o)) for side, o in (("base", b), ("head", h)) if could_not_run(o)]
    if missing:
        result["could_not_run"].append({**item, "sides": [side for side, _ in missing], "cause": missing[0][1]})
        return
    bv, hv = violated(b), violated(h)
    b_has = (prop in bv) if prop else bool(bv)
    h_has = (prop in hv) if prop else bool(hv)
    if hangs(h):  # a head that hangs is never fixed: its property counts as violated
        h_has = True
    fresh = sorted(hv - bv)
    if hangs(h) and not hangs(b) and "hangs" not in fresh:
        fresh.append("hangs")
    if hangs(h) and not hangs(b):  # newly hangs: what the first line counts and names
        item["hang"] = hang_text(h["observed"])
    if b_has and not h_has:
        result["fixed"].append(item)
    elif b_has and h_has:
        result["still"].append(item)
        if b["reaction"] != h["reaction"] and Reaction(b["reaction"]).violated and Reaction(h["reaction"]).violated:
            result["reaction"].append(item)
    lost = unguarded(b, h)
    if lost:
        result["unguarded"].append({**item, "asserts": lost})
    if fresh:
        result["new"].append({**item, "newly": fresh})
    if not b_has and not h_has and not fresh and not lost:
        result["both_hold"] += 1


def causes(items: list[dict]) -> list[dict]:
    """The could-not-run causes, each once, with how many arms or traces it stopped."""
    counts: dict[str, list] = {}
    for it in items:
        counts.setdefault(it["cause"], []).append(it)
    return [
        {"cause": cause, "count": len(its), "sides": sorted({s for it in its for s in it["sides"]})}
        for cause, its in sorted(counts.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]


def breaking(cmp: dict) -> list[dict]:
    """What head breaks that base did not: newly violated (or raising), crash -> silent,
    an assert that no longer guards its state; each arm or trace once."""
    out, seen = [], set()
    for part in (cmp, cmp["fuzz"]):
        crash_to_silent = [i for i in part["reaction"] if Reaction(i["base_reaction"]) is Reaction.CRASH]
        for it in part["new"] + crash_to_silent + part["unguarded"]:
            key = (it.get("module") or it.get("trace"), it["clamp"])
            if key not in seen:
                seen.add(key)
                out.append(it)
    return out


def newer_than_modelled(tree: dict | None) -> str:
    """', head (X) is newer than every modelled release: checked against R's model', or ''."""
    if not tree or "newer than every modelled release" not in tree.get("described", ""):
        return ""
    return (
        f"; head ({tree['title']}, declares {tree['version']}) is newer than every modelled release and "
        f"was checked against the {tree['profile'].removeprefix('vllm-')} model"
    )


def outcome(cmp: dict, head_tree: dict | None = None) -> tuple[int, str]:
    """The exit status and the summary's first line (which says when head is newer than
    every modelled release)."""
    from vllm_contract.spec.errors import ExitStatus

    newer = newer_than_modelled(head_tree)
    broken = breaking(cmp)
    missing = len(cmp["could_not_run"]) + len(cmp["fuzz"]["could_not_run"])
    incomplete = (
        f"; {missing} arm(s) or trace(s) could not run (counted apart, never as fixed or broken)" if missing else ""
    )
    removed = cmp.get("runner_removed", [])
    if removed:  # said after the outcome: those arms end with their runner, nothing failed to run
        newer += f"; {len(removed)} arm(s) end with the V1 runner, which head removed"
    if broken:
        hung = [it for it in broken if it.get("hang")]
        said = ""
        if hung:
            said = f", {len(hung)} of them a hang: the engine runs on and {hung[0]['hang']}" + (
                f" ({hung[0].get('module', hung[0].get('trace', '')).rsplit('/', 1)[-1]})"
            )
        return ExitStatus.FINDING, f"**Head breaks {len(broken)} thing(s) base did not{said}**{incomplete}{newer}."
    if missing:
        return ExitStatus.COULD_NOT_RUN, (
            f"**Incomplete: {missing} arm(s) or trace(s) could not run**; "
            f"of the rest, head breaks nothing base did not{newer}."
        )
    if newer:
        return ExitStatus.OK, f"**Head breaks nothing base did not**{newer}."
    return ExitStatus.OK, "**Head breaks nothing base did not.**"


# ------------------------------------------------------------------ citations


def release_of(tree: dict) -> str | None:
    """The release whose recorded lines a tree is compared with: the release itself, or
    what it declares when that is a recorded release; None: newer than every release."""
    version = tree["label"] if tree["kind"] != "checkout" else tree["version"]
    return version if version in C.releases() else None


def cite_view(root: Path, release: str | None) -> dict:
    """id -> {file, line, status, text}: where each citation's text is in a tree."""
    out = {}
    known = C.load()
    for f in C.anchor(root, release):
        line = f.found or f.line
        path = Path(root) / "vllm" / f.file
        text = ""
        if f.status != "vanished" and path.is_file():
            lines = path.read_text(encoding="utf-8").split("\n")
            want = len(known[f.id].text_in(f.release).split("\n"))
            text = "\n".join(s.rstrip() for s in lines[line - 1 : line - 1 + want])
        out[f.id] = {"file": f.file, "line": line, "status": f.status, "text": text}
    return out


def compare_cites(base_view: dict, head_view: dict) -> dict:
    moved, changed, gone, new = [], [], [], []
    for cid in sorted(set(base_view) | set(head_view)):
        b, h = base_view.get(cid), head_view.get(cid)
        if b and not h:
            gone.append({"id": cid, "base": f"{Path(b['file']).name}:{b['line']}"})
        elif h and not b:
            new.append({"id": cid, "head": f"{Path(h['file']).name}:{h['line']}"})
        elif h["status"] in ("changed", "vanished") or b["text"] != h["text"]:
            changed.append(
                {
                    "id": cid,
                    "base": f"{Path(b['file']).name}:{b['line']}",
                    "head": f"{Path(h['file']).name}:{h['line']}" if h["status"] != "vanished" else "vanished",
                    "status": h["status"],
                }
            )
        elif b["line"] != h["line"] or b["file"] != h["file"]:
            moved.append(
                {
                    "id": cid,
                    "base": f"{Path(b['file']).name}:{b['line']}",
                    "head": f"{Path(h['file']).name}:{h['line']}",
                }
            )
    return {"moved": moved, "changed": changed, "only_base": gone, "only_head": new}


# ------------------------------------------------------------------ the summary


def exported_tests(cmp: dict, profile: str, prove_dir: Path) -> tuple[list, str]:
    """The exported vLLM tests (codegen.export, as `make export` writes them for the head's
    release) of the cases head still or newly violates, and a line on what is left out."""
    from vllm_contract.model.results import StaleSummary, load_summary
    from vllm_contract.report.data import counterexamples, exported_tests, generated_modules

    release = profile.removeprefix("vllm-")
    if not (prove_dir / "summary.json").is_file():
        return [], f"`make prove`, then `make export RELEASE={release}`, writes them (no {prove_dir} here)."
    try:
        summary = load_summary(prove_dir)
    except StaleSummary as exc:
        return [], f"No exported tests: {exc}"
    modules = generated_modules()
    cxs = counterexamples(summary, prove_dir, modules)
    exported = exported_tests(cxs, modules, prove_dir)
    by_case = {}
    for c in cxs:
        mod = exported.get(c.page, (None,))[0]
        if mod is not None and c.release == release:
            by_case.setdefault(mod.case, mod)
    items = cmp["still"] + cmp["new"] + cmp["unguarded"]
    names = sorted({it["case"] for it in items if it.get("kind") == "violation"})
    found = [by_case[n] for n in names if n in by_case]
    rest = len(names) - len(found)
    note = (
        f"{rest} more violated case(s) have no exported test for vLLM {release} (each one's reason: "
        f"`make export RELEASE={release}`, README.md)."
        if rest
        else ""
    )
    return found, note


def table(rows: list[list[str]]) -> list[str]:
    def cell(x):
        return str(x).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return out + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows[1:]]


def summary_md(
    base: dict,
    head: dict,
    cmp: dict,
    cites: dict,
    seconds: float,
    fuzz_n: int,
    limit_rows: int = 60,
    exported: tuple[list, str] = ([], ""),
    shown: int = 2,
) -> str:
    """`exported`: exported_tests's result; the first `shown` are in full (collapsed)."""
    bt, ht = base["tree"], head["tree"]
    _, first = outcome(cmp, ht)
    f = cmp["fuzz"]
    crash_to_silent = [i for i in cmp["reaction"] if Reaction(i["base_reaction"]) is Reaction.CRASH]
    fuzz_crash_to_silent = [i for i in f["reaction"] if Reaction(i["base_reaction"]) is Reaction.CRASH]
    lines = [
        first,
        "",
        f"## vLLM review: {bt['title']} → {ht['title']}",
        "",
        f"base: {bt['described']}  ",
        f"head: {ht['described']}",
        "",
        "| | generated cases (arms) | fuzz traces |",
        "|---|---|---|",
        f"| **could not run** on base or head (its cause below; never counted as fixed or broken) | "
        f"{len(cmp['could_not_run'])} | {len(f['could_not_run'])} |",
        f"| ended: the runner the arm runs on is not in head (V1, removed in 0.34.0) | "
        f"{len(cmp.get('runner_removed', []))} | 0 |",
        f"| fixed (base violates the case's property, head does not) | {len(cmp['fixed'])} | "
        f"{len(cmp['fuzz']['fixed'])} |",
        f"| still broken | {len(cmp['still'])} | {len(cmp['fuzz']['still'])} |",
        f"| ... of which the reaction changed (crash ↔ silent) | {len(cmp['reaction'])} | "
        f"{len(cmp['fuzz']['reaction'])} |",
        f"| newly broken (head violates a property, or raises, where base does not) | {len(cmp['new'])} | "
        f"{len(cmp['fuzz']['new'])} |",
        f"| ... of which head hangs (run on by itself, a request never runs again) | "
        f"{sum(1 for i in cmp['new'] if 'hangs' in i.get('newly', ()))} | "
        f"{sum(1 for i in f['new'] if 'hangs' in i.get('newly', ()))} |",
        f"| breaking: crash on base, silent on head (the engine no longer stops on wrong output) | "
        f"{len(crash_to_silent)} | {len(fuzz_crash_to_silent)} |",
        f"| breaking: an assert base fires no longer guards head's state | {len(cmp['unguarded'])} | "
        f"{len(f['unguarded'])} |",
        f"| holds on both | {cmp['both_hold']} | {cmp['fuzz']['both_hold']} |",
        "",
        "A case arm is a generated case under the tree's profile with the clamp off or on. What is "
        "compared is what vLLM does (the assert that fires, the properties its own state violates), "
        "not the model's prediction; *where head differs from the model* is the first step at which "
        "head's own observation (its state, or the assert it fires) leaves the model of its profile.",
        "",
    ]
    if cmp["could_not_run_causes"]:
        lines += ["### Could not run", ""]
        lines += table(
            [["cause", "arms or traces it stopped", "on"]]
            + [[c["cause"], str(c["count"]), " and ".join(c["sides"])] for c in cmp["could_not_run_causes"]]
        )
        lines.append("")

    def section(title: str, items: list[dict], note: str = "") -> None:
        lines.extend([f"### {title} ({len(items)})", ""])
        if note:
            lines.extend([note, ""])
        if not items:
            lines.extend(["none", ""])
            return
        rows = [["case", "clamp", "base", "head", "where head differs from the model"]]
        for it in items[:limit_rows]:
            head_text = it["head"] + (f" (new: {', '.join(it['newly'])})" if it.get("newly") else "")
            rows.append(
                [
                    f"`{it['module'].rsplit('/', 2)[-2]}/{it['case']}`",
                    "on" if it["clamp"] else "off",
                    it["base"],
                    head_text,
                    it["head_differs"],
                ]
            )
        lines.extend(table(rows))
        if len(items) > limit_rows:
            lines.append(f"\n... and {len(items) - limit_rows} more (summary.json)")
        lines.append("")

    section(
        "Breaking: crash → silent",
        crash_to_silent,
        "Violated on both, but base's assert stopped the engine and head goes on with the wrong state.",
    )
    section(
        "Breaking: an assert no longer guards",
        cmp["unguarded"],
        "Base fires the assert; head does not, and head's own state violates what the assert guards.",
    )
    section("Newly broken", cmp["new"])
    section("Fixed", cmp["fixed"], "The case's own property holds on head; what head still violates is listed.")
    section(
        "Changed reaction (silent → crash)",
        [i for i in cmp["reaction"] if Reaction(i["base_reaction"]) is Reaction.SILENT],
        "Violated on both; head's assert now stops the engine.",
    )
    section("Still broken", [i for i in cmp["still"] if i not in cmp["reaction"]])
    f = cmp["fuzz"]
    lines += [
        f"### Fuzz ({f['traces']} traces, {fuzz_n} per preset, drawn from head's model)",
        "",
        f"Traces where the tree's state left its model: base {f['base_diverged']}, head {f['head_diverged']}.",
        "",
    ]
    for title, items in (
        ("breaking (crash -> silent, an assert no longer guarding)", fuzz_crash_to_silent + f["unguarded"]),
        ("newly broken", f["new"]),
        ("fixed", f["fixed"]),
        ("changed reaction", f["reaction"]),
    ):
        if items:
            rows = [["trace", "base", "head", "where head differs from the model"]]
            rows += [
                [
                    i["trace"],
                    i["base"],
                    i["head"] + (f" (new: {', '.join(i['newly'])})" if i.get("newly") else ""),
                    i["head_differs"],
                ]
                for i in items[:20]
            ]
            lines += [f"{title}:", ""] + table(rows) + [""]
    mods, note = exported
    if mods or note:
        lines += [f"### As tests of vLLM's own suite ({len(mods)})", ""]
        lines += [
            "The cases head still or newly violates, as tests of vLLM's own suite for head's release, each "
            "a violation test and a healthy-path control. Where they fail is said of the release as "
            "released; paste them into head's `tests/v1/core/` to see what head does.",
            "",
        ]
        for mod in mods[:shown]:
            lines += as_markdown(mod) + [""]
        for mod in mods[shown:]:
            command = f"make export CASE={mod.case} RELEASE={mod.release}"
            lines.append(f"- `{mod.module}`: `{command}`; it {outcome_words(mod)}")
        if mods[shown:]:
            lines.append("")
        if note:
            lines += [note, ""]
    lines += [
        "### Citations (spec/citations.toml, re-anchored in both trees)",
        "",
        f"{len(cites['changed'])} changed, {len(cites['moved'])} moved, {len(cites['only_base'])} only in base, "
        f"{len(cites['only_head'])} only in head.",
        "",
    ]
    if cites["changed"]:
        lines += table(
            [["citation", "base", "head", "status"]]
            + [[f"`{c['id']}`", c["base"], c["head"], c["status"]] for c in cites["changed"]]
        ) + [""]
    if cites["moved"]:
        shown = ", ".join(f"`{c['id']}` {c['base']}→{c['head'].split(':')[-1]}" for c in cites["moved"][:25])
        more = f", ... {len(cites['moved']) - 25} more (summary.json)" if len(cites["moved"]) > 25 else ""
        lines += [f"Moved: {shown}{more}.", ""]
    for key, label in (("only_base", "Only in base"), ("only_head", "Only in head")):
        if cites[key]:
            lines += [f"{label}: " + ", ".join(f"`{c['id']}`" for c in cites[key]) + ".", ""]
    lines += [
        f"_`make review` in {seconds:.0f} s. Exit status: 0 head breaks nothing base did not, 1 it does, "
        "3 it breaks nothing but some arms could not run._",
        "",
    ]
    return "\n".join(lines)

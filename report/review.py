"""`make review BASE=<tree or release> HEAD=<tree>`: what a change to vLLM fixes and breaks.

    python -m report.review --base 0.33.0 --head /path/to/vllm-checkout [--fuzz N] [--out build/review]

Runs on both trees, each in a process of its own (one vLLM tree per process,
report/observe.py): every known counterexample and healthy path (the generated cases,
on the arms of each tree's profile, clamp off and on) and a short fuzz (N random traces
per fuzz preset, drawn once from the head's model and replayed on both). For each it
records what vLLM itself does, whatever the model predicts: which assert fires where,
where the tree first differs from the model, which properties its own state violates.
Then it compares base with head:

  fixed            violates on base, holds on head
  still broken     violates on both (a changed reaction, crash <-> silent, is listed apart)
  newly broken     holds on base, violates (or raises) on head
and re-anchors every citation of spec/citations.toml in both trees: what moved, what
changed, what exists in one tree only.

Writes --out/summary.md (fits one PR comment), summary.json, base.json, head.json.
Exit 0: head breaks nothing base did not; 1: head breaks something (a case, a healthy
path or a fuzz trace that holds on base violates or raises on head); 2: bad input;
3: an observer crashed; 4: a tree does not load (one line, the cause and the fix).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from spec import citations as C
from spec.properties import ASSERTS

ROOT = Path(__file__).resolve().parent.parent
COMMENT_LIMIT = 65_536


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ fuzz traces


def fuzz_traces(profile: str, per_preset: int, seed: int, length: int = 30) -> list[dict]:
    """Random traces from the model under `profile`, one list for both trees."""
    from targets.fuzz import PRESETS, random_trace

    out = []
    for name, preset in PRESETS.items():
        cfg = preset.with_(profile=profile).validate()
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


def observe_both(base: str, head: str, traces_file: Path, out: Path) -> tuple[dict, dict]:
    """report.observe on each tree, in two processes at once; their progress is shown."""
    procs = {}
    for side, spec in (("base", base), ("head", head)):
        cmd = [
            sys.executable,
            "-m",
            "report.observe",
            "--vllm",
            spec,
            "--out",
            str(out / f"{side}.json"),
            "--traces",
            str(traces_file),
        ]
        env = dict(os.environ)
        env.pop("VLLM", None)
        procs[side] = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
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
    codes = {side: p.wait() for side, p in procs.items()}
    for t in threads:
        t.join()
    for side, code in codes.items():
        if code == 4:
            line = next((ln for ln in tails[side] if ln.startswith("error:")), f"the {side} tree does not load")
            raise TreeFailure(f"{side} ({base if side == 'base' else head}): {line.removeprefix('error: ')}")
        if code != 0:
            raise ObserverCrash(f"the {side} observer failed (exit {code}): " + " | ".join(tails[side][-4:]))
    return (json.loads((out / "base.json").read_text()), json.loads((out / "head.json").read_text()))


class TreeFailure(RuntimeError):
    pass


class ObserverCrash(RuntimeError):
    pass


# ------------------------------------------------------------------ comparing


def violated(entry: dict) -> set[str]:
    """What the tree violates on an observation: its properties, plus "raises" for an
    error other than an assert."""
    obs = entry["observed"]
    out = set(obs.get("violations") or {})
    if obs.get("error"):
        out.add("raises")
    return out


def describe(entry: dict) -> str:
    obs = entry["observed"]
    if obs.get("fired"):
        name, step, where = obs["fired"]
        statement = ASSERTS[name].statement if name in ASSERTS else name
        return f"crash at {step}: `{statement}` ({where})"
    if obs.get("error"):
        return f"error: {obs['error'][:120]}"
    if obs.get("violations"):
        return "silent: " + ", ".join(f"{p}@{s}" for p, s in sorted(obs["violations"].items(), key=lambda x: x[1]))
    return "holds"


def differs(entry: dict) -> str:
    d = entry["observed"].get("diverged")
    if not d:
        return "same as the model"
    keys = ", ".join(f"{k} {a}/{b}" for k, (a, b) in list(d["keys"].items())[:3])
    return f"step {d['step']} {d['event']}: {keys} (model/tree)"


def compare(base: dict, head: dict) -> dict:
    """Pair the observations of the same case arm (module, clamp) and fuzz trace.

    A case arm is fixed when base violates the case's property and head does not; still
    broken when both do (its reaction changed when one crashes and the other is silent);
    newly broken when head violates any property (or raises) that base does not. A
    healthy path or a fuzz trace has no property of its own: any violation counts."""
    result = {"fixed": [], "still": [], "new": [], "reaction": [], "both_hold": 0, "unpaired": 0}
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
    fuzz = {
        "traces": 0,
        "fixed": [],
        "new": [],
        "still": [],
        "reaction": [],
        "both_hold": 0,
        "base_diverged": 0,
        "head_diverged": 0,
    }
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
    return result


def _classify(result: dict, item: dict, b: dict, h: dict, prop: str | None) -> None:
    bv, hv = violated(b), violated(h)
    b_has = (prop in bv) if prop else bool(bv)
    h_has = (prop in hv) if prop else bool(hv)
    fresh = sorted(hv - bv)
    if b_has and not h_has:
        result["fixed"].append(item)
    elif b_has and h_has:
        result["still"].append(item)
        if b["reaction"] != h["reaction"] and {b["reaction"], h["reaction"]} <= {"crash", "silent"}:
            result["reaction"].append(item)
    if fresh:
        result["new"].append({**item, "newly": fresh})
    if not b_has and not h_has and not fresh:
        result["both_hold"] += 1


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


def table(rows: list[list[str]]) -> list[str]:
    def cell(x):
        return str(x).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return out + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows[1:]]


def summary_md(
    base: dict, head: dict, cmp: dict, cites: dict, seconds: float, fuzz_n: int, limit_rows: int = 60
) -> str:
    bt, ht = base["tree"], head["tree"]
    broken = len(cmp["new"]) + len(cmp["fuzz"]["new"])
    lines = [
        f"## vLLM review: {bt['title']} → {ht['title']}",
        "",
        f"base: {bt['described']}  ",
        f"head: {ht['described']}",
        "",
        (
            "**Head breaks nothing base did not.**"
            if not broken
            else f"**Head breaks {broken} thing(s) base did not** (see *Newly broken*)."
        ),
        "",
        "| | generated cases (arms) | fuzz traces |",
        "|---|---|---|",
        f"| fixed (base violates the case's property, head does not) | {len(cmp['fixed'])} | "
        f"{len(cmp['fuzz']['fixed'])} |",
        f"| still broken | {len(cmp['still'])} | {len(cmp['fuzz']['still'])} |",
        f"| ... of which the reaction changed (crash ↔ silent) | {len(cmp['reaction'])} | "
        f"{len(cmp['fuzz']['reaction'])} |",
        f"| newly broken (head violates a property, or raises, where base does not) | {len(cmp['new'])} | "
        f"{len(cmp['fuzz']['new'])} |",
        f"| holds on both | {cmp['both_hold']} | {cmp['fuzz']['both_hold']} |",
        "",
        "A case arm is a generated case under the tree's profile with the clamp off or on. What is "
        "compared is what vLLM does (the assert that fires, the properties its own state violates), "
        "not the model's prediction; *where head differs from the model* is the first step at which "
        "head's state leaves the model of its profile.",
        "",
    ]

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

    section("Newly broken", cmp["new"])
    section("Fixed", cmp["fixed"], "The case's own property holds on head; what head still violates is listed.")
    section("Changed reaction", cmp["reaction"], "Violated on both, but vLLM reacts differently.")
    section("Still broken", [i for i in cmp["still"] if i not in cmp["reaction"]])
    f = cmp["fuzz"]
    lines += [
        f"### Fuzz ({f['traces']} traces, {fuzz_n} per preset, drawn from head's model)",
        "",
        f"Traces where the tree's state left its model: base {f['base_diverged']}, head {f['head_diverged']}.",
        "",
    ]
    for title, items in (("newly broken", f["new"]), ("fixed", f["fixed"]), ("changed reaction", f["reaction"])):
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
    lines += [f"_`make review` in {seconds:.0f} s. Exit status: 0 head breaks nothing base did not, 1 it does._", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.review", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="0.32.0, 0.33.0 or the path of a vLLM tree")
    ap.add_argument("--head", required=True, help="0.32.0, 0.33.0 or the path of a vLLM tree")
    ap.add_argument("--fuzz", type=int, default=3, help="random traces per fuzz preset (0: none)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("build/review"))
    args = ap.parse_args(argv)
    from targets.vllm_tree import TreeError, resolve

    started = time.monotonic()
    try:
        if args.fuzz < 0:
            raise TreeError(f"--fuzz must be a whole number >= 0, got {args.fuzz}")
        trees = {side: resolve(getattr(args, side)) for side in ("base", "head")}
    except TreeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    log(
        f"review: base {trees['base'].title} (profile {trees['base'].profile}), "
        f"head {trees['head'].title} (profile {trees['head'].profile})"
    )
    traces = fuzz_traces(trees["head"].profile, args.fuzz, args.seed) if args.fuzz else []
    traces_file = args.out / "fuzz-traces.json"
    traces_file.write_text(json.dumps(traces) + "\n")
    log(f"review: {len(traces)} fuzz trace(s) drawn; observing both trees (two processes, one tree each)")
    try:
        base, head = observe_both(args.base, args.head, traces_file, args.out)
    except TreeFailure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    except ObserverCrash as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    log("review: re-anchoring the citations in both trees")
    cites = compare_cites(
        cite_view(Path(base["tree"]["root"]), release_of(base["tree"])),
        cite_view(Path(head["tree"]["root"]), release_of(head["tree"])),
    )
    cmp = compare(base, head)
    seconds = time.monotonic() - started
    text = summary_md(base, head, cmp, cites, seconds, args.fuzz)
    rows = 60
    while len(text) > COMMENT_LIMIT and rows > 5:
        rows //= 2
        text = summary_md(base, head, cmp, cites, seconds, args.fuzz, rows)
    (args.out / "summary.md").write_text(text)
    (args.out / "summary.json").write_text(
        json.dumps({"base": base["tree"], "head": head["tree"], "compare": cmp, "citations": cites}, indent=1) + "\n"
    )
    print(text)
    log(f"review: wrote {args.out}/summary.md ({len(text)} characters) and summary.json in {seconds:.0f} s")
    return 1 if cmp["new"] or cmp["fuzz"]["new"] else 0


if __name__ == "__main__":
    sys.exit(main())

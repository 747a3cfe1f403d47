"""Re-anchor every vLLM citation of spec/citations.toml in a tree: the first thing to run on a new release.

Prints, per citation, ok / moved (old line -> new line) / changed (with the differing
lines) / vanished, then totals. Without --release the release is the one the tree's
vllm/_version.py names, when it is a plain X.Y.Z; otherwise the tree counts as newer than
every recorded release. A tree older than every recorded release is compared with the
oldest recorded lines; a citation first recorded later (a mechanism introduced then) is
listed as not compared. With --write (and --release) the lines found for ok and moved
citations are recorded for that release; changed and vanished ones are left for a person
to decide (a new text_X_Y_Z, or gone = "X.Y.Z"). --write records a modelled release's lines
only from a tree that declares that release (a release being added: --new-release), so a
typo or the wrong tree cannot overwrite correct lines.

With --plugin NAME the citations of that platform plugin's pinned code are re-anchored
instead, in --tree (default: its fetched tree, .plugin_trees/, `vllm-contract fetch-plugin
NAME`): each is looked for at the line it records.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from vllm_contract.spec.errors import ExitStatus, UsageError
from vllm_contract.spec.heartbeat import Heartbeat, to_stderr

NAME = "cite-check"
HELP = "re-anchor every vLLM (or a plugin's) citation in a tree: what moved, changed, vanished"
STATUSES = {
    ExitStatus.OK: "every citation compared is at its recorded line",
    ExitStatus.FINDING: "some moved, changed or vanished",
    ExitStatus.BAD_INPUT: "bad input (no vllm/ folder, a malformed --release; with --write: a release that is not "
    "modelled, or a tree that declares another version)",
    ExitStatus.COULD_NOT_RUN: "no citation could be compared with this tree",
    ExitStatus.TREE: "the plugin's pinned code is not here (fetch it, or pass --tree)",
}
ORDER = {"changed": 0, "vanished": 1, "moved": 2, "ok": 3}


def add_arguments(parser) -> None:
    from vllm_contract.spec import citations as C

    parser.add_argument("--vllm", type=Path, help="the folder holding vllm/ (site-packages for an install)")
    parser.add_argument("--plugin", help="a platform plugin (spec/plugin_runners/): re-anchor its citations instead")
    parser.add_argument("--tree", type=Path, help="with --plugin: the plugin's code (default: its fetched tree)")
    parser.add_argument("--release", help="the release the tree is (X.Y.Z); default: from vllm/_version.py")
    parser.add_argument("--write", action="store_true", help="record the found lines for --release in citations.toml")
    parser.add_argument(
        "--new-release",
        action="store_true",
        help="with --write: --release is a release being added, not yet modelled (docs/adding-a-release.md)",
    )
    parser.add_argument("--all", action="store_true", help="list ok citations one per line too")
    parser.add_argument("--toml", type=Path, default=C.TOML_PATH, help=argparse.SUPPRESS)


def run(args) -> int:
    from vllm_contract.spec import citations as C
    from vllm_contract.spec.cite_check import write_lines

    if args.plugin:
        return run_plugin(args)
    if args.vllm is None:
        raise UsageError("pass --vllm <folder holding vllm/>, or --plugin NAME for a plugin's citations")
    if not (args.vllm / "vllm").is_dir():
        raise UsageError(f"{args.vllm} holds no vllm/ folder (pass the folder above vllm/, e.g. site-packages)")
    if args.release and not C.RELEASE_RE.match(args.release):
        raise UsageError(f"--release {args.release!r} is not X.Y.Z")
    if args.write and not args.release:
        raise UsageError("--write needs --release X.Y.Z (the release whose lines are recorded)")
    if args.write:
        check_write(args.vllm, args.release, args.new_release)
    cits = C.vllm_only(C.load(args.toml))
    release, said = args.release, C.tree_version(args.vllm)
    if release is None and said and C.RELEASE_RE.match(said):
        release = said
    recorded = C.releases(cits)
    if release is None:
        where = f"a tree after {recorded[-1]} (it says {said or 'no version'})"
    elif C.release_key(release) < C.release_key(recorded[0]):
        where = f"vLLM {release}, older than every recorded release (compared with the {recorded[0]} lines)"
    else:
        where = f"vLLM {release}"
    print(f"cite-check: {len(cits)} citations against {where} at {args.vllm}")

    started = time.monotonic()
    heartbeat = Heartbeat(lambda line: to_stderr(f"  ... {line}"), quiet_for=1.0)
    findings = C.anchor(args.vllm, release, cits, progress=heartbeat)
    table(findings, release, args.all)
    compared = {f.id for f in findings}
    skipped = [c for c in cits.values() if c.id not in compared]

    counts = {s: sum(f.status == s for f in findings) for s in ORDER}
    totals = ", ".join(f"{n} {s}" for s, n in counts.items())
    print(f"\ncite-check: {len(findings)} checked: {totals} ({time.monotonic() - started:.1f} s)")
    if skipped:
        print(f"cite-check: {len(skipped)} not compared: " + not_compared(skipped, release))
    if not findings:
        print(f"cite-check: no citation could be compared with {where}: nothing was checked", file=sys.stderr)
        return ExitStatus.COULD_NOT_RUN
    if args.write:
        found = {f.id: (f.found or f.line) for f in findings if f.status in ("ok", "moved")}
        changed = write_lines(args.toml, release, found)
        print(f"cite-check: recorded {changed} line(s) for {release} in {args.toml}")
    elif counts["moved"]:
        print(
            f"cite-check: to record the moved lines: vllm-contract cite-check --vllm {args.vllm} "
            f"--release {release or 'X.Y.Z'} --write"
        )
    if counts["changed"] or counts["vanished"]:
        print(
            "cite-check: for each changed or vanished citation, read the code: if the mechanism is the "
            'same, add its new text as text_X_Y_Z and the line; if it is gone, set gone = "X.Y.Z" and '
            "cite what replaced it under a new id"
        )
    return ExitStatus.OK if all(f.ok for f in findings) else ExitStatus.FINDING


def check_write(tree: Path, release: str, new: bool) -> None:
    """--write records lines for a modelled release (or, said with --new-release, one being
    added) from that release's own tree: anything else is refused before the work."""
    from vllm_contract.spec import citations as C
    from vllm_contract.spec.profiles import RELEASE_NAMES

    if new and release in RELEASE_NAMES:
        raise UsageError(f"--new-release: {release} is already modelled; drop --new-release")
    if not new and release not in RELEASE_NAMES:
        raise UsageError(
            f"--release {release} is not a modelled release ({', '.join(RELEASE_NAMES)}): --write records lines "
            "for one of them; check the number, or, for a release being added (docs/adding-a-release.md), add "
            "--new-release"
        )
    declared = C.tree_version(tree)
    if declared is None or declared.split("+")[0] != release:
        raise UsageError(
            f"{tree} declares vLLM {declared or 'no version (no vllm/_version.py)'}, not {release}: --write records "
            f"a release's lines from its own tree (`make vllm-{release}` fetches it to .vllm_trees/{release}); "
            "give that tree, or the --release it declares"
        )


def run_plugin(args) -> int:
    """--plugin: every citation of the plugin's pinned code, at its recorded line in --tree."""
    from vllm_contract.spec import citations as C
    from vllm_contract.spec.errors import TreeError
    from vllm_contract.targets.plugin_fetch import source, tree

    src = source(args.plugin)
    if args.write or args.vllm or args.release:
        raise UsageError("--plugin re-anchors the pinned code's lines: --vllm, --release and --write do not apply")
    root = args.tree
    if root is None:
        root, why = tree(args.plugin)
        if root is None:
            raise TreeError(why)
    if not root.is_dir():
        raise UsageError(f"--tree {root} is not a folder")
    cits = C.of_plugin(C.load(args.toml), args.plugin)
    print(f"cite-check: {len(cits)} citations of {src.label} at {root}")
    started = time.monotonic()
    findings = C.anchor_plugin(root, args.plugin, cits)
    table(findings, "pinned", args.all)
    counts = {s: sum(f.status == s for f in findings) for s in ORDER}
    totals = ", ".join(f"{n} {s}" for s, n in counts.items())
    print(f"\ncite-check: {len(findings)} checked: {totals} ({time.monotonic() - started:.1f} s)")
    if not findings:
        print(f"cite-check: {args.plugin} has no citation: nothing was checked", file=sys.stderr)
        return ExitStatus.COULD_NOT_RUN
    if counts["moved"] or counts["changed"] or counts["vanished"]:
        print(
            f"cite-check: {src.label} is the pinned code: a citation that does not hold there was recorded "
            "wrong; against another version, read the code and re-pin (spec/plugin_runners/, the line keys)"
        )
    return ExitStatus.OK if all(f.ok for f in findings) else ExitStatus.FINDING


def not_compared(skipped: list, release: str | None) -> str:
    """Why citations were not compared, grouped: introduced after the tree, or gone before it."""
    from collections import Counter

    from vllm_contract.spec import citations as C

    why: Counter = Counter()
    for c in skipped:
        if c.gone and (release is None or C.release_key(release) >= C.release_key(c.gone)):
            why[f"gone since {c.gone}"] += 1
        else:
            why[f"introduced in {c.introduced()}"] += 1
    return ", ".join(f"{n} {reason}" for reason, n in sorted(why.items()))


def table(findings: list, release: str | None, show_ok: bool) -> None:
    from vllm_contract.spec import citations as C

    rows = sorted(findings, key=lambda f: (ORDER[f.status], f.file, f.line))
    width = max((len(f.id) for f in rows), default=10)
    # a file the tree no longer has: one line for all its citations (the mechanism's file is gone)
    gone_files: dict[str, list[str]] = {}
    for f in rows:
        if f.status == "vanished" and f.detail == C.FILE_GONE:
            gone_files.setdefault(f.file, []).append(f.id)
    ok = 0
    for f in rows:
        if f.ok and not show_ok:
            ok += 1
            continue
        if f.status == "vanished" and f.detail == C.FILE_GONE:
            ids = gone_files.pop(f.file, None)  # said once, at the file's first citation
            if ids:
                shown = ", ".join(ids[:6]) + (f" and {len(ids) - 6} more" if len(ids) > 6 else "")
                print(f"  vanished vllm/{f.file} is gone from the tree: {len(ids)} citation(s) ({shown})")
            continue
        loc = f"{Path(f.file).name}:{f.line}"
        if f.status == "moved":
            loc += f" -> {f.found}"
        elif f.status == "changed":
            loc += f" ~ {f.found}"
        base = "" if f.release == release else f" [from {f.release}]"
        more = f"  {f.detail}" if f.detail else ""
        print(f"  {f.status:<8} {f.id:<{width}}  {loc}{base}{more}")
        for d in f.diff:
            print(f"  {'':<8} {'':<{width}}    {d.strip() if d.startswith('...') else d[0] + ' ' + d[1:].strip()}")
    if ok:
        print(f"  ok       {ok} citation(s) at their recorded line (--all lists them)")

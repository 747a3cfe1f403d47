"""`make generate` / `make check-generated`: counterexamples and witnesses as pytest suites.

    python -m codegen.generate [--from build/prove] [--trace FILE.itf.json [--config NAME]] [--check]

Reads the ITF traces `make prove` wrote and writes one module per counterexample class
and per witness under generated_tests/cases/<profile>/. Generation happens in a staging
folder that is swapped in whole, so a crash, Ctrl-C or SIGTERM never leaves a
half-written suite (staging folders of a killed run are removed at the next start).
--check writes nothing: it regenerates in a temporary folder and fails, with a summary
of the differences, when the committed suites are stale.

A partial run (`make prove CONFIGS=v1`) replaces only the cases of the configurations
it ran, as listed in its summary.json; the committed cases of every other configuration
are kept as they are. Where that cannot be told (no summary.json, one written before
it listed its configurations, a committed module whose configuration is unclear) the
generator refuses, with one line, instead of guessing.

User traces. A trace of your own (written by hand, by Quint or Apalache with --mbt, or
edited from a counterexample) becomes a case with

    python -m codegen.generate --trace my-case.itf.json [--config NAME]

It must be ITF JSON (https://apalache-mc.org/docs/adr/015adr-trace.html) using the
spec's action and variable names: every state has `mbt::actionTaken` ("init" first,
then an event of spec/catalog.py) and `mbt::nondetPicks` (the event's arguments; the
first state's are the init picks, e.g. {"prompt_len": [16]}). `#meta` must say what it
shows: `"violated": "PROPERTY"` (a counterexample: the property must be violated at
its last step) or `"kind": "witness"` (a healthy path: a request must complete); a
trace that says neither is refused, never taken as a witness. Its configuration is
`#meta.config` (a record as the prover writes it) or --config NAME from spec/matrix.py.
The states may record the spec's variables; they are compared with the replay and
the first difference is reported (the trace is refused). The picks alone are enough.

The trace is copied into generated_tests/traces/ (commit it with the case) and its
module is generated_tests/cases/<profile>/test_user__<file name>.py: named after the
file, so a user trace for an existing configuration never collides with the generated
cases. Every run, --check included, regenerates every trace in generated_tests/traces/,
so a user's case lives beside the generated ones: `make generate` keeps it, and
`make check-generated` neither calls it extra nor misses it. To drop it, delete its
trace there and run `make generate`.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from codegen.cases import USER_PREFIX, CaseError, CaseSource, build, user_case_name
from codegen.render import environment, render
from spec.config import SpecError

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "generated_tests" / "cases"
USER_TRACES = ROOT / "generated_tests" / "traces"
INDEX_ROW = re.compile(r"^\| `([^`]+)` \| (\w+) \| (.*) \|$")


@dataclass
class Plan:
    """What a run regenerates: the cases, and the configurations whose committed cases
    they replace (None: all of them, a whole-matrix run)."""

    sources: list[CaseSource]
    configs: set[str] | None = None
    kept: dict[str, str] = field(default_factory=dict)  # committed files kept verbatim (rel -> text)
    kept_rows: dict[str, str] = field(default_factory=dict)  # their index rows (rel -> row)


# ------------------------------------------------------------------ reading


def _shown(path: Path) -> str:
    """A path as modules print it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def read_summary(prove_dir: Path) -> dict:
    """The prover's summary.json, which must say which configurations were run."""
    path = prove_dir / "summary.json"
    if not path.is_file():
        raise SpecError(
            f"{path} is missing: cannot tell which configurations the traces under "
            f"{prove_dir} are from; run `make prove` first"
        )
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}: not readable JSON ({exc}); run `make prove` again") from None
    if not isinstance(summary, dict):
        summary = {}
    configs, complete = summary.get("configs"), summary.get("complete")
    if not isinstance(configs, list) or not isinstance(complete, bool):
        raise SpecError(
            f"{path} does not list the configurations it ran (written by an older model.prove): run `make prove` again"
        )
    return summary


def user_sources(extra: list[Path], config: str | None, user_dir: Path) -> list[CaseSource]:
    """The committed user traces plus --trace files (already copied into user_dir)."""
    paths = sorted(user_dir.glob("*.itf.json")) if user_dir.is_dir() else []
    resolved = {p.resolve() for p in paths}
    paths += [p for p in extra if p.resolve() not in resolved]
    sources = []
    for path in paths:
        # a trace in user_dir carries its configuration (adopt wrote it); others may need --config
        inside = path.resolve().parent == user_dir.resolve()
        sources.append(build(path, None if inside else config, user=True))
        sources[-1].trace_path = _shown(path)
    return sources


def collect(prove_dir: Path, extra: list[str], config: str | None, user_dir: Path | None = None) -> list[CaseSource]:
    """Every case to write: the prover's traces and the user traces."""
    return plan(prove_dir, [Path(p) for p in extra], config, user_dir).sources


def plan(
    prove_dir: Path, extra: list[Path], config: str | None, user_dir: Path | None = None, committed: Path | None = None
) -> Plan:
    """The cases to write and, with `committed`, the committed files a partial run keeps."""
    user_dir = USER_TRACES if user_dir is None else user_dir
    sources: list[CaseSource] = []
    run: set[str] | None = None
    if prove_dir.exists() or not extra:
        summary = read_summary(prove_dir)
        names = set(summary["configs"])
        run = None if summary["complete"] else names
        # any layout (traces/<config>/ or traces/<profile>/<config>/): each trace names its
        # configuration in #meta, and that must be one the summary lists
        for path in sorted((prove_dir / "traces").rglob("*.itf.json")):
            match = re.search(r"\.(\d+)\.itf\.json$", path.name)
            src = build(path, None, int(match.group(1)) if match else 0)
            if src.cfg.name not in names:
                raise CaseError(
                    f"{path} is a trace of {src.cfg.name!r}, which {prove_dir}/summary.json "
                    "does not list; run `make prove` again"
                )
            sources.append(src)
    else:
        run = set()  # --trace without prover results: every generated case stays as committed
    sources = same_trace_once(sources)
    sources += user_sources(extra, config, user_dir)
    out = Plan(sources, run)
    if committed is not None:
        out.kept, out.kept_rows = kept_files(committed, run)
    _unique(sources, out.kept)
    return out


def same_trace_once(sources: list[CaseSource]) -> list[CaseSource]:
    """A trace the prover found on several releases of one scenario becomes one case (the
    oldest release's): every case is replayed on every release's arms anyway, so a second
    module would say the same thing twice."""
    seen: set = set()
    out = []
    for src in sources:
        cfg = src.cfg.record()
        shape = tuple((k, str(v)) for k, v in sorted(cfg.items()) if k not in ("name", "profile"))
        key = (src.cfg.scenario, shape, src.case.kind, src.case.property, repr(src.case.init), repr(src.case.steps))
        if key in seen:
            continue
        seen.add(key)
        out.append(src)
    return out


def module_config(text: str) -> str | None:
    """The configuration a committed module was generated for: the `config` record of its
    `CASE = Case(...)` (None when it cannot be told)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for keyword in node.value.keywords:
                if keyword.arg == "config":
                    try:
                        record = ast.literal_eval(keyword.value)
                    except (ValueError, TypeError, SyntaxError, RecursionError):
                        return None
                    name = record.get("name") if isinstance(record, dict) else None
                    return name if isinstance(name, str) else None
    return None


def kept_files(committed: Path, run: set[str] | None) -> tuple[dict, dict]:
    """The committed files a partial run keeps: every module of a configuration it did
    not run (user modules are always regenerated), with its index row."""
    if run is None or not committed.is_dir():
        return {}, {}
    rows = {}
    index = committed / "README.md"
    if index.is_file():
        for line in index.read_text().splitlines():
            match = INDEX_ROW.match(line)
            if match:
                rows[match.group(1)] = line
    kept, kept_rows = {}, {}
    for path in sorted(committed.rglob("*")):
        rel = str(path.relative_to(committed))
        if not path.is_file() or "__pycache__" in path.parts or rel == "README.md":
            continue
        if path.name.startswith("test_") and path.suffix == ".py":
            if path.name.startswith(USER_PREFIX):
                continue
            name = module_config(path.read_text())
            if name is None:
                raise CaseError(
                    f"cannot tell which configuration generated_tests/cases/{rel} is from, so a "
                    "partial run cannot keep it; generate from the whole matrix (`make generate`)"
                )
            if name in run:
                continue
            if rel not in rows:
                raise CaseError(
                    f"generated_tests/cases/README.md has no row for {rel}; generate from the "
                    "whole matrix (`make generate`)"
                )
            kept_rows[rel] = rows[rel]
        kept[rel] = path.read_text()
    return kept, kept_rows


def _unique(sources: list[CaseSource], kept: dict) -> None:
    """Two cases may not share a module (pytest imports the suites with
    --import-mode=importlib, so equal file names in two profile folders are fine)."""
    seen: dict[str, str] = {}
    for rel in kept:
        if rel.endswith(".py"):
            seen["generated_tests/cases/" + rel] = f"the kept module generated_tests/cases/{rel}"
    for src in sources:
        if src.module in seen:
            raise CaseError(
                f"{src.trace_path} and {seen[src.module]} would both write {src.module}; rename one trace file"
            )
        seen[src.module] = src.trace_path


# ------------------------------------------------------------------ writing


def index_page(sources: list[CaseSource], kept_rows: dict | None = None) -> str:
    rows = dict(kept_rows or {})
    for src in sources:
        rel = src.module[len("generated_tests/cases/") :]
        rows[rel] = f"| `{rel}` | {src.case.kind} | {src.sentence} |"
    lines = [
        "# Generated suites (do not edit: `make generate` rewrites this folder)",
        "",
        "| module | kind | what it shows |",
        "|---|---|---|",
    ]
    lines += [rows[rel] for rel in sorted(rows, key=lambda rel: "generated_tests/cases/" + rel)]
    return "\n".join(lines) + "\n"


def write_all(sources: list[CaseSource], folder: Path, kept: dict | None = None, kept_rows: dict | None = None) -> None:
    env = environment()
    for rel, text in (kept or {}).items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for src in sources:
        target = folder / src.module[len("generated_tests/cases/") :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(src, env))
    (folder / "README.md").write_text(index_page(sources, kept_rows))


def _files(folder: Path) -> dict[str, str]:
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def check(sources: list[CaseSource], committed: Path = CASES, configs: set[str] | None = None) -> int:
    """0 when `committed` is what generating would write. With `configs` (a partial
    run), only those configurations' cases are compared; the others are kept as is."""
    kept, kept_rows = kept_files(committed, configs)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "cases"
        write_all(sources, fresh, kept, kept_rows)
        want, have = _files(fresh), _files(committed)
    scope = (
        ""
        if configs is None
        else (f" (a partial run: only {', '.join(sorted(configs)) or 'the user traces'} compared)")
    )
    added = sorted(set(want) - set(have))
    removed = sorted(set(have) - set(want))
    changed = sorted(k for k in set(want) & set(have) if want[k] != have[k])
    if not (added or removed or changed):
        print(f"generated suites are fresh ({len(want)} files){scope}")
        return 0
    print(f"generated suites are stale{scope}; run `make generate` and commit the result:")
    for name in added:
        print(f"  missing  generated_tests/cases/{name}")
    for name in removed:
        print(f"  extra    generated_tests/cases/{name}")
    for name in changed:
        diff = list(
            difflib.unified_diff(
                have[name].splitlines(), want[name].splitlines(), "committed", "regenerated", lineterm="", n=0
            )
        )
        print(f"  changed  generated_tests/cases/{name} ({sum(1 for d in diff if d[:1] in '+-') - 2} line(s)):")
        for line in diff[2:8]:
            print(f"           {line}")
    return 1


def adopt(
    paths: list[Path], config: str | None, user_dir: Path | None = None, created: list[Path] | None = None
) -> list[Path]:
    """Copy --trace files into the committed user-trace folder, with --config written
    into the copy's #meta so it regenerates on its own. All are validated first."""
    user_dir = USER_TRACES if user_dir is None else user_dir
    planned = []
    for path in paths:
        build(path, config, user=True)  # refuses a bad trace before anything is copied
        user_case_name(path)  # the file name must give a case name
        dest = user_dir / (path.name if path.name.endswith(".itf.json") else path.stem + ".itf.json")
        if config:
            from spec.matrix import by_name

            doc = json.loads(path.read_text())
            doc.setdefault("#meta", {})["config"] = by_name([config])[0].record()
            text = json.dumps(doc, indent=1) + "\n"
        else:
            text = path.read_text()
        same_file = dest.exists() and dest.resolve() == path.resolve()
        if dest.exists() and not same_file and dest.read_text() != text:
            raise CaseError(
                f"{_shown(dest)} already holds a different trace named {dest.name}: "
                "rename your file, or delete that one first"
            )
        if any(dest == other for other, _ in planned):
            raise CaseError(f"two --trace files would both be {_shown(dest)}: rename one")
        planned.append((dest, text))
    for dest, text in planned:
        if not dest.exists() or dest.read_text() != text:
            if created is not None and not dest.exists():
                created.append(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            print(f"copied the trace to {_shown(dest)} (commit it with its case)")
    return [dest for dest, _ in planned]


_STAGING = re.compile(r"\.cases-(staging|old)-(?:(\d+)-)?[a-z0-9_]+|\.cases-old")


def clean_stale(cases: Path | None = None) -> None:
    """Staging folders a killed run left beside the suites: removed when their process
    is gone; an old suite set aside mid-swap goes back if the suites are missing."""
    from model.prove import _pid_alive

    cases = CASES if cases is None else cases
    parent = cases.parent
    if not parent.is_dir():
        return
    for entry in sorted(parent.iterdir()):
        match = _STAGING.fullmatch(entry.name)
        if not match or entry.is_symlink() or not entry.is_dir():
            continue
        pid = match.group(2)
        if pid is not None and _pid_alive(int(pid)):
            continue
        try:
            if (match.group(1) == "old" or entry.name == ".cases-old") and not cases.exists():
                os.rename(entry, cases)
            else:
                shutil.rmtree(entry)
        except OSError:
            continue


def main(argv: list[str] | None = None) -> int:
    from model.prove import Terminated, UsageError, _Parser, import_matrix, interrupts, swap_in

    parser = _Parser(prog="python -m codegen.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="prove_dir", default="build/prove")
    parser.add_argument(
        "--trace",
        action="append",
        default=[],
        help="a user ITF trace to turn into a case (copied into generated_tests/traces/)",
    )
    parser.add_argument("--config", help="configuration of the --trace files (default: their #meta)")
    parser.add_argument("--check", action="store_true", help="fail if generated_tests/cases is stale")
    staging, created, done = None, [], False
    try:
        with interrupts():
            try:
                args = parser.parse_args(argv)
                if args.config and not args.trace:
                    raise UsageError("--config names the configuration of --trace files; give --trace FILE too")
                if args.check and args.trace:
                    raise UsageError(
                        "--check compares the committed suites: add the trace first "
                        "(python -m codegen.generate --trace FILE), then run --check"
                    )
                import_matrix()
                clean_stale()
                extra = adopt([Path(p) for p in args.trace], args.config, created=created) if args.trace else []
                work = plan(Path(args.prove_dir), extra, args.config, committed=CASES)
            except SpecError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            if args.check:
                return check(work.sources, CASES, work.configs)
            CASES.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".cases-staging-{os.getpid()}-", dir=CASES.parent))
            write_all(work.sources, staging, work.kept, work.kept_rows)
            swap_in(staging, CASES, f".cases-old-{os.getpid()}-")
            done = True
    except Terminated:
        print("terminated (SIGTERM): generated_tests/cases left as it was", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("interrupted: generated_tests/cases left as it was", file=sys.stderr)
        return 130
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        if not done:  # a trace copied for a run that did not happen is not left behind
            for path in created:
                path.unlink(missing_ok=True)
    kept = sum(1 for rel in work.kept if rel.endswith(".py"))
    note = "" if work.configs is None else f"; kept {kept} module(s) of configurations this run did not cover"
    print(f"wrote {len(work.sources)} case(s) to {_shown(CASES)}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

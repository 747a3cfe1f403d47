"""`make generate` / `make check-generated`: counterexamples and witnesses as pytest suites.

    python -m codegen.generate [--from build/prove] [--trace FILE.itf.json [--config NAME]] [--check]

Reads the ITF traces `make prove` wrote (and any trace given with --trace, e.g. from
Quint or Apalache, using the spec's variable and action names), and writes one module
per counterexample class and per witness under generated_tests/cases/<profile>/.
Generation happens in a staging folder that replaces generated_tests/cases only when
every module was written, so a crash never leaves a half-written suite. --check
writes nothing: it regenerates in a temporary folder and fails, with a summary of the
differences, when the committed suites are stale.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys
import tempfile
from pathlib import Path

from codegen.cases import CaseError, CaseSource, build
from codegen.render import environment, render
from spec.config import SpecError

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "generated_tests" / "cases"


def collect(prove_dir: Path, extra: list[str], config: str | None) -> list[CaseSource]:
    sources = []
    traces = sorted((prove_dir / "traces").glob("*/*.itf.json")) if prove_dir.exists() else []
    if not traces and not extra:
        raise SpecError(f"no traces under {prove_dir}/traces: run `make prove` first (or pass --trace FILE)")
    for path in traces:
        match = re.search(r"\.(\d+)\.itf\.json$", path.name)
        sources.append(build(path, None, int(match.group(1)) if match else 0))
    for path in extra:
        sources.append(build(Path(path), config))
    seen = {}
    for src in sources:
        if src.module in seen:
            raise CaseError(f"{src.trace_path} and {seen[src.module]} would both write {src.module}")
        seen[src.module] = src.trace_path
    return sources


def index_page(sources: list[CaseSource]) -> str:
    lines = ["# Generated suites (do not edit: `make generate` rewrites this folder)", "",
             "| module | kind | what it shows |", "|---|---|---|"]
    for src in sorted(sources, key=lambda s: s.module):
        rel = src.module[len("generated_tests/cases/"):]
        lines.append(f"| `{rel}` | {src.case.kind} | {src.sentence} |")
    return "\n".join(lines) + "\n"


def write_all(sources: list[CaseSource], folder: Path) -> None:
    env = environment()
    for src in sources:
        target = folder / src.module[len("generated_tests/cases/"):]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(src, env))
    (folder / "README.md").write_text(index_page(sources))


def _files(folder: Path) -> dict[str, str]:
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()
            and "__pycache__" not in p.parts}


def check(sources: list[CaseSource], committed: Path = CASES) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "cases"
        write_all(sources, fresh)
        want, have = _files(fresh), _files(committed)
    added = sorted(set(want) - set(have))
    removed = sorted(set(have) - set(want))
    changed = sorted(k for k in set(want) & set(have) if want[k] != have[k])
    if not (added or removed or changed):
        print(f"generated suites are fresh ({len(want)} files)")
        return 0
    print("generated suites are stale; run `make generate` and commit the result:")
    for name in added:
        print(f"  missing  generated_tests/cases/{name}")
    for name in removed:
        print(f"  extra    generated_tests/cases/{name}")
    for name in changed:
        diff = list(difflib.unified_diff(have[name].splitlines(), want[name].splitlines(),
                                         "committed", "regenerated", lineterm="", n=0))
        print(f"  changed  generated_tests/cases/{name} ({sum(1 for d in diff if d[:1] in '+-') - 2} line(s)):")
        for line in diff[2:8]:
            print(f"           {line}")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="prove_dir", default="build/prove")
    parser.add_argument("--trace", action="append", default=[], help="an extra ITF trace to turn into a case")
    parser.add_argument("--config", help="configuration of the --trace files (default: their #meta)")
    parser.add_argument("--check", action="store_true", help="fail if generated_tests/cases is stale")
    args = parser.parse_args(argv)
    try:
        sources = collect(Path(args.prove_dir), args.trace, args.config)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        return check(sources)
    CASES.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".cases-staging-", dir=CASES.parent))
    try:
        write_all(sources, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = CASES.with_name(".cases-old")
    if old.exists():
        shutil.rmtree(old)
    if CASES.exists():
        CASES.rename(old)
    staging.rename(CASES)
    shutil.rmtree(old, ignore_errors=True)
    print(f"wrote {len(sources)} case(s) to {CASES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

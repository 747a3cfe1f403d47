"""Counterexamples and witnesses as pytest suites (`vllm-contract generate`, `check-generated`).

Reads the ITF traces the prover wrote and plans one module per counterexample class and
per witness under generated_tests/cases/<profile>/; `write_all` writes them into a
folder (the command swaps it in whole), `check` compares them with the committed ones.

A partial run (`make prove CONFIGS=v1`) replaces only the cases of the configurations
it ran, as listed in its summary.json; the committed cases of every other configuration
are kept as they are. Where that cannot be told (no summary.json, one written before
it listed its configurations, a committed module whose configuration is unclear) the
generator refuses, with one line, instead of guessing.

User traces. A trace of your own (written by hand, by Quint or Apalache with --mbt, or
edited from a counterexample) becomes a case with

    vllm-contract generate --trace my-case.itf.json [--config NAME]

It must be ITF JSON (https://apalache-mc.org/docs/adr/015adr-trace.html) using the
spec's action and variable names: every state has `mbt::actionTaken` ("init" first,
then an event of spec/catalog.py) and `mbt::nondetPicks` (the event's arguments; the
first state's are the init picks, e.g. {"prompt_len": [16]}). `#meta` must say what it
shows: `"violated": "PROPERTY"` (a counterexample: the property must be violated at
its last step), `"kind": "witness"` (a healthy path: a request must complete) or
`"kind": "divergence"` (a trace a vLLM target differed from the model on, as `vllm-contract
fuzz` writes them: its case checks the target against the model after every step); a
trace that says none of these is refused, never taken as a witness. Its configuration is
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
import importlib.util
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from vllm_contract.codegen.cases import USER_PREFIX, CaseError, CaseSource, build, from_monitor, user_case_name
from vllm_contract.codegen.render import environment, render
from vllm_contract.model.results import load_summary
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.heartbeat import Heartbeat

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "generated_tests" / "cases"
USER_TRACES = ROOT / "generated_tests" / "traces"
BUILD_CHUNK = 40  # traces a worker builds per task (progress is said as tasks end)
INDEX_ROW = re.compile(r"^\| `([^`]+)` \| (\w+) \| (.*) \|$")


def generated_cases(folder: Path = CASES) -> list[tuple[Path, object]]:
    """(path, CASE) of every generated module under `folder` that holds a case, in path
    order, each loaded from its file: generated_tests is no package the installed command can
    import. A module that does not import is a CaseError that names it."""
    found = []
    for path in sorted(folder.rglob("test_*.py")):
        name = "_generated_" + re.sub(r"\W", "_", str(path.relative_to(folder).with_suffix("")))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise CaseError(f"{path}: does not import ({type(exc).__name__}: {exc}); run `make generate`") from None
        case = getattr(module, "CASE", None)
        if case is not None:
            found.append((path, case))
    return found


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
    """The prover's summary.json (model.results.load_summary: present, listing its
    configurations, from the sources here now), with every trace it names readable: a
    partial result never becomes a generation that deletes committed cases."""
    summary = load_summary(prove_dir)
    wanted = []
    for row in summary["rows"]:
        wanted += [rel for rel in [row.trace, *row.classes] if rel]
    for witness in (summary.get("witnesses") or {}).values():
        if isinstance(witness, dict) and witness.get("trace"):
            wanted.append(witness["trace"])
    for rel in wanted:
        path = prove_dir / rel
        try:
            with path.open("rb") as handle:
                handle.read(1)
        except OSError as exc:
            why = "is missing" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc.strerror})"
            raise CaseError(
                f"{prove_dir}/summary.json names {rel}, which {why}: the result is partial; "
                "run `make prove` again (nothing was generated or deleted)"
            ) from None
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
    prove_dir: Path,
    extra: list[Path],
    config: str | None,
    user_dir: Path | None = None,
    committed: Path | None = None,
    progress=None,
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
        paths = sorted((prove_dir / "traces").rglob("*.itf.json"))
        for path, src in zip(paths, _build_all(paths, progress)):
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


def _build_prover_traces(paths: list[Path]) -> list[CaseSource]:
    out = []
    for path in paths:
        match = re.search(r"\.(\d+)\.itf\.json$", path.name)
        try:
            out.append(build(path, None, int(match.group(1)) if match else 0))
        except SpecError as exc:  # the prover's own trace: a damaged or partial result
            raise CaseError(f"{exc}; the prover's result is damaged: run `make prove` again") from None
    return out


def _build_all(paths: list[Path], progress=None) -> list[CaseSource]:
    """Every prover trace as a case, in the order given, on one process per core (a case is
    the interpreter's replay and a prediction per arm: pure Python, no solver, so the
    result does not depend on how the traces are shared out)."""
    jobs = min(os.cpu_count() or 1, 8)
    if jobs < 2 or len(paths) < 2 * BUILD_CHUNK:
        return _build_prover_traces(paths)
    from vllm_contract.model.workers import run_isolated

    chunks = [paths[i : i + BUILD_CHUNK] for i in range(0, len(paths), BUILD_CHUNK)]
    done = [0]
    heartbeat = Heartbeat(progress) if progress is not None else None

    def ended(i: int, built: list) -> None:
        done[0] += len(built)
        if heartbeat is not None:
            heartbeat(lambda: f"generate: {done[0]}/{len(paths)} trace(s) replayed and predicted on every arm")

    built = run_isolated(
        _build_prover_traces, [(c,) for c in chunks], jobs, ["vllm_contract.codegen.cases"], ended, fresh=False
    )
    return [src for chunk in built for src in chunk]


def same_trace_once(sources: list[CaseSource]) -> list[CaseSource]:
    """A trace the prover found on several releases of one scenario becomes one case (the
    oldest release's): every case is replayed on every release's arms anyway, so a second
    module would say the same thing twice."""
    kept: dict = {}
    out = []
    for src in sources:
        cfg = src.cfg.record()
        shape = tuple((k, str(v)) for k, v in sorted(cfg.items()) if k not in ("name", "profile"))
        key = (src.cfg.scenario, shape, src.case.kind, src.case.property, repr(src.case.init), repr(src.case.steps))
        if key in kept:
            kept[key].also_found_on.append(src.cfg.profile)
            continue
        kept[key] = src
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
    into the copy's #meta so it regenerates on its own; a trace the contract monitor
    recorded is copied as the case it stands for, shrunk (codegen/cases.py from_monitor).
    All are validated first."""
    user_dir = USER_TRACES if user_dir is None else user_dir
    planned = []
    for path in paths:
        user_case_name(path)  # the file name must give a case name
        dest = user_dir / (path.name if path.name.endswith(".itf.json") else path.stem + ".itf.json")
        derived = from_monitor(path)
        if derived is not None:  # a monitor's recording: the case is its shrunk trace, copied instead
            text = json.dumps(derived, indent=1) + "\n"
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / dest.name).write_text(text)
                build(Path(tmp) / dest.name, None, user=True)  # refuses a bad trace before anything is copied
        elif config:
            build(path, config, user=True)
            from vllm_contract.spec.matrix import by_name

            doc = json.loads(path.read_text())
            doc.setdefault("#meta", {})["config"] = by_name([config])[0].record()
            text = json.dumps(doc, indent=1) + "\n"
        else:
            build(path, None, user=True)
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

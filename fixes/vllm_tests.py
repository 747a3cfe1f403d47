"""vLLM's own scheduler tests, from the release's sdist, on a patched and an unpatched tree.

    python -m vllm_contract.fixes.vllm_tests FIX RELEASE [--variant NAME] [-k EXPR]

1. The sdist (requirements/vllm-sdist-<release>.txt, hash-pinned) is downloaded once
   with pip into .vllm_trees/sdist/ (pip prepares its metadata: build dependencies from
   requirements/vllm-sdist-build.txt, outside the venv, VLLM_TARGET_DEVICE=empty).
2. The suites are unpacked into .vllm_trees/tests-<release>/: the scheduler's,
   tests/v1/core/{test_async_scheduler,test_scheduler}.py, for every fix, and for the V2
   fix also the V2 model runner's that run on a CPU (RUNNER_SUITES), with what they import
   (tests/v1/core/utils.py, test_prefix_caching.py, tests/v1/kv_connector/unit/utils.py,
   tests/v1/attention/utils.py, the package __init__ files), our conftest.py, pytest.ini
   and a stand-in config for facebook/opt-125m (fixes/vllm-tests/).
3. pytest runs them twice, in fresh processes: on the release as it is and on the
   release with the fix (fixes/trees.py), each loaded as the vLLM target loads it.
   Tests whose model config cannot be had offline, or that need Ray, are skipped with
   that reason; vLLM's own GPU-only skips stay as they are.

The scheduler suites run twice per tree: as the CPU platform configures vLLM (Triton
off, so the V1 model runner), and with Triton visible (interpreted), so that vLLM picks
its model runner as on a GPU (V2 unless a feature needs V1). Prints pass/fail/skip counts per tree and pass, what
fails on the release
too, and every test whose outcome differs; writes build/fixes/<release>+<fix>/
vllm-tests.json and the JUnit files. Exit 0 when the patched tree has no failure or
error that the release does not have, and none at all in test_async_scheduler.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from vllm_contract.adapter import child
from vllm_contract.fixes.trees import REPO, TREES_DIR, FixError

SDIST_DIR = TREES_DIR / "sdist"
BUILD_DEPS = SDIST_DIR / "build-deps"
OURS = REPO / "fixes" / "vllm-tests"
SUITES = ("tests/v1/core/test_async_scheduler.py", "tests/v1/core/test_scheduler.py")
# the V2 fix also changes the V2 model runner: vLLM's tests of it that run on a CPU
RUNNER_SUITES = (
    "tests/v1/worker/test_gpu_batch_ordering.py",
    "tests/v1/worker/test_gpu_batch_shard.py",
    "tests/v1/worker/test_gpu_model_runner_v2_eplb.py",
    "tests/v1/worker/test_gpu_pcp_manager.py",
    "tests/v1/worker/test_gpu_ubatch_slicing.py",
)
SUITES_OF = {"step-reservation-guard": SUITES, "v2-recompute-rollback": SUITES + RUNNER_SUITES}
NEEDED = (  # what the suites import, besides vllm
    "tests/__init__.py",
    "tests/v1/__init__.py",
    "tests/v1/core/__init__.py",
    "tests/v1/core/utils.py",
    "tests/v1/core/test_prefix_caching.py",
    "tests/v1/kv_connector/__init__.py",
    "tests/v1/kv_connector/unit/__init__.py",
    "tests/v1/kv_connector/unit/utils.py",
    "tests/v1/worker/__init__.py",
    "tests/v1/attention/utils.py",
)
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]


def fetch_sdist(release: str) -> Path:
    """The release's sdist, downloaded once (hash-checked by pip)."""
    SDIST_DIR.mkdir(parents=True, exist_ok=True)
    final = SDIST_DIR / f"vllm-{release}.tar.gz"
    if final.is_file():
        return final
    pins = REPO / "requirements" / f"vllm-sdist-{release}.txt"
    if not (BUILD_DEPS / ".done").is_file():
        shutil.rmtree(BUILD_DEPS, ignore_errors=True)
        subprocess.run(
            PIP
            + [
                "install",
                "--no-deps",
                "--require-hashes",
                "--only-binary=:all:",
                "--target",
                str(BUILD_DEPS),
                "-r",
                str(REPO / "requirements" / "vllm-sdist-build.txt"),
            ],
            check=True,
        )
        (BUILD_DEPS / ".done").write_text("")
    download = SDIST_DIR / f".download-{release}"
    shutil.rmtree(download, ignore_errors=True)
    # VLLM_TARGET_DEVICE=empty: metadata without a build; vLLM's setup.py then appends
    # "+empty" to the version, which pip refuses as inconsistent with the pin unless the
    # version is given (VLLM_VERSION_OVERRIDE, read by the same setup.py)
    env = {
        **os.environ,
        "PYTHONPATH": str(BUILD_DEPS),
        "VLLM_TARGET_DEVICE": "empty",
        "VLLM_VERSION_OVERRIDE": release,
    }
    subprocess.run(
        PIP
        + [
            "download",
            "--no-deps",
            "--no-binary=:all:",  # the source distribution (the pin's hash is the sdist's)
            "--no-build-isolation",
            "--require-hashes",
            "-d",
            str(download),
            "-r",
            str(pins),
        ],
        check=True,
        env=env,
    )
    got = sorted(download.glob(f"vllm-{release}.tar.gz"))
    if len(got) != 1:
        raise FixError(f"pip download left {[p.name for p in download.iterdir()]} in {download}")
    got[0].rename(final)
    shutil.rmtree(download, ignore_errors=True)
    return final


def unpack_tests(release: str) -> Path:
    """The suites and what they import, with our conftest, under .vllm_trees/tests-<release>/."""
    dest = TREES_DIR / f"tests-{release}"
    if not (dest / ".done").is_file():
        sdist = fetch_sdist(release)
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        prefix = f"vllm-{release}/"
        wanted = {prefix + name for name in (*SUITES, *NEEDED)}
        # the V2 runner's suites that the release has (0.29.0 has no test_gpu_ubatch_slicing.py;
        # the V2 fix, which runs them, is ported to releases that have all of them)
        optional = {prefix + name for name in RUNNER_SUITES}
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if m.name in wanted | optional and m.isfile()]
            missing = wanted - {m.name for m in members}
            if missing:
                raise FixError(f"{sdist.name} has no {', '.join(sorted(missing))}")
            for m in members:
                m.name = m.name[len(prefix) :]
                archive.extract(m, partial, filter="data")
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
        (dest / ".done").write_text(sdist.name + "\n")
    # ours, refreshed every run
    shutil.copyfile(OURS / "conftest.py", dest / "conftest.py")
    shutil.copyfile(OURS / "pytest.ini", dest / "pytest.ini")
    (dest / "facebook" / "opt-125m").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(OURS / "opt-125m-config.json", dest / "facebook" / "opt-125m" / "config.json")
    return dest


def run_suites(
    tests: Path,
    tree: str,
    release: str,
    junit: Path,
    suites=SUITES,
    select: str | None = None,
    extra_env: dict | None = None,
) -> dict:
    """pytest on the suites with the tree loaded; per-test outcomes from the JUnit file."""
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    # the real path: under a symlinked .vllm_trees pytest's rootdir and the working directory
    # would differ, and its test ids (the JUnit classnames) come out empty
    tests = Path(tests).resolve()
    env = child.environment(
        profile=release,
        clear=("VLLM_USE_V2_MODEL_RUNNER", "FIX_ENABLE_TRITON", "TRITON_INTERPRET"),
        FIX_REPO=str(REPO),
        FIX_VLLM_TREE=tree,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONDONTWRITEBYTECODE="1",
        **(extra_env or {}),
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rN",
        f"--junitxml={junit}",
        "--rootdir",
        str(tests),
        "-c",
        str(tests / "pytest.ini"),
        *suites,
    ] + (["-k", select] if select else [])
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=tests, env=env, capture_output=True, text=True)
    seconds = round(time.monotonic() - started, 1)
    if not junit.is_file():
        raise FixError(f"pytest wrote no results for {tree}:\n{(done.stdout + done.stderr)[-3000:]}")
    outcomes, reasons = parse_junit(junit)
    counts = Counter(outcomes.values())
    return {
        "tree": tree,
        "exit": done.returncode,
        "seconds": seconds,
        "counts": dict(counts),
        "env": dict(extra_env or {}),
        "suites": list(suites),
        "skip_reasons": dict(Counter(reasons.values())),
        "outcomes": outcomes,
        "tail": (done.stdout + done.stderr)[-1500:],
    }


def parse_junit(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """{test id: passed|failed|error|skipped}, {test id: skip reason}."""
    outcomes, reasons = {}, {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for element in case:
            if element.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[element.tag]
                if element.tag == "skipped":
                    reasons[name] = (element.get("message") or "").removeprefix("Skipped: ")
                break
        if outcomes.get(name) in ("failed", "error"):
            continue  # a teardown error after a failure: keep the first
        outcomes[name] = outcome
    return outcomes, reasons


def compare(unpatched: dict, patched: dict) -> list[str]:
    """Every test whose outcome differs between the two trees."""
    a, b = unpatched["outcomes"], patched["outcomes"]
    return [
        f"{name}: {a.get(name, 'absent')} -> {b.get(name, 'absent')}"
        for name in sorted(set(a) | set(b))
        if a.get(name) != b.get(name)
    ]


def line(label: str, run: dict) -> str:
    c = run["counts"]
    by_suite = Counter((name.split("::")[0].rsplit(".", 1)[-1], o) for name, o in run["outcomes"].items())
    suites = "; ".join(
        f"{s}: "
        + ", ".join(f"{by_suite[(s, o)]} {o}" for o in ("passed", "failed", "error", "skipped") if by_suite[(s, o)])
        for s in sorted({s for s, _ in by_suite})
    )
    return (
        f"{label:10} {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, {c.get('error', 0)} errors, "
        f"{c.get('skipped', 0)} skipped ({run['seconds']} s)   [{suites}]"
    )


# Each suite set runs as the CPU platform configures vLLM (vllm.triton_utils switches
# Triton off on a CPU, so vLLM takes the V1 model runner), and the scheduler suites once
# more with Triton visible (interpreted), so that vLLM picks its model runner as on a GPU:
# V2 unless a feature needs V1 (fixes/vllm-tests/conftest.py).
PASSES = (("", {}, None), ("-triton", {"FIX_ENABLE_TRITON": "1", "TRITON_INTERPRET": "1"}, SUITES))

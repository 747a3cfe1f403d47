"""Which generated cases make test leaves to make test-all (targets/pytest_plugin.py)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLD_CASE = "generated_tests/cases/vllm_0_29_0/test_v1__predicates_agree.py"
DEEP_CASE = "generated_tests/cases/vllm_0_29_0/test_v2_pp4__positions_agree.py"


def _collected(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "--target=reference,kernel", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def test_an_old_releases_case_is_make_test_alls_on_the_kernels_unless_named():
    """A 0.29.0 configuration's case runs on the reference target in make test and on the
    kernels only under --sweep; a pp 4 case runs on both; a case whose module the command
    line names (its Replay: line) runs on every target asked for."""
    folder = _collected("generated_tests/cases/vllm_0_29_0")
    assert f"{OLD_CASE}::test_v1__predicates_agree[reference]" in folder
    assert f"{OLD_CASE}::test_v1__predicates_agree[kernel]" not in folder
    assert f"{DEEP_CASE}::test_v2_pp4__positions_agree[kernel]" in folder
    assert f"{OLD_CASE}::test_v1__predicates_agree[kernel]" in _collected(
        "--sweep", "generated_tests/cases/vllm_0_29_0"
    )
    assert f"{OLD_CASE}::test_v1__predicates_agree[kernel]" in _collected(OLD_CASE)

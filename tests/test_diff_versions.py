"""`vllm-contract diff-versions A B`: one table over every release from A to B."""

from __future__ import annotations

import pytest
from vllm_contract.spec.profiles import RELEASES

from vllm_contract.cli import main as cli


@pytest.fixture(scope="module")
def proved(tmp_path_factory):
    """kvfail-stream on every release: violated through the missing rollback on
    0.29.0/0.30.0, a safe-frontier crash on 0.31.0/0.32.0, agreement not found on 0.33.0."""
    out = tmp_path_factory.mktemp("dv") / "prove"
    cache = tmp_path_factory.mktemp("dv-cache")
    assert cli(["prove", "kvfail-stream", "--out", str(out), "--cache", str(cache)]) == 0
    return out


def test_the_table_has_a_column_per_release_and_marks_where_a_verdict_changes(proved, capsys):
    first, last = RELEASES[0].release, RELEASES[-1].release
    assert cli(["diff-versions", first, last, "--from", str(proved)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("scenario"))
    assert header.split()[2:] == [p.release for p in RELEASES]
    row = next(line for line in out.splitlines() if line.startswith("kvfail-stream") and "counter-nonnegative" in line)
    cells = row.split("counter-nonnegative", 1)[1]
    assert cells.count("CRASH") == 2 and "*not checked" not in cells  # 0.29.0, 0.30.0
    agree = next(line for line in out.splitlines() if line.startswith("kvfail-stream") and "predicates-agree" in line)
    assert "*none found" in agree  # 0.33.0: where it changes, marked


def test_two_releases_give_two_columns_in_either_order(proved, capsys):
    assert cli(["diff-versions", "0.33.0", "0.32.0", "--from", str(proved)]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("scenario"))
    assert header.split()[2:] == ["0.32.0", "0.33.0"]

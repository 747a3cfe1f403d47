"""The prover's cache: a warm run equals a fresh one, a damaged entry is never trusted.

Each test names its own cache folder (the plugin gives every session an empty private
one otherwise, so no other test is answered from a cache it did not ask for).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_contract.model import cache as cache_module
from vllm_contract.model.cache import ProverCache
from vllm_contract.model.check import ConfigReport, check_config
from vllm_contract.model.results import without_timings
from vllm_contract.spec.matrix import by_name
from vllm_contract.spec.verdicts import UNKNOWN

from vllm_contract.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["v1-kvfail-leak@0.32.0", "v1-kvfail-leak@0.33.0"]  # the cheapest configurations


def result_of(out: Path) -> tuple[dict, dict]:
    summary = without_timings(json.loads((out / "summary.json").read_text()))
    traces = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*.itf.json")}
    return summary, traces


def prove(tmp_path: Path, name: str, *extra: str) -> Path:
    out = tmp_path / name
    assert cli(["prove", *SMALL, "--out", str(out), "--jobs", "1", "--cache", str(tmp_path / "cache"), *extra]) == 0
    return out


def test_a_warm_run_takes_everything_from_the_cache_and_equals_a_fresh_one(tmp_path, capsys):
    cold = prove(tmp_path, "cold")
    assert "taken from" not in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [f"{n}.json" for n in sorted(SMALL)]
    warm = prove(tmp_path, "warm")
    assert f"2 of 2 configuration(s) unchanged since they were proved: taken from {tmp_path / 'cache'}" in (
        capsys.readouterr().out
    )
    fresh = prove(tmp_path, "fresh", "--fresh")
    assert "taken from" not in capsys.readouterr().out
    # the random walks that race each search (model/probe.py Race) time the first
    # counterexample and change nothing else (each configuration in a fresh process)
    without_walks = prove(tmp_path, "without-walks", "--fresh", "--no-walks")
    cold_summary, cold_traces = result_of(cold)
    assert cold_traces, "the configurations have traces: the comparison is not empty"
    assert result_of(warm) == (cold_summary, cold_traces)
    assert result_of(fresh) == (cold_summary, cold_traces)
    assert result_of(without_walks) == (cold_summary, cold_traces)
    found_by = {
        name: {
            r["found_by"]
            for r in json.loads((tmp_path / name / "summary.json").read_text())["results"]
            if r["verdict"] == "violated"
        }
        for name in ("cold", "without-walks")
    }
    assert found_by["without-walks"] == {"bmc"} and found_by["cold"] <= {"walk", "bmc"}


@pytest.mark.parametrize(
    "damage",
    ["truncated", "digest", "not-json", "row-of-wrong-type"],
)
def test_a_damaged_entry_is_proved_again_never_trusted(tmp_path, capsys, damage):
    cold = prove(tmp_path, "cold")
    entry = tmp_path / "cache" / f"{SMALL[0]}.json"
    text = entry.read_text()
    data = json.loads(text)
    if damage == "truncated":
        entry.write_text(text[: len(text) // 2])
    elif damage == "digest":  # a verdict changed, the digest kept: a lie the digest catches
        data["report"]["rows"][0]["verdict"] = (
            "proved" if data["report"]["rows"][0]["verdict"] != "proved" else "violated"
        )
        entry.write_text(json.dumps(data))
    elif damage == "not-json":
        entry.write_bytes(b"\x00\xff garbage")
    else:  # consistent digest, but a row that is not a verdict row
        data["report"]["rows"][0]["depth"] = "deep"
        data["digest"] = cache_module._digest(data["report"])
        entry.write_text(json.dumps(data))
    capsys.readouterr()
    again = prove(tmp_path, "again")
    out = capsys.readouterr().out
    assert f"note: 1 damaged cache entr(ies) proved again: {SMALL[0]}" in out
    assert "1 of 2 configuration(s) unchanged" in out
    assert result_of(again) == result_of(cold)
    cfg = by_name([SMALL[0]])[0]
    assert ProverCache(tmp_path / "cache", 12, 60.0).get(cfg) is not None, "the entry was not replaced"


def test_a_folder_where_an_entry_goes_is_a_cache_miss_not_a_lost_result(tmp_path, capsys):
    """P08 of the 2026-12-05 probe: a folder in an entry's place made the write fail with
    IsADirectoryError after the solving, and the result was lost."""
    cold = prove(tmp_path, "cold")
    entry = tmp_path / "cache" / f"{SMALL[0]}.json"
    entry.unlink()
    entry.mkdir()
    (entry / "something").write_text("not ours")
    capsys.readouterr()
    again = prove(tmp_path, "again")  # exit 0: the verdicts are what they were
    out = capsys.readouterr().out
    assert f"note: the cache could not keep {SMALL[0]} (" in out and "Is a directory" in out
    assert "Traceback" not in out and result_of(again) == result_of(cold)
    assert (entry / "something").read_text() == "not ours"
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".writing-")]


def test_an_interrupted_write_leaves_no_entry(tmp_path, monkeypatch):
    cfg = by_name([SMALL[0]])[0]
    report = check_config(cfg)
    cache = ProverCache(tmp_path / "cache", 12, 60.0)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_module.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.put(cfg, report)
    assert list((tmp_path / "cache").iterdir()) == [], "a half-written entry was left"
    monkeypatch.undo()
    assert cache.put(cfg, report) and cache.get(cfg) is not None


def test_an_undecided_report_is_not_kept(tmp_path):
    cfg = by_name([SMALL[0]])[0]
    report = check_config(cfg)
    cache = ProverCache(tmp_path / "cache", 12, 60.0)
    from dataclasses import replace

    undecided = ConfigReport(
        rows=[replace(report.rows[0], verdict=UNKNOWN)] + report.rows[1:],
        documents=report.documents,
        witness=report.witness,
    )
    assert not cache.put(cfg, undecided)
    assert not cache.put(cfg, ConfigReport(report.rows, report.documents, {"reached": False, "unknown": True}))
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


def test_the_key_follows_exactly_the_inputs(tmp_path):
    cfg, other = by_name(SMALL)
    base = ProverCache(tmp_path, 12, 60.0, contract="c1")
    assert base.key(cfg) != base.key(other)
    assert base.key(cfg.with_(block_size=cfg.block_size * 2)) != base.key(cfg)  # its matrix entry
    assert base.key(cfg.with_(expect={**cfg.expect, "x": "proved"})) != base.key(cfg)
    assert ProverCache(tmp_path, 11, 60.0, contract="c1").key(cfg) != base.key(cfg)  # the options
    assert ProverCache(tmp_path, 12, 30.0, contract="c1").key(cfg) != base.key(cfg)
    assert ProverCache(tmp_path, 12, 60.0, contract="c2").key(cfg) != base.key(cfg)  # the sources
    # the same in any process: sets are keyed sorted, not in the hash seed's order
    code = (
        "from vllm_contract.model.cache import ProverCache; from vllm_contract.spec.matrix import by_name; "
        f"print(ProverCache('.', 12, 60.0, contract='c1').key(by_name([{SMALL[0]!r}])[0]))"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert keys == {base.key(cfg)}


def test_the_contract_digest_leaves_out_only_the_matrix(tmp_path):
    """An edit of spec/ or model/ outside the matrix changes every key; the matrix file
    alone does not (its entries are keyed one by one)."""
    import shutil

    from vllm_contract.model.results import sources_key

    for folder in ("spec", "model"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    before = sources_key(tmp_path, leave_out=(cache_module.MATRIX_FILE,))
    matrix = tmp_path / "spec" / "matrix.py"
    matrix.write_text(matrix.read_text() + "\n# an edit\n")
    assert sources_key(tmp_path, leave_out=(cache_module.MATRIX_FILE,)) == before
    lemmas = tmp_path / "spec" / "invariants.py"
    lemmas.write_text(lemmas.read_text() + "\n# an edit\n")
    assert sources_key(tmp_path, leave_out=(cache_module.MATRIX_FILE,)) != before

"""The one way a kept folder is built (adapter/cached.py): a fetched release, a fetched
plugin, a patched tree. Whole or absent: the marker is written last, a failed build
leaves neither the folder nor its partial, and other inputs build it again."""

from __future__ import annotations

import pytest
from vllm_contract.adapter import cached


def _fill(text: str, calls: list):
    def fill(partial):
        calls.append(partial.name)
        (partial / "sub").mkdir(parents=True)
        (partial / "sub" / "file.py").write_text(text)
        return {"input": text}

    return fill


def test_a_built_folder_is_whole_and_marked_last(tmp_path):
    calls: list = []
    folder = cached.build(tmp_path / "tree", "SOURCE", _fill("a", calls))
    assert calls == [".partial-tree"] and (folder / "sub" / "file.py").read_text() == "a"
    assert cached.record(folder, "SOURCE") == {"input": "a"} and cached.is_current(folder, "SOURCE", {"input": "a"})
    assert not cached.is_current(folder, "SOURCE", {"input": "b"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"]


def test_a_failed_build_leaves_nothing_and_keeps_the_old_folder(tmp_path):
    folder = cached.build(tmp_path / "tree", "SOURCE", _fill("a", []))

    def broken(partial):
        (partial / "half").mkdir(parents=True)
        raise KeyboardInterrupt  # an interrupt mid-build

    with pytest.raises(KeyboardInterrupt):
        cached.build(folder, "SOURCE", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"] and cached.record(folder, "SOURCE") == {"input": "a"}


def test_a_folder_without_a_readable_marker_is_not_built(tmp_path):
    (tmp_path / "tree").mkdir()
    assert cached.record(tmp_path / "tree", "SOURCE") is None
    (tmp_path / "tree" / "SOURCE").write_text("not json")
    assert cached.record(tmp_path / "tree", "SOURCE") is None
    (tmp_path / "tree" / "SOURCE").write_text("[1]")
    assert not cached.is_current(tmp_path / "tree", "SOURCE", {})

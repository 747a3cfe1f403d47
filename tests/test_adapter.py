"""The adapter's probes on every modelled release's tree, and a tree it does not know.

adapter/internals.py reads a tree's source for every internal the project reads. On each
of the six releases every internal is found and each variant takes the form written
below (the release notes' facts, re-read from the trees); a tree with one internal
renamed is refused before anything imports vLLM, one line naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vllm_contract.adapter import internals
from vllm_contract.spec import citations
from vllm_contract.spec.profiles import RELEASE_NAMES

from tests.test_citations import release_tree

REPO = Path(__file__).resolve().parent.parent

# the form each release has of each variant (None: the variant is read only with the runner)
EXPECTED = {
    "v1-runner": {"0.34.0": False, "*": True},
    "output-index": {"0.34.0": "position", "*": "req_id_to_index"},
    "resumed": {"0.34.0": "new-reqs", "*": "cached-resumed-ids"},
    "previous-step-ids": {"0.34.0": False, "*": True},
    "waiting-front": {"0.29.0": "skipped_waiting", "0.30.0": "skipped_waiting", "*": "kv_holding_waiting"},
    "v2-unsupported-list": {"0.34.0": False, "*": True},
    "cudagraph-query-lens": {"0.34.0": "decode_query_lens", "*": "decode_query_len"},
    "load-model-takes-model": {"0.29.0": False, "0.30.0": False, "0.31.0": False, "*": True},
    "block-tables-kernel-sizes": {"0.29.0": True, "0.30.0": True, "0.31.0": True, "*": False},
    "v2-ngram-speculator": {"0.29.0": False, "0.30.0": False, "0.31.0": False, "*": True},
}


def _tree(release: str) -> Path:
    root, why = release_tree(release)
    if root is None:
        pytest.fail(why)
    return root / "vllm"


@pytest.mark.parametrize("release", RELEASE_NAMES)
def test_every_release_has_every_internal_in_a_known_form(release):
    found = internals.probe(_tree(release))
    assert not found.missing, found.problems(f"vLLM {release}", release)
    for key, forms in EXPECTED.items():
        assert found.has(key) == forms.get(release, forms["*"]), (release, key)
    assert set(found.values) == {v.key for v in internals.VARIANTS}


def test_every_variant_is_in_the_table_and_every_form_cited():
    assert set(EXPECTED) == {v.key for v in internals.VARIANTS}
    known = set(citations.load())
    assert internals.cited() <= known, sorted(internals.cited() - known)


def _renamed_tree(tmp_path: Path, release: str, rel: str, old: str, new: str) -> Path:
    """A copy of a release's tree (links to its files) with one file's name for an internal replaced."""
    source = _tree(release)
    root = tmp_path / "renamed"
    for path in source.rglob("*.py"):
        target = root / "vllm" / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.relative_to(source).as_posix() == rel:
            text = path.read_text()
            assert old in text
            target.write_text(text.replace(old, new))
        else:
            target.symlink_to(path)
    return root


def test_a_renamed_internal_is_named_by_the_probe(tmp_path):
    root = _renamed_tree(tmp_path, "0.34.0", "v1/request.py", "num_output_placeholders", "num_placeholder_tokens")
    found = internals.probe(root / "vllm")
    lines = found.problems("vLLM from the copy", "0.34.0")
    assert len(lines) == 1, lines
    assert "has no Request.num_output_placeholders in vllm/v1/request.py" in lines[0]
    assert "nearest modelled release 0.34.0" in lines[0] and "adapter/internals.py" in lines[0]


@pytest.mark.vllm
def test_the_preflight_refuses_a_renamed_internal_within_60_s_one_line(tmp_path):
    """`vllm-contract preflight --vllm TREE` (what make test VLLM=TREE and review run first):
    exit 4, one line naming the internal, well within a minute, vLLM never imported."""
    root = _renamed_tree(tmp_path, "0.34.0", "v1/request.py", "num_output_placeholders", "num_placeholder_tokens")
    (root / "vllm" / "_version.py").unlink(missing_ok=True)
    (root / "vllm" / "_version.py").write_text('__version__ = version = "0.34.0"\n')
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "vllm_contract", "preflight", "--vllm", str(root)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "VLLM": ""},
    )
    took = time.monotonic() - started
    assert done.returncode == 4, done.stdout + done.stderr
    said = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(said) == 1 and "has no Request.num_output_placeholders" in said[0], said
    assert "Traceback" not in done.stderr
    assert took < 60, took


# ---- nothing else names a vLLM internal ------------------------------------------------------

# the files that may: vLLM's own code and tests in vLLM's idiom, and the guard file vLLM users
# put on sys.path (it cannot import this project); docs/adapter.md says why
MAY_NAME_VLLM = (
    "adapter/",
    "generated_tests/cases/",
    "codegen/export.py",  # writes tests for vLLM's own suite
    "fixes/vllm-tests/",  # the conftest of vLLM's own test tree
    "fixes/trees.py",  # edits of the patches' lines (the fix minus its key line)
    "tests/",  # tests build and read vLLM objects to check the adapter and the targets
)
# the model and the kernels never hold a vLLM object; they name vLLM's mechanisms and tensors as
# their own vocabulary (spec/vocabulary.py, the discard kernel's inputs): only an import counts
VOCABULARY_ONLY = ("spec/", "model/", "kernels/", "bench/kernels_gpu.py")


def internal_names() -> set[str]:
    """vLLM's distinctive member names the project reads that are not also the spec's own
    state variables (spec/vocabulary.py mirrors vLLM's counters by name)."""
    from vllm_contract.spec.vocabulary import DECLS

    names = {n.name for n in internals.NEEDED}
    for variant in internals.VARIANTS:
        names |= {f.name for f in variant.forms if f.name} | {f.param_of for f in variant.forms if f.param_of}
    names -= {d.name for d in DECLS}
    return {n for n in names if "_" in n.strip("_") and n != "__init__"}


def _code_only(text: str) -> str:
    """The source without its comments and string literals (docstrings cite vLLM freely)."""
    import io
    import tokenize

    kept = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.STRING) and not tok.type == getattr(
            tokenize, "FSTRING_MIDDLE", -1
        ):
            kept.append(tok.string)
    return " ".join(kept).replace(" . ", ".")


def naming_files(root: Path, skip: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """file -> the vLLM internals it names: an import of vllm, or a read of one of
    internal_names() on anything but the adapter's own accessors (files under skip are
    not read)."""
    import ast
    import re

    pattern = re.compile(r"(?<!objects)(?<!runners)\.(" + "|".join(sorted(internal_names())) + r")\b")
    found: dict[str, set[str]] = {}
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True)
    for rel in sorted(tracked.stdout.split()):  # the project's files, not fetched trees or the venv
        path = root / rel
        if rel.startswith(skip) or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        hits = set() if rel.startswith(VOCABULARY_ONLY) else set(pattern.findall(_code_only(text)))
        for node in ast.walk(ast.parse(text)):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if (module or "").split(".")[0] == "vllm" or any(n.split(".")[0] == "vllm" for n in names):
                hits.add("import vllm")
        if hits:
            found[rel] = hits
    return found


def test_only_the_adapter_names_vllm_internals():
    outside = {f: sorted(h) for f, h in naming_files(REPO, skip=MAY_NAME_VLLM).items()}
    assert not outside, outside

"""The prover's cache: one configuration's report, kept under a key of everything it was computed from.

A configuration's verdicts, traces and witness depend on the contract and the prover
(spec/ and model/ sources, the matrix file left out), on its own matrix entry, on the
lemmas it is proved with, on the solver's version and on the search options; the key is
a digest of exactly these. So `prove` after no change re-proves nothing, and after an
edit of one matrix entry re-proves that entry only; any other source edit changes
every key.

An entry is never trusted blindly: it carries its key and a digest of its report, and
one that is unreadable, truncated, of another key or whose digest does not match is
recomputed (and replaced). A report with an undecided verdict (unknown, a timeout) or an
undecided witness is not cached: it says something about the machine, not the contract.
Entries are written to a temporary file and renamed, so an interrupted run leaves no
half-written entry; an entry that cannot be written (a folder where it goes, a full disk)
is a cache miss next time, never a lost result (`unkept` says which and why). The folder
holds nothing else and is safe to delete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from vllm_contract.model.results import StaleSummary, VerdictRow, sources_key

FORMAT = 1
MATRIX_FILE = "spec/matrix.py"
DEFAULT_DIR = Path("build/prove-cache")
CACHE_ENV = "VLLM_CONTRACT_PROVE_CACHE"  # another default folder (the test plugin's private one)


def default_folder() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_DIR)


def canonical(value):
    """A JSON-ready form that is the same in every process (sets sorted: their order
    follows the hash seed)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (set, frozenset)):
        return sorted(canonical(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def _digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class ProverCache:
    """Reports by configuration under `folder`; `contract` is the digest of the sources
    every configuration shares (computed once per run). With read=False nothing is
    taken from the cache, and what is proved still refreshes it (`prove --fresh`)."""

    def __init__(self, folder: Path, max_depth: int, timeout_s: float, contract: str | None = None, read: bool = True):
        import z3
        from vllm_contract.spec.invariants import lemmas_for

        self.folder = Path(folder)
        self.read = read
        self.options = {"max_depth": max_depth, "timeout_s": timeout_s, "z3": z3.get_version_string()}
        self.contract = contract or sources_key(leave_out=(MATRIX_FILE,))
        self._lemmas_for = lemmas_for
        self.hits: list[str] = []
        self.recomputed: list[str] = []  # entries found damaged or of another key
        self.unkept: list[tuple[str, str]] = []  # (configuration, why) whose entry could not be written

    def key(self, cfg) -> str:
        lemmas = sorted(lemma.name for lemma in self._lemmas_for(cfg, list(cfg.expect)))
        return _digest(
            {
                "format": FORMAT,
                "contract": self.contract,
                "entry": canonical(cfg),
                "lemmas": lemmas,
                "options": self.options,
            }
        )[:32]

    def _path(self, cfg) -> Path:
        return self.folder / f"{cfg.name.replace('/', '_')}.json"

    def get(self, cfg):
        """The cached report of `cfg`, or None (absent, damaged, or of another key)."""
        from vllm_contract.model.check import ConfigReport

        path = self._path(cfg)
        if not self.read or not path.exists():
            return None
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            report = entry["report"]
            if entry.get("format") != FORMAT or entry.get("key") != self.key(cfg):
                return None  # computed from other inputs: simply stale
            if entry.get("digest") != _digest(report):
                raise ValueError("digest does not match")
            rows = [VerdictRow.from_json(r, str(path)) for r in report["rows"]]
            documents, witness = report["documents"], report["witness"]
            if not isinstance(documents, dict) or not isinstance(witness, dict):
                raise ValueError("documents or witness is not an object")
            if not all(isinstance(doc, str) for doc in documents.values()):
                raise ValueError("a document is not an ITF text")
        except (OSError, ValueError, KeyError, TypeError, RecursionError, StaleSummary):
            self.recomputed.append(cfg.name)
            return None
        self.hits.append(cfg.name)
        return ConfigReport(rows=rows, documents=documents, witness=witness)

    def put(self, cfg, report) -> bool:
        """Keep a report (atomically); False when it is not cacheable (something undecided)
        or cannot be written (said in `unkept`: the result itself is not lost)."""
        if any(not row.verdict.decided for row in report.rows):
            return False
        if not report.witness.get("reached") and report.witness.get("unknown"):
            return False
        body = {
            "rows": [row.to_json() for row in report.rows],
            "documents": report.documents,
            "witness": report.witness,
        }
        entry = {"format": FORMAT, "config": cfg.name, "key": self.key(cfg), "digest": _digest(body), "report": body}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".writing-", suffix=".tmp")
        except OSError as exc:
            self.unkept.append((cfg.name, exc.strerror or str(exc)))
            return False
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(entry, out, separators=(",", ":"))
            os.replace(temporary, self._path(cfg))
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            if isinstance(exc, OSError):
                self.unkept.append((cfg.name, f"{self._path(cfg)}: {exc.strerror or exc}"))
                return False
            raise
        return True

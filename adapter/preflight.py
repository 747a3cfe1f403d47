"""The preflight: a tree's source read for the internals the runs use, then the tree loaded
and a scheduler of every shape the generated cases need built and checked, before any
slow run begins (adapter/current.py loads; adapter/construct.py builds)."""

from __future__ import annotations

from vllm_contract.adapter import construct, current, internals, objects
from vllm_contract.adapter import tree as vllm_tree
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TreeError

# what the generated cases need a tree to build; `drafts` ones only with every shape asked
# for, V1 ones only on a tree that has the V1 runner
PREFLIGHT_SHAPES = (
    ("v1", Config("preflight-v1", runner="v1", requests=1), False),
    ("v2", Config("preflight-v2", runner="v2", requests=1), False),
    ("v2 pp=2", Config("preflight-v2-pp2", runner="v2", requests=1, pp=2), False),
    ("v1 with draft tokens", Config("preflight-v1-drafts", runner="v1", requests=1, spec_tokens=2), True),
    ("v2 with draft tokens", Config("preflight-v2-drafts", runner="v2", requests=1, spec_tokens=2), True),
)


def preflight(every_shape: bool = True, uses: tuple[str, ...] = (internals.SCHEDULER,)) -> str:
    """Check the tree's source for every internal the runs read (check_internals), then load
    it, build a scheduler of every shape the generated cases need and check the built objects
    have what the targets read; one line on success. Raises TreeError with one line per
    missing piece (cause and fix) otherwise. every_shape=False leaves out the shapes with
    draft tokens: a review counts the arms a tree cannot build as could-not-run instead."""
    found = current.check_internals(uses)
    current.load()
    t = current.tree()
    problems = []
    for label, cfg, drafts in PREFLIGHT_SHAPES:
        if (drafts and not every_shape) or (cfg.is_v1 and not found.has("v1-runner")):
            continue
        try:
            sched = construct.new_scheduler(cfg)
        except Exception as exc:
            problems.append(vllm_tree.import_failure(t, exc, f"cannot build a {label} scheduler"))
            continue
        if not drafts:
            request = construct.make_request(0, 1, cfg.block_size)
            problems += [f"{t.title} cannot be driven: {why}" for why in objects.missing_members(sched, request)]
    problems = list(dict.fromkeys(problems))  # the same piece missing in several shapes: once
    if problems:
        raise TreeError("\n".join(problems))
    current.check_coherence()
    return current.describe()

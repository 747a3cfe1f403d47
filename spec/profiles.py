"""Historical vLLM behaviours, each swapping exactly one mechanism back to its older form.

A historical profile is 0.32.0 with one change, so its counterexamples isolate the
trigger that change fixed. The sources are third-party snippets and issue text, not
tagged releases (../shared/docs/vllm-contract-0.32.md §5.4).
"""

from __future__ import annotations

from spec.config import Config

CURRENT = "vllm-0.32.0"
H1 = "h1-preempt-keeps-placeholders"
H2 = "h2-reset-discard-flag"
H3 = "h3-reset-discard-counter"
H4 = "h4-stream-no-rollback"


def preempt_marks_stale(cfg: Config) -> bool:
    """0.32.0 _preempt_request zeroes placeholders and marks in-flight output stale
    (sched:1603-1607). H1 resets only computed tokens and drafts."""
    return cfg.profile != H1


def reset_marks_stale(cfg: Config) -> bool:
    """0.32.0 reset_prefix_cache preempts with drop_stale_output=True (sched:2858-2860).
    H2/H3 preempted the old way, then zeroed placeholders and armed a frame discard."""
    return cfg.profile not in (H1, H2, H3)


def stop_rolls_back(cfg: Config) -> bool:
    """0.32.0 resumable stop resumes from the safe frontier and marks in-flight output
    drop-stale (sched:2470-2478, #58259). H4 kept all of it."""
    return cfg.profile != H4

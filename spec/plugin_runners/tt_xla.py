"""tt-xla (Tenstorrent): outside the reservation contract, recorded with the lines that say why.

tt-xla #5830: a row with no scheduled tokens gets token 0 appended. Read at 139528dd,
the last commit on main before the report (its line numbers are of another tree; the
lines it quotes are here): under data parallelism the runner keeps an unscheduled
request's row in its batch ([cite:ttxla-dp-keeps-unscheduled]), its keep test
`seq_len >= num_tokens` accepts that idle row ([cite:ttxla-idle-row-accepted]) and the
runner appends the token to its own state ([cite:ttxla-runner-appends]). But the plugin
replaces vLLM's scheduler with its own AscendScheduler ([cite:ttxla-scheduler-cls]), a
subclass of vLLM's synchronous Scheduler ([cite:ttxla-sync-scheduler]): no output
placeholder is ever reserved, so there is no reservation for the runner's decision to
break, and the stray token corrupts only the runner's own list. No runner record and no
scenario; cite-check re-anchors these lines, so a tt-xla that moves to vLLM's
AsyncScheduler shows up as changed citations.
"""

from __future__ import annotations

from vllm_contract.spec.plugin_runners import PluginSource

SOURCE = PluginSource(
    name="tt-xla",
    kind="git",
    version="0.1",
    vllm="vLLM 0.22.1 (integrations/vllm_plugin/requirements-vllm-plugin.txt at the commit)",
    repo="tenstorrent/tt-xla",
    commit="139528dde983544e17a0e350e346ffb226592741",
    note="the last commit on main before #5830 was filed (2026-07-29)",
)

RUNNERS: tuple = ()

OUTSIDE = (
    "its platform installs a synchronous Scheduler subclass (AscendScheduler), so no output placeholder is "
    "reserved: the idle row's token (#5830) corrupts the runner's own list, with no reservation to break"
)


def scenarios(m) -> tuple:
    """None: see OUTSIDE."""
    return ()

"""A profile's behaviour fields take only the values of their Literal types (spec/profiles.py):
a misspelt behaviour is refused with one line, never read as another branch."""

from dataclasses import replace

import pytest
from vllm_contract.spec import profiles
from vllm_contract.spec.errors import SpecError

BEHAVIOURS = {
    "reset": ("preempt-drop-stale", "discard-flag", "discard-counter"),
    "delivery_decrement": ("after-trim", "guarded-all-returned"),
    "cache_after_delivery": ("computed-less-placeholders", "computed-less-in-flight"),
    "session_keep": ("computed", "all-but-last"),
    "waiting_queues": ("kv-holding-first", "skipped-first"),
    "long_prefill": ("always", "two-or-more", "chunked-and-two-or-more"),
    "resumed_requests": ("runner-decides", "sent-as-new"),
}


def test_every_behaviour_field_is_checked_against_its_literal():
    assert profiles._CHOICES == BEHAVIOURS


def test_every_profile_takes_known_behaviours():
    for profile in profiles.PROFILES.values():
        for name, allowed in BEHAVIOURS.items():
            assert getattr(profile, name) in allowed, (profile.name, name)


def test_a_misspelt_behaviour_is_one_line_naming_field_value_and_choices():
    with pytest.raises(SpecError) as caught:
        replace(profiles.V0_32_0, reset="discard-flg")
    said = str(caught.value)
    assert "\n" not in said
    assert "reset" in said and "'discard-flg'" in said
    assert all(repr(value) in said for value in BEHAVIOURS["reset"])

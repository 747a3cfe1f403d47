"""With v2-live and vllm-0.32.0, stale-slot-read violates counter-nonnegative at step 3.
The property: vLLM's assert num_output_placeholders >= 0 after a live delivery never
fires.

Configuration v2-live-stale-slot: the live-length fix under stale slot reads
  runner v2-live; events abort; faults stale-slot-read;
  profile vllm-0.32.0; clamp off; 2 request(s), pp 1, 1 draft token(s) per step
Violated: counter-nonnegative (async:69-71), at step 3.

step  event               picks                           what changes
   0  init                prompt_len=[1, 2]
   1  schedule            budget=2 stale_read=[False, True]  r0: scheduled 1, reserved 1, runner returns 1
                                                          r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->1
                                                          r0: slot 0->1, g 0->1, pl 0->1, tl 0->2
                                                          r1: scheduled 1, reserved 0, runner returns 1
                                                          r1: status WAITING->RUNNING, c 0->1, F 0->1, X F->T, g 0->1
                                                          r1: tl 0->1
                                                          in flight 0->1
                                                          VIOLATES predicates-agree
   2  schedule            budget=2 accepted=[1, 0]        r0: scheduled 2, reserved 2, runner returns 2
                                                          r0: c 1->3, P 1->3, F 1->3, g 1->3, tl 2->4
                                                          in flight 1->2
   3  deliver                                             r0: T 1->2, P 3->2, F 3->2
                                                          r1: T 2->3, P 0->-1, F 1->0
                                                          in flight 2->1
                                                          VIOLATES counter-nonnegative, no-token-while-prefilling
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  clamp-off          runs 3 step(s); vLLM's assert for counter-nonnegative fires at step 3; violated at step(s) 3
  clamp-on           runs 3 step(s); the clamp drops 1 token(s); no violation

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_live_stale_slot__counter_nonnegative.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/v2-live-stale-slot/counter-nonnegative.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_live_stale_slot__counter_nonnegative',
    config={'name': 'v2-live-stale-slot', 'runner': 'v2-live', 'events': ['abort'], 'faults': ['stale-slot-read'], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 2, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1, 2]},
    steps=(
        ('schedule', {'budget': 2, 'accepted': [0, 0], 'stale_read': [False, True]}),
        ('schedule', {'budget': 2, 'accepted': [1, 0], 'stale_read': [False, False]}),
        ('deliver', {'stop': [0, 0]}),
    ),
    kind='violation',
    property='counter-nonnegative',
    arms={
        'clamp-off': ({'clamp': False}, Expect(runs=3, fired=('counter-nonnegative', 3), violations=(3,), dropped=0, completed=False)),
        'clamp-on': ({'clamp': True}, Expect(runs=3, fired=None, violations=(), dropped=1, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_live_stale_slot__counter_nonnegative.py',
)


def test_v2_live_stale_slot__counter_nonnegative(target):
    check_case(CASE, target)

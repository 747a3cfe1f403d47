"""With v2 and vllm-0.32.0, stale-slot-read violates counter-nonnegative at step 3. The
property: vLLM's assert num_output_placeholders >= 0 after a live delivery never
fires.

Configuration v2-stale-slot: V2 reading its slot as the previous occupant left it (CC / UVA)
  runner v2; events abort; faults stale-slot-read;
  profile vllm-0.32.0; clamp off; 2 request(s), pp 1, 1 draft token(s) per step
Violated: counter-nonnegative (async:69-71), at step 3.

step  event               picks                           what changes
   0  init                prompt_len=[3, 1]
   1  schedule            budget=1 stale_read=[True, False]  r0: scheduled 1, reserved 0, runner returns 1
                                                          r0: status WAITING->RUNNING, c 0->1, F 0->1, X F->T, slot 0->1
                                                          r0: g 0->1, tl 0->1
                                                          in flight 0->1
                                                          VIOLATES predicates-agree
   2  schedule            budget=1                        r0: scheduled 1, reserved 0, runner returns 1
                                                          r0: c 1->2, F 1->2, g 1->2, tl 1->2
                                                          in flight 1->2
                                                          VIOLATES predicates-agree
   3  deliver                                             r0: T 3->4, P 0->-1, F 2->1
                                                          in flight 2->1
                                                          VIOLATES counter-nonnegative, no-token-while-prefilling
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  clamp-off          runs 3 step(s); vLLM's assert for counter-nonnegative fires at step 3; violated at step(s) 3
  clamp-on           runs 3 step(s); the clamp drops 1 token(s); no violation

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_stale_slot__counter_nonnegative.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/v2-stale-slot/counter-nonnegative.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_stale_slot__counter_nonnegative',
    config={'name': 'v2-stale-slot', 'runner': 'v2', 'events': ['abort'], 'faults': ['stale-slot-read'], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 2, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [3, 1]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [True, False]}),
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [False, False]}),
        ('deliver', {'stop': [0, 0]}),
    ),
    kind='violation',
    property='counter-nonnegative',
    arms={
        'clamp-off': ({'clamp': False}, Expect(runs=3, fired=('counter-nonnegative', 3), violations=(3,), dropped=0, completed=False)),
        'clamp-on': ({'clamp': True}, Expect(runs=3, fired=None, violations=(), dropped=1, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_stale_slot__counter_nonnegative.py',
)


def test_v2_stale_slot__counter_nonnegative(target):
    check_case(CASE, target)

"""With v2-live and vllm-0.32.0, kv-load-failure violates counter-nonnegative at step 7.
The property: vLLM's assert num_output_placeholders >= 0 after a live delivery never
fires.

Configuration v2-live-kvfail: the live-length fix does not cover it: the GPU computed count is stale too
  runner v2-live; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: counter-nonnegative (async:69-71), at step 7.

step  event               picks                           what changes
   0  init                prompt_len=[16]
   1  schedule            budget=14                       r0: scheduled 14, reserved 0, runner returns 0
                                                          r0: status WAITING->RUNNING, c 0->14, F 0->14, X F->T, g 0->14
                                                          r0: pl 0->16, tl 0->16
                                                          in flight 0->1
   2  schedule            budget=1                        r0: scheduled 1, reserved 0, runner returns 0
                                                          r0: c 14->15, F 14->15, g 14->15
                                                          in flight 1->2
   3  deliver             kv_fail_req=0                   r0: c 15->0, F 15->1
                                                          in flight 2->1
   4  schedule            budget=1                        r0: scheduled 1, reserved 0, runner returns 1
                                                          r0: c 0->1, F 1->2, g 15->16, tl 16->17
                                                          in flight 1->2
                                                          VIOLATES predicates-agree
   5  deliver                                             r0: F 2->1
                                                          in flight 2->1
   6  schedule            budget=1                        r0: scheduled 1, reserved 0, runner returns 1
                                                          r0: c 1->2, F 1->2, g 16->17, tl 17->18
                                                          in flight 1->2
                                                          VIOLATES predicates-agree
   7  deliver                                             r0: T 16->17, P 0->-1, F 2->1
                                                          in flight 2->1
                                                          VIOLATES counter-nonnegative, no-token-while-prefilling
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  clamp-off          runs 7 step(s); vLLM's assert for counter-nonnegative fires at step 7; violated at step(s) 7
  clamp-on           runs 7 step(s); the clamp drops 1 token(s); no violation

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_live_kvfail__counter_nonnegative.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/v2-live-kvfail/counter-nonnegative.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_live_kvfail__counter_nonnegative',
    config={'name': 'v2-live-kvfail', 'runner': 'v2-live', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 14, 'accepted': [0]}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
    ),
    kind='violation',
    property='counter-nonnegative',
    arms={
        'clamp-off': ({'clamp': False}, Expect(runs=7, fired=('counter-nonnegative', 7), violations=(7,), dropped=0, completed=False)),
        'clamp-on': ({'clamp': True}, Expect(runs=7, fired=None, violations=(), dropped=1, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_live_kvfail__counter_nonnegative.py',
)


def test_v2_live_kvfail__counter_nonnegative(target):
    check_case(CASE, target)

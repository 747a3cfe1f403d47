"""With v2 and vllm-0.32.0, kv-load-failure violates no-token-while-prefilling at step 7.
The property: no live delivery appends a token for a step the scheduler classified as
a prefill chunk.

Configuration v2-kvfail: V2 0.32.0: a recompute after a KV-load failure re-prefills below prefill_len
  runner v2; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: no-token-while-prefilling (sched:2497-2499 (the contract's own comment)), at step 7.

step  event               picks                           what changes
   0  init                prompt_len=[16]
   1  schedule            budget=16                       r0: scheduled 16, reserved 1, runner returns 1
                                                          r0: status WAITING->RUNNING, c 0->16, P 0->1, F 0->16, drafts 0->1
                                                          r0: g 0->16, pl 0->16, tl 0->17
                                                          in flight 0->1
   2  schedule            budget=2 accepted=[1]           r0: scheduled 2, reserved 2, runner returns 2
                                                          r0: c 16->18, P 1->3, F 16->18, g 16->18, tl 17->19
                                                          in flight 1->2
   3  deliver             kv_fail_req=0                   r0: c 18->0, F 18->2
                                                          in flight 2->1
   4  schedule            budget=1                        r0: scheduled 1, reserved 0, runner returns 1
                                                          r0: c 0->1, F 2->3, X F->T, drafts 1->0, g 18->19
                                                          r0: tl 19->20
                                                          in flight 1->2
                                                          VIOLATES predicates-agree
   5  deliver                                             r0: T 16->18, P 3->1, F 3->1
                                                          in flight 2->1
   6  schedule            budget=1                        r0: scheduled 1, reserved 0, runner returns 1
                                                          r0: c 1->2, F 1->2, g 19->20, tl 20->21
                                                          in flight 1->2
                                                          VIOLATES predicates-agree
   7  deliver                                             r0: T 18->19, P 1->0, F 2->1
                                                          in flight 2->1
                                                          VIOLATES no-token-while-prefilling
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  clamp-off          runs 7 step(s); violated at step(s) 7
  clamp-on           runs 7 step(s); violated at step(s) 7

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_kvfail__no_token_while_prefilling.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/v2-kvfail/no-token-while-prefilling.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_kvfail__no_token_while_prefilling',
    config={'name': 'v2-kvfail', 'runner': 'v2', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 16, 'accepted': [0]}),
        ('schedule', {'budget': 2, 'accepted': [1]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
    ),
    kind='violation',
    property='no-token-while-prefilling',
    arms={
        'clamp-off': ({'clamp': False}, Expect(runs=7, fired=None, violations=(7,), dropped=0, completed=False)),
        'clamp-on': ({'clamp': True}, Expect(runs=7, fired=None, violations=(7,), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_kvfail__no_token_while_prefilling.py',
)


def test_v2_kvfail__no_token_while_prefilling(target):
    check_case(CASE, target)

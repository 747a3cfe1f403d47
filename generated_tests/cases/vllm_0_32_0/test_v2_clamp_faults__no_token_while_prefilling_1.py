"""With v2 and vllm-0.32.0 plus the clamp, stale-slot-read violates no-token-while-
prefilling at step 3. The property: no live delivery appends a token for a step the
scheduler classified as a prefill chunk.

Configuration v2-clamp-faults: clamp with V2 under KV-load failures and both faults
  runner v2; events abort, kvfail, preempt, preempt-drop, reset, stream; faults over-delivery, stale-slot-read;
  profile vllm-0.32.0; clamp on; 2 request(s), pp 1, 1 draft token(s) per step
Violated: no-token-while-prefilling (sched:2497-2499 (the contract's own comment)), at step 3.

step  event               picks                           what changes
   0  init                prompt_len=[2, 1] resumable=[False, False]
   1  schedule            budget=1 stale_read=[True, False]  r0: scheduled 1, reserved 0, runner returns 1
                                                          r0: status WAITING->RUNNING, c 0->1, F 0->1, X F->T, slot 0->1
                                                          r0: g 0->1, tl 0->1
                                                          in flight 0->1
                                                          VIOLATES predicates-agree
   2  schedule            budget=1                        r0: scheduled 1, reserved 1, runner returns 1
                                                          r0: c 1->2, P 0->1, F 1->2, X T->F, drafts 0->1
                                                          r0: g 1->2, tl 1->2
                                                          in flight 1->2
   3  deliver                                             r0: T 2->3, P 1->0, F 2->1
                                                          in flight 2->1
                                                          VIOLATES no-token-while-prefilling
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  clamp-off          runs 3 step(s); violated at step(s) 3
  clamp-on           runs 3 step(s); violated at step(s) 3

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_clamp_faults__no_token_while_prefilling_1.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/v2-clamp-faults/no-token-while-prefilling.1.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_clamp_faults__no_token_while_prefilling_1',
    config={'name': 'v2-clamp-faults', 'runner': 'v2', 'events': ['abort', 'kvfail', 'preempt', 'preempt-drop', 'reset', 'stream'], 'faults': ['over-delivery', 'stale-slot-read'], 'profile': 'vllm-0.32.0', 'clamp': True, 'requests': 2, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [2, 1], 'resumable': [False, False]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [True, False], 'extra': [0, 0]}),
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [False, False], 'extra': [0, 0]}),
        ('deliver', {'stop': [0, 0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
    ),
    kind='violation',
    property='no-token-while-prefilling',
    arms={
        'clamp-off': ({'clamp': False}, Expect(runs=3, fired=None, violations=(3,), dropped=0, completed=False)),
        'clamp-on': ({'clamp': True}, Expect(runs=3, fired=None, violations=(3,), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_clamp_faults__no_token_while_prefilling_1.py',
)


def test_v2_clamp_faults__no_token_while_prefilling_1(target):
    check_case(CASE, target)

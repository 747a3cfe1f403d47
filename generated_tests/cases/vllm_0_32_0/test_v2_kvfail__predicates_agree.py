"""With v2 and vllm-0.32.0, kv-load-failure violates predicates-agree at step 4. The
property: the runner samples a scheduled request iff the scheduler reserved
placeholders for it (runner discard <=> is_prefill_chunk).

Configuration v2-kvfail: V2 0.32.0: a recompute after a KV-load failure re-prefills below prefill_len
  runner v2; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: predicates-agree (sched:1634-1636 + async:34 vs v1r:2058-2060 / v2b:507-533), at step 4.

step  event               picks                           what changes
   0  init                prompt_len=[16]
   1  schedule            budget=3                        r0: scheduled 3, reserved 0, runner returns 0
                                                          r0: status WAITING->RUNNING, c 0->3, F 0->3, X F->T, g 0->3
                                                          r0: pl 0->16, tl 0->16
                                                          in flight 0->1
   2  schedule            budget=1                        r0: scheduled 1, reserved 0, runner returns 0
                                                          r0: c 3->4, F 3->4, g 3->4
                                                          in flight 1->2
   3  deliver             kv_fail_req=0                   r0: c 4->0, F 4->1
                                                          in flight 2->1
   4  schedule            budget=12                       r0: scheduled 12, reserved 0, runner returns 1
                                                          r0: c 0->12, F 1->13, g 4->16, tl 16->17
                                                          in flight 1->2
                                                          VIOLATES predicates-agree
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  clamp-off          runs 4 step(s); violated at step(s) 4
  clamp-on           runs 4 step(s); violated at step(s) 4

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_kvfail__predicates_agree.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/v2-kvfail/predicates-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_kvfail__predicates_agree',
    config={'name': 'v2-kvfail', 'runner': 'v2', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 3, 'accepted': [0]}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 12, 'accepted': [0]}),
    ),
    kind='violation',
    property='predicates-agree',
    arms={
        'clamp-off': ({'clamp': False}, Expect(runs=4, fired=None, violations=(4,), dropped=0, completed=False)),
        'clamp-on': ({'clamp': True}, Expect(runs=4, fired=None, violations=(4,), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_kvfail__predicates_agree.py',
)


def test_v2_kvfail__predicates_agree(target):
    check_case(CASE, target)

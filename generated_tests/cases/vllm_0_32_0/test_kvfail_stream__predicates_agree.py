"""With v1 and vllm-0.32.0, kv-load-failure, session-stop, stream_update violates
predicates-agree at step 7. The property: the runner samples a scheduled request iff
the scheduler reserved placeholders for it (runner discard <=> is_prefill_chunk).

Configuration kvfail-stream: KV-load failure on a streaming session: the stop lands below the prompt
  runner v1; events kvfail, stream; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: predicates-agree (sched:1634-1636 + async:34 vs v1r:2058-2060 / v2b:507-533), at step 7.

step  event               picks                           what changes
   0  init                prompt_len=[16] resumable=[True]
   1  stream_update       new_tokens=1                    r0: update F->T
   2  schedule            budget=13                       r0: scheduled 13, reserved 0, runner returns 0
                                                          r0: status WAITING->RUNNING, c 0->13, F 0->13, X F->T, Nr 0->16
                                                          in flight 0->1
   3  schedule            budget=3                        r0: scheduled 3, reserved 1, runner returns 1
                                                          r0: c 13->16, P 0->1, F 13->16, X T->F, drafts 0->1
                                                          r0: Nr 16->17
                                                          in flight 1->2
   4  deliver             kv_fail_req=0                   r0: c 16->0, F 16->3
                                                          in flight 2->1
   5  schedule            budget=1                        r0: scheduled 1, reserved 0, runner returns 0
                                                          r0: c 0->1, F 3->4, X F->T, drafts 1->0
                                                          in flight 1->2
   6  deliver             stop=[1]                        r0: status RUNNING->WAITING, L 16->17, T 16->2, P 1->0, F 4->1
                                                          r0: S 0->1, D F->T, update T->F
                                                          in flight 2->1
   7  schedule            budget=2                        r0: scheduled 2, reserved 2, runner returns 0
                                                          r0: status WAITING->RUNNING, c 1->3, P 0->2, F 1->3, X T->F
                                                          r0: drafts 0->1
                                                          in flight 1->2
                                                          VIOLATES predicates-agree
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  clamp-off          runs 7 step(s); violated at step(s) 7
  clamp-on           runs 7 step(s); violated at step(s) 7

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_kvfail_stream__predicates_agree.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/kvfail-stream/predicates-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='kvfail_stream__predicates_agree',
    config={'name': 'kvfail-stream', 'runner': 'v1', 'events': ['kvfail', 'stream'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16], 'resumable': [True]},
    steps=(
        ('stream_update', {'req': 0, 'new_tokens': 1}),
        ('schedule', {'budget': 13, 'accepted': [0]}),
        ('schedule', {'budget': 3, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [1], 'kv_fail_req': -1, 'kv_fail_block': 0}),
        ('schedule', {'budget': 2, 'accepted': [0]}),
    ),
    kind='violation',
    property='predicates-agree',
    arms={
        'clamp-off': ({'clamp': False}, Expect(runs=7, fired=None, violations=(7,), dropped=0, completed=False)),
        'clamp-on': ({'clamp': True}, Expect(runs=7, fired=None, violations=(7,), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_kvfail_stream__predicates_agree.py',
)


def test_kvfail_stream__predicates_agree(target):
    check_case(CASE, target)

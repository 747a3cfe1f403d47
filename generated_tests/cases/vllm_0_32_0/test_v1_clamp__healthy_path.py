"""With v1 and vllm-0.32.0 plus the clamp, a request prefills in chunks, decodes and
finishes on a stop token; no property is violated and the clamp never drops a token.

Configuration v1-clamp: clamp with V1 and every event family
  runner v1; events abort, kvfail, preempt, preempt-drop, reset, stream; faults none;
  profile vllm-0.32.0; clamp on; 2 request(s), pp 1, 1 draft token(s) per step

step  event               picks                           what changes
   0  init                prompt_len=[16, 1] resumable=[False, False]
   1  schedule            budget=16                       r0: scheduled 16, reserved 1, runner returns 1
                                                          r0: status WAITING->RUNNING, c 0->16, P 0->1, F 0->16, drafts 0->1
                                                          r0: Nr 0->17
                                                          in flight 0->1
   2  schedule            budget=2 accepted=[1, 0]        r0: scheduled 2, reserved 2, runner returns 2
                                                          r0: c 16->18, P 1->3, F 16->18, Nr 17->18
                                                          in flight 1->2
   3  deliver             kv_fail_req=0                   r0: c 18->0, F 18->2
                                                          in flight 2->1
   4  schedule            budget=1                        r0: scheduled 1, reserved 0, runner returns 0
                                                          r0: c 0->1, F 2->3, X F->T, drafts 1->0, Nr 18->19
                                                          in flight 1->2
   5  deliver             stop=[2, 0]                     r0: status RUNNING->FINISHED, T 16->18, P 3->1, F 3->1
                                                          in flight 2->1
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  clamp-off          runs 5 step(s); a request completes; no violation
  clamp-on           runs 5 step(s); a request completes; no violation

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v1_clamp__healthy_path.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/v1-clamp/witness.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v1_clamp__healthy_path',
    config={'name': 'v1-clamp', 'runner': 'v1', 'events': ['abort', 'kvfail', 'preempt', 'preempt-drop', 'reset', 'stream'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': True, 'requests': 2, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16, 1], 'resumable': [False, False]},
    steps=(
        ('schedule', {'budget': 16, 'accepted': [0, 0]}),
        ('schedule', {'budget': 2, 'accepted': [1, 0]}),
        ('deliver', {'stop': [0, 0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0, 0]}),
        ('deliver', {'stop': [2, 0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
    ),
    kind='witness',
    property=None,
    arms={
        'clamp-off': ({'clamp': False}, Expect(runs=5, fired=None, violations=(), dropped=0, completed=True)),
        'clamp-on': ({'clamp': True}, Expect(runs=5, fired=None, violations=(), dropped=0, completed=True)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v1_clamp__healthy_path.py',
)


def test_v1_clamp__healthy_path(target):
    check_case(CASE, target)

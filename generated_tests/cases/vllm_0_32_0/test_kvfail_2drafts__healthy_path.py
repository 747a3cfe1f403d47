"""With v1 and vllm-0.32.0, a request prefills in chunks, decodes and finishes on a stop
token; no property is violated and no guard drops a token.

Configuration kvfail-2drafts@0.32.0: KV-load failure with two draft tokens: after the recompute both drafts are rejected from a computed count of 1 (scheduler.py:2110-2128 checks c > 0, not c >= rejected), and the next step is scheduled from position -1
  runner v1; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 2 draft token(s) per step

step  event               picks                               what changes
   0  init                prompt_len=[2]
   1  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 0
                                                              r0: runner rule c + n = 0 + 1 = 1 < Nr = 2? yes -> discards
                                                              r0: status WAITING->RUNNING, c 0->1, F 0->1, X F->T, Nr 0->2
                                                              in flight 0->1
   2  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 1 + 1 = 2 < Nr = 2? no -> samples
                                                              r0: c 1->2, P 0->1, F 1->2, X T->F, drafts 0->2
                                                              r0: Nr 2->3
                                                              in flight 1->2
   3  deliver                                                 delivers the output of step 1
                                                              r0: F 2->1
                                                              in flight 2->1
   4  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 2 + 1 = 3 < Nr = 3? no -> samples
                                                              r0: c 2->3, P 1->2, F 1->2, Nr 3->4
                                                              in flight 1->2
   5  deliver                                                 delivers the output of step 2
                                                              r0: T 2->3, P 2->1, F 2->1
                                                              in flight 2->1
   6  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 3 + 1 = 4 < Nr = 4? no -> samples
                                                              r0: c 3->4, P 1->2, F 1->2, Nr 4->5
                                                              in flight 1->2
   7  deliver             stop=[1]                            delivers the output of step 4
                                                              r0: status RUNNING->FINISHED, T 3->4, P 2->1, F 2->1
                                                              in flight 2->1
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         holds: no assert fires, nothing is violated
                      runs 7 step(s); a request completes
  vllm-0.32.0+clamp   holds: no assert fires, nothing is violated
                      runs 7 step(s); a request completes
  vllm-0.32.0+guard   holds: no assert fires, nothing is violated
                      runs 7 step(s); a request completes
  vllm-0.33.0         holds: no assert fires, nothing is violated
                      runs 7 step(s); a request completes
  vllm-0.33.0+clamp   holds: no assert fires, nothing is violated
                      runs 7 step(s); a request completes
  vllm-0.33.0+guard   holds: no assert fires, nothing is violated
                      runs 7 step(s); a request completes

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_kvfail_2drafts__healthy_path.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/kvfail-2drafts@0.32.0/witness.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='kvfail_2drafts__healthy_path',
    config={'name': 'kvfail-2drafts@0.32.0', 'runner': 'v1', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 2, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [2]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [1], 'kv_fail_req': -1, 'kv_fail_block': 0}),
    ),
    kind='witness',
    property=None,
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(), others=(), dropped=0, completed=True)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(), others=(), dropped=0, completed=True)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(), others=(), dropped=0, completed=True)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(), others=(), dropped=0, completed=True)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(), others=(), dropped=0, completed=True)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(), others=(), dropped=0, completed=True)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_kvfail_2drafts__healthy_path.py',
)


def test_kvfail_2drafts__healthy_path(target):
    check_case(CASE, target)

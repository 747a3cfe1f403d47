"""With v1 and vllm-0.32.0, kv-load-failure violates computed-nonnegative at step 5. The
property: num_computed_tokens is never negative: no step is scheduled to start before
position 0 (the rejection rollback is guarded by c > 0, not c >= num_rejected; 0.33.0
also rolls c back by the tokens trimmed at a stop).

Configuration kvfail-2drafts@0.32.0: KV-load failure with two draft tokens: after the recompute both drafts are rejected from a computed count of 1 (scheduler.py:2110-2128 checks c > 0, not c >= rejected), and the next step is scheduled from position -1
  runner v1; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 2 draft token(s) per step
Violated: computed-nonnegative (vLLM 0.32.0: scheduler.py:2110-2128), at step 5.

step  event               picks                               what changes
   0  init                prompt_len=[16]
   1  schedule            budget=16                           r0: scheduled 16, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 0 + 16 = 16 < Nr = 16? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->16, P 0->1, F 0->16, drafts 0->2
                                                              r0: Nr 0->17
                                                              in flight 0->1
   2  schedule            budget=3                            r0: scheduled 3, reserved 3, runner returns 1
                                                              r0: runner rule c + n = 16 + 3 = 19 < Nr = 17? no -> samples
                                                              r0: c 16->19, P 1->4, F 16->19, Nr 17->18
                                                              in flight 1->2
   3  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 19->0, F 19->3
                                                              in flight 2->1
   4  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 0
                                                              r0: runner rule c + n = 0 + 1 = 1 < Nr = 20? yes -> discards
                                                              r0: c 0->1, F 3->4, X F->T, drafts 2->0, Nr 18->20
                                                              in flight 1->2
   5  deliver                                                 delivers the output of step 2
                                                              r0: T 16->17, c 1->-1, P 4->1, F 4->1
                                                              in flight 2->1
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: computed-nonnegative at step 5; placeholder-accounting at 3
                      runs 5 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: computed-nonnegative at step 5; placeholder-accounting at 3
                      runs 5 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: computed-nonnegative at step 5; placeholder-accounting at 3
                      runs 5 step(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: computed-nonnegative at step 5; placeholder-accounting at 3
                      runs 5 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: computed-nonnegative at step 5; placeholder-accounting at 3
                      runs 5 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: computed-nonnegative at step 5; placeholder-accounting at 3
                      runs 5 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_kvfail_2drafts__computed_nonnegative.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/kvfail-2drafts@0.32.0/computed-nonnegative.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='kvfail_2drafts__computed_nonnegative',
    config={'name': 'kvfail-2drafts@0.32.0', 'runner': 'v1', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 2, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 16, 'accepted': [0]}),
        ('schedule', {'budget': 3, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
    ),
    kind='violation',
    property='computed-nonnegative',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(5,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(5,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=5, fired=None, violations=(5,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(5,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(5,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=5, fired=None, violations=(5,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_kvfail_2drafts__computed_nonnegative.py',
)


def test_kvfail_2drafts__computed_nonnegative(target):
    check_case(CASE, target)

"""With v2-live and vllm-0.32.0, kv-load-failure violates no-token-while-prefilling at
step 7. The property: no live delivery appends a token for a step the scheduler
classified as a prefill chunk.

Configuration v2-live-kvfail@0.32.0: the live-length fix does not cover it: the GPU computed count is stale too
  runner v2-live; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: no-token-while-prefilling (vLLM 0.32.0: scheduler.py:2497-2499), at step 7.

step  event               picks                               what changes
   0  init                prompt_len=[16]
   1  schedule            budget=16                           r0: scheduled 16, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 0 + 16 = 16 < total_len = 16? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->16, P 0->1, F 0->16, drafts 0->1
                                                              r0: g 0->16, pl 0->16, tl 0->17
                                                              in flight 0->1
   2  schedule            budget=2 accepted=[1]               r0: scheduled 2, reserved 2, runner returns 2
                                                              r0: runner rule g + n = 16 + 2 = 18 < total_len = 17? no -> samples
                                                              r0: c 16->18, P 1->3, F 16->18, g 16->18, tl 17->19
                                                              in flight 1->2
   3  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 18->0, F 18->2
                                                              in flight 2->1
   4  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 1
                                                              r0: runner rule g + n = 18 + 1 = 19 < total_len = 19? no -> samples
                                                              r0: c 0->1, F 2->3, X F->T, drafts 1->0, g 18->19
                                                              r0: tl 19->20
                                                              in flight 1->2
                                                              VIOLATES positions-agree, predicates-agree
   5  deliver                                                 delivers the output of step 2
                                                              r0: T 16->18, P 3->1, F 3->1
                                                              in flight 2->1
   6  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 1
                                                              r0: runner rule g + n = 19 + 1 = 20 < total_len = 20? no -> samples
                                                              r0: c 1->2, F 1->2, g 19->20, tl 20->21
                                                              in flight 1->2
                                                              VIOLATES positions-agree, predicates-agree
   7  deliver                                                 delivers the output of step 4
                                                              r0: T 18->19, P 1->0, F 2->1
                                                              in flight 2->1
                                                              VIOLATES no-token-while-prefilling
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: no-token-while-prefilling at step 7; placeholder-accounting at 3; predicates-agree at 4; positions-agree at 4
                      runs 7 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: no-token-while-prefilling at step 7; placeholder-accounting at 3; predicates-agree at 4; positions-agree at 4
                      runs 7 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: placeholder-accounting at 3; predicates-agree at 4; positions-agree at 4
                      no-token-while-prefilling holds on this arm
                      runs 7 step(s); the guard drops 1 token(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: no-token-while-prefilling at step 7; placeholder-accounting at 3; predicates-agree at 4; positions-agree at 4
                      runs 7 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: no-token-while-prefilling at step 7; placeholder-accounting at 3; predicates-agree at 4; positions-agree at 4
                      runs 7 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: placeholder-accounting at 3; predicates-agree at 4; positions-agree at 4
                      no-token-while-prefilling holds on this arm
                      runs 7 step(s); the guard drops 1 token(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_live_kvfail__no_token_while_prefilling.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v2-live-kvfail@0.32.0/no-token-while-prefilling.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_live_kvfail__no_token_while_prefilling',
    config={'name': 'v2-live-kvfail@0.32.0', 'runner': 'v2-live', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
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
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(7,), others=(('placeholder-accounting', 3), ('predicates-agree', 4), ('positions-agree', 4)), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(7,), others=(('placeholder-accounting', 3), ('predicates-agree', 4), ('positions-agree', 4)), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(), others=(('placeholder-accounting', 3), ('predicates-agree', 4), ('positions-agree', 4)), dropped=1, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(7,), others=(('placeholder-accounting', 3), ('predicates-agree', 4), ('positions-agree', 4)), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(7,), others=(('placeholder-accounting', 3), ('predicates-agree', 4), ('positions-agree', 4)), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(), others=(('placeholder-accounting', 3), ('predicates-agree', 4), ('positions-agree', 4)), dropped=1, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_live_kvfail__no_token_while_prefilling.py',
)


def test_v2_live_kvfail__no_token_while_prefilling(target):
    check_case(CASE, target)

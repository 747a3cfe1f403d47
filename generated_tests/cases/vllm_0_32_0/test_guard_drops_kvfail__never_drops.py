"""With v2 and vllm-0.32.0 plus the step-reservation guard, kv-load-failure violates
never-drops at step 7. The property: the guard (the seed's clamp or the step-
reservation guard) never drops or alters a token.

Configuration guard-drops-kvfail@0.32.0: what the guard drops after a KV-load failure on V2: the recompute's stray tokens
  runner v2; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: never-drops (vLLM 0.32.0: async_scheduler.py:34-47), at step 7.

step  event               picks                               what changes
   0  init                prompt_len=[16]
   1  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 0
                                                              r0: runner rule g + n = 0 + 1 = 1 < prefill_len = 16? yes -> discards
                                                              r0: status WAITING->RUNNING, c 0->1, F 0->1, X F->T, g 0->1
                                                              r0: pl 0->16, tl 0->16
                                                              in flight 0->1
   2  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 0
                                                              r0: runner rule g + n = 1 + 1 = 2 < prefill_len = 16? yes -> discards
                                                              r0: c 1->2, F 1->2, g 1->2
                                                              in flight 1->2
   3  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 2->0, F 2->1
                                                              in flight 2->1
   4  schedule            budget=14                           r0: scheduled 14, reserved 0, runner returns 1
                                                              r0: runner rule g + n = 2 + 14 = 16 < prefill_len = 16? no -> samples
                                                              r0: c 0->14, F 1->15, g 2->16, tl 16->17
                                                              in flight 1->2
                                                              VIOLATES positions-agree, predicates-agree
   5  deliver                                                 delivers the output of step 2
                                                              r0: F 15->14
                                                              in flight 2->1
   6  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 1
                                                              r0: runner rule g + n = 16 + 1 = 17 < prefill_len = 16? no -> samples
                                                              r0: c 14->15, F 14->15, g 16->17, tl 17->18
                                                              in flight 1->2
                                                              VIOLATES positions-agree, predicates-agree
   7  deliver                                                 delivers the output of step 4
                                                              r0: F 15->1
                                                              in flight 2->1
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         CRASH at step 7: `assert request.num_output_placeholders >= 0` fires
                      violated: predicates-agree at 4; positions-agree at 4; counter-nonnegative at 7; no-token-while-prefilling at 7; placeholder-accounting at 7
                      never-drops holds on this arm
                      runs 7 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: never-drops at step 7; predicates-agree at 4; positions-agree at 4
                      runs 7 step(s); the clamp drops 1 token(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: never-drops at step 7; predicates-agree at 4; positions-agree at 4
                      runs 7 step(s); the guard drops 1 token(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: predicates-agree at 4; positions-agree at 4; no-token-while-prefilling at 7
                      never-drops holds on this arm
                      runs 7 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: never-drops at step 7; predicates-agree at 4; positions-agree at 4
                      runs 7 step(s); the clamp drops 1 token(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: never-drops at step 7; predicates-agree at 4; positions-agree at 4
                      runs 7 step(s); the guard drops 1 token(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_guard_drops_kvfail__never_drops.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/guard-drops-kvfail@0.32.0/never-drops.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='guard_drops_kvfail__never_drops',
    config={'name': 'guard-drops-kvfail@0.32.0', 'runner': 'v2', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation', 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 14, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': -1, 'kv_fail_block': 0}),
    ),
    kind='violation',
    property='never-drops',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=('placeholders-nonnegative', 7), violations=(), others=(('predicates-agree', 4), ('positions-agree', 4), ('counter-nonnegative', 7), ('no-token-while-prefilling', 7), ('placeholder-accounting', 7)), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(7,), others=(('predicates-agree', 4), ('positions-agree', 4)), dropped=1, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(7,), others=(('predicates-agree', 4), ('positions-agree', 4)), dropped=1, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(), others=(('predicates-agree', 4), ('positions-agree', 4), ('no-token-while-prefilling', 7)), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(7,), others=(('predicates-agree', 4), ('positions-agree', 4)), dropped=1, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(7,), others=(('predicates-agree', 4), ('positions-agree', 4)), dropped=1, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_guard_drops_kvfail__never_drops.py',
)


def test_guard_drops_kvfail__never_drops(target):
    check_case(CASE, target)

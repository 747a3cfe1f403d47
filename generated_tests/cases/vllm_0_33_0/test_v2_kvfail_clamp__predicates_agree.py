"""With v2 and vllm-0.33.0 plus the clamp, kv-load-failure violates predicates-agree at
step 4. The property: the runner samples a scheduled request iff the scheduler
reserved placeholders for it (runner discard <=> is_prefill_chunk).

Configuration v2-kvfail-clamp@0.33.0: clamp on the #57562 candidate: survives, but a stray token is kept
  runner v2; events kvfail; faults none;
  profile vllm-0.33.0; clamp on; 1 request(s), pp 1, 1 draft token(s) per step
Violated: predicates-agree (vLLM 0.33.0: scheduler.py:1863-1865, async_scheduler.py:33-46, gpu_model_runner.py:2057-2064, input_batch.py:516-542), at step 4.

step  event               picks                               what changes
   0  init                prompt_len=[16]
   1  schedule            budget=14                           r0: scheduled 14, reserved 0, runner returns 0
                                                              r0: runner rule g + n = 0 + 14 = 14 < prefill_len = 16? yes -> discards
                                                              r0: status WAITING->RUNNING, c 0->14, F 0->14, X F->T, g 0->14
                                                              r0: pl 0->16, tl 0->16
                                                              in flight 0->1
   2  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 0
                                                              r0: runner rule g + n = 14 + 1 = 15 < prefill_len = 16? yes -> discards
                                                              r0: c 14->15, F 14->15, g 14->15
                                                              in flight 1->2
   3  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 15->0, F 15->1
                                                              in flight 2->1
   4  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 1
                                                              r0: runner rule g + n = 15 + 1 = 16 < prefill_len = 16? no -> samples
                                                              r0: c 0->1, F 1->2, g 15->16, tl 16->17
                                                              in flight 1->2
                                                              VIOLATES positions-agree, predicates-agree
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: predicates-agree at step 4; positions-agree at 4
                      runs 4 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: predicates-agree at step 4; positions-agree at 4
                      runs 4 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: predicates-agree at step 4; positions-agree at 4
                      runs 4 step(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: predicates-agree at step 4; positions-agree at 4
                      runs 4 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: predicates-agree at step 4; positions-agree at 4
                      runs 4 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: predicates-agree at step 4; positions-agree at 4
                      runs 4 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_33_0/test_v2_kvfail_clamp__predicates_agree.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v2-kvfail-clamp@0.33.0/predicates-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_kvfail_clamp__predicates_agree',
    config={'name': 'v2-kvfail-clamp@0.33.0', 'runner': 'v2', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.33.0', 'clamp': True, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 14, 'accepted': [0]}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
    ),
    kind='violation',
    property='predicates-agree',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('positions-agree', 4),), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('positions-agree', 4),), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=4, fired=None, violations=(4,), others=(('positions-agree', 4),), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('positions-agree', 4),), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('positions-agree', 4),), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=4, fired=None, violations=(4,), others=(('positions-agree', 4),), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_33_0/test_v2_kvfail_clamp__predicates_agree.py',
)


def test_v2_kvfail_clamp__predicates_agree(target):
    check_case(CASE, target)

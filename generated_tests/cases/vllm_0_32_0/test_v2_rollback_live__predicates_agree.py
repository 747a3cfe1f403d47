"""With v2-rollback-live and vllm-0.32.0, kv-load-failure violates predicates-agree at
step 4. The property: the runner samples a scheduled request iff the scheduler
reserved placeholders for it (runner discard <=> is_prefill_chunk).

Configuration v2-rollback-live@0.32.0: negative control of the V2 recompute fix: rolling the slot back is not enough while the runner decides on its own (a recompute that covers a pending draft's position is a chunk to the scheduler, not to the runner)
  runner v2-rollback-live; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: predicates-agree (vLLM 0.32.0: scheduler.py:1634-1636, async_scheduler.py:34-47, gpu_model_runner.py:2053-2060, input_batch.py:507-533), at step 4.

step  event               picks                               what changes
   0  init                prompt_len=[16]
   1  schedule            budget=16                           r0: scheduled 16, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 0 + 16 = 16 < total_len = 16? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->16, P 0->1, F 0->16, drafts 0->1
                                                              r0: g 0->16, pl 0->16, tl 0->17
                                                              in flight 0->1
   2  schedule            budget=2                            r0: scheduled 2, reserved 2, runner returns 1
                                                              r0: runner rule g + n = 16 + 2 = 18 < total_len = 17? no -> samples
                                                              r0: c 16->18, P 1->3, F 16->18, g 16->17, tl 17->18
                                                              in flight 1->2
   3  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 18->0, F 18->2
                                                              in flight 2->1
   4  schedule            budget=18                           r0: scheduled 18, reserved 0, runner returns 1
                                                              r0: runner rule g + n = 0 + 18 = 18 < total_len = 18? no -> samples
                                                              r0: c 0->18, F 2->20, X F->T, drafts 1->0, g 17->18
                                                              r0: tl 18->19
                                                              in flight 1->2
                                                              VIOLATES positions-agree, predicates-agree
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: predicates-agree at step 4; placeholder-accounting at 3; positions-agree at 4
                      runs 4 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: predicates-agree at step 4; placeholder-accounting at 3; positions-agree at 4
                      runs 4 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: predicates-agree at step 4; placeholder-accounting at 3; positions-agree at 4
                      runs 4 step(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: predicates-agree at step 4; placeholder-accounting at 3; positions-agree at 4
                      runs 4 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: predicates-agree at step 4; placeholder-accounting at 3; positions-agree at 4
                      runs 4 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: predicates-agree at step 4; placeholder-accounting at 3; positions-agree at 4
                      runs 4 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_rollback_live__predicates_agree.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v2-rollback-live@0.32.0/predicates-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_rollback_live__predicates_agree',
    config={'name': 'v2-rollback-live@0.32.0', 'runner': 'v2-rollback-live', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 16, 'accepted': [0]}),
        ('schedule', {'budget': 2, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 18, 'accepted': [0]}),
    ),
    kind='violation',
    property='predicates-agree',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3), ('positions-agree', 4)), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3), ('positions-agree', 4)), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3), ('positions-agree', 4)), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3), ('positions-agree', 4)), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3), ('positions-agree', 4)), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3), ('positions-agree', 4)), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_rollback_live__predicates_agree.py',
)


def test_v2_rollback_live__predicates_agree(target):
    check_case(CASE, target)

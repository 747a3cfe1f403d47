"""With v1 and vllm-0.32.0, kv-load-failure violates no-placeholder-input at step 4. The
property: the V1 runner never feeds a placeholder token id (-1) at a position whose
token the scheduler scheduled as known (every position but the drafts).

Configuration v1-kvfail@0.32.0: V1 with KV-load failures (recompute) and every other event but streaming: runner and scheduler still agree
  runner v1; events abort, kvfail, preempt, preempt-drop, reset; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 0 draft token(s) per step
Violated: no-placeholder-input (vLLM 0.32.0: gpu_model_runner.py:3561-3570, gpu_model_runner.py:3584-3586, gpu_model_runner.py:1792), at step 4.

step  event               picks                               what changes
   0  init                prompt_len=[16]
   1  schedule            budget=16                           r0: scheduled 16, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 0 + 16 = 16 < Nr = 16? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->16, P 0->1, F 0->16, Nr 0->17
                                                              in flight 0->1
   2  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 16 + 1 = 17 < Nr = 17? no -> samples
                                                              r0: c 16->17, P 1->2, F 16->17, Nr 17->18
                                                              in flight 1->2
   3  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 17->0, F 17->1
                                                              in flight 2->1
   4  schedule            budget=18                           r0: scheduled 18, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 0 + 18 = 18 < Nr = 18? no -> samples
                                                              r0: c 0->18, P 2->3, F 1->19, Nr 18->19
                                                              in flight 1->2
                                                              VIOLATES no-placeholder-input
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: no-placeholder-input at step 4; placeholder-accounting at 3
                      runs 4 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: no-placeholder-input at step 4; placeholder-accounting at 3
                      runs 4 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: no-placeholder-input at step 4; placeholder-accounting at 3
                      runs 4 step(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: no-placeholder-input at step 4; placeholder-accounting at 3
                      runs 4 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: no-placeholder-input at step 4; placeholder-accounting at 3
                      runs 4 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: no-placeholder-input at step 4; placeholder-accounting at 3
                      runs 4 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v1_kvfail__no_placeholder_input.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v1-kvfail@0.32.0/no-placeholder-input.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v1_kvfail__no_placeholder_input',
    config={'name': 'v1-kvfail@0.32.0', 'runner': 'v1', 'events': ['abort', 'kvfail', 'preempt', 'preempt-drop', 'reset'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 0, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 16}),
        ('schedule', {'budget': 1}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 18}),
    ),
    kind='violation',
    property='no-placeholder-input',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=4, fired=None, violations=(4,), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v1_kvfail__no_placeholder_input.py',
)


def test_v1_kvfail__no_placeholder_input(target):
    check_case(CASE, target)

"""With v1 and h2-reset-discard-flag, reset_prefix_cache violates counter-nonnegative at
step 6. The property: num_output_placeholders is never negative (0.32.0 asserts it
after every live delivery; 0.33.0 only after a delivery that found it positive).

Configuration h2-reset-flag: reset_prefix_cache dropped one frame with a boolean: a later frame carrying drafts is consumed against the zeroed counter (one request with two drafts; with one draft it takes a second request)
  runner v1; events reset; faults none;
  profile h2-reset-discard-flag; clamp off; 1 request(s), pp 1, 2 draft token(s) per step
Violated: counter-nonnegative (vLLM 0.32.0: async_scheduler.py:69-71), at step 6.

step  event               picks                               what changes
   0  init                prompt_len=[1]
   1  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 0 + 1 = 1 < Nr = 1? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->2
                                                              r0: Nr 0->2
                                                              in flight 0->1
   2  schedule            budget=3                            r0: scheduled 3, reserved 3, runner returns 1
                                                              r0: runner rule c + n = 1 + 3 = 4 < Nr = 2? no -> samples
                                                              r0: c 1->4, P 1->4, F 1->4, Nr 2->3
                                                              in flight 1->2
   3  deliver                                                 delivers the output of step 1
                                                              r0: T 1->2, P 4->3, F 4->3
                                                              in flight 2->1
   4  reset_prefix_cache                                      r0: status RUNNING->PREEMPTED, c 4->0, P 3->0, drafts 2->0, discard F->T
   5  schedule            budget=2                            r0: scheduled 2, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 0 + 2 = 2 < Nr = 2? no -> samples
                                                              r0: status PREEMPTED->RUNNING, c 0->2, P 0->1, F 3->5, drafts 0->2
                                                              in flight 1->2
   6  deliver                                                 delivers the output of step 2
                                                              r0: c 2->0, P 1->-1, F 5->2, discard T->F
                                                              in flight 2->1
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  h2-reset-discard-flag SILENT: no assert fires
                      violated: counter-nonnegative at step 6; placeholder-accounting at 6
                      runs 6 step(s)
  vllm-0.32.0         holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 6 step(s)
  vllm-0.32.0+clamp   holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 6 step(s)
  vllm-0.32.0+guard   holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 6 step(s)
  vllm-0.33.0         holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 6 step(s)
  vllm-0.33.0+clamp   holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 6 step(s)
  vllm-0.33.0+guard   holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 6 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/h2_reset_discard_flag/test_h2_reset_flag__counter_nonnegative.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/h2-reset-flag/counter-nonnegative.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='h2_reset_flag__counter_nonnegative',
    config={'name': 'h2-reset-flag', 'runner': 'v1', 'events': ['reset'], 'faults': [], 'profile': 'h2-reset-discard-flag', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 2, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('schedule', {'budget': 3, 'accepted': [0]}),
        ('deliver', {'stop': [0]}),
        ('reset_prefix_cache', {}),
        ('schedule', {'budget': 2, 'accepted': [0]}),
        ('deliver', {'stop': [0]}),
    ),
    kind='violation',
    property='counter-nonnegative',
    arms={
        'h2-reset-discard-flag': ({'profile': 'h2-reset-discard-flag', 'clamp': False, 'guard': 'none'}, Expect(runs=6, fired=None, violations=(6,), others=(('placeholder-accounting', 6),), dropped=0, completed=False)),
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=6, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=6, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=6, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=6, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=6, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=6, fired=None, violations=(), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/h2_reset_discard_flag/test_h2_reset_flag__counter_nonnegative.py',
)


def test_h2_reset_flag__counter_nonnegative(target):
    check_case(CASE, target)

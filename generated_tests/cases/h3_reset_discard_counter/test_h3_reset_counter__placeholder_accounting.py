"""With v1 and h3-reset-discard-counter, reset_prefix_cache violates placeholder-
accounting at step 8. The property: an unfinished request's placeholders equal the
reservations of its in-flight steps scheduled since its last preemption or resumable
stop.

Configuration h3-reset-counter: reset_prefix_cache counted tokens but dropped frames (#42117): a multi-token frame is counted as one, later frames are dropped and leak placeholders
  runner v1; events reset; faults none;
  profile h3-reset-discard-counter; clamp off; 1 request(s), pp 1, 2 draft token(s) per step
Violated: placeholder-accounting (vLLM 0.32.0: async_scheduler.py:34-47, async_scheduler.py:69-71, scheduler.py:1603-1607, scheduler.py:2472-2474), at step 8.

step  event               picks                               what changes
   0  init                prompt_len=[1]
   1  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 0 + 1 = 1 < Nr = 1? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->2
                                                              r0: Nr 0->2
                                                              in flight 0->1
   2  schedule            budget=2                            r0: scheduled 2, reserved 2, runner returns 1
                                                              r0: runner rule c + n = 1 + 2 = 3 < Nr = 2? no -> samples
                                                              r0: c 1->3, P 1->3, F 1->3, Nr 2->3
                                                              in flight 1->2
   3  deliver                                                 delivers the output of step 1
                                                              r0: T 1->2, P 3->2, F 3->2
                                                              in flight 2->1
   4  reset_prefix_cache                                      r0: status RUNNING->PREEMPTED, c 3->0, P 2->0, drafts 2->0, to_discard 0->2
   5  schedule            budget=2                            r0: scheduled 2, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 0 + 2 = 2 < Nr = 2? no -> samples
                                                              r0: status PREEMPTED->RUNNING, c 0->2, P 0->1, F 2->4, drafts 0->2
                                                              in flight 1->2
   6  deliver                                                 delivers the output of step 2
                                                              r0: F 4->2, to_discard 2->1
                                                              in flight 2->1
   7  schedule            budget=2 accepted=[1]               r0: scheduled 2, reserved 2, runner returns 2
                                                              r0: runner rule c + n = 2 + 2 = 4 < Nr = 3? no -> samples
                                                              r0: c 2->4, P 1->3, F 2->4, Nr 3->4
                                                              in flight 1->2
   8  deliver                                                 delivers the output of step 5
                                                              r0: F 4->2, to_discard 1->0
                                                              in flight 2->1
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  h3-reset-discard-counter SILENT: no assert fires
                      violated: placeholder-accounting at step 8
                      runs 8 step(s)
  vllm-0.32.0         holds: no assert fires, nothing is violated
                      placeholder-accounting holds on this arm
                      runs 8 step(s)
  vllm-0.32.0+clamp   holds: no assert fires, nothing is violated
                      placeholder-accounting holds on this arm
                      runs 8 step(s)
  vllm-0.32.0+guard   holds: no assert fires, nothing is violated
                      placeholder-accounting holds on this arm
                      runs 8 step(s)
  vllm-0.33.0         holds: no assert fires, nothing is violated
                      placeholder-accounting holds on this arm
                      runs 8 step(s)
  vllm-0.33.0+clamp   holds: no assert fires, nothing is violated
                      placeholder-accounting holds on this arm
                      runs 8 step(s)
  vllm-0.33.0+guard   holds: no assert fires, nothing is violated
                      placeholder-accounting holds on this arm
                      runs 8 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/h3_reset_discard_counter/test_h3_reset_counter__placeholder_accounting.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/h3-reset-counter/placeholder-accounting.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='h3_reset_counter__placeholder_accounting',
    config={'name': 'h3-reset-counter', 'runner': 'v1', 'events': ['reset'], 'faults': [], 'profile': 'h3-reset-discard-counter', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 2, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('schedule', {'budget': 2, 'accepted': [0]}),
        ('deliver', {'stop': [0]}),
        ('reset_prefix_cache', {}),
        ('schedule', {'budget': 2, 'accepted': [0]}),
        ('deliver', {'stop': [0]}),
        ('schedule', {'budget': 2, 'accepted': [1]}),
        ('deliver', {'stop': [0]}),
    ),
    kind='violation',
    property='placeholder-accounting',
    arms={
        'h3-reset-discard-counter': ({'profile': 'h3-reset-discard-counter', 'clamp': False, 'guard': 'none'}, Expect(runs=8, fired=None, violations=(8,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=8, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=8, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=8, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=8, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=8, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=8, fired=None, violations=(), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/h3_reset_discard_counter/test_h3_reset_counter__placeholder_accounting.py',
)


def test_h3_reset_counter__placeholder_accounting(target):
    check_case(CASE, target)

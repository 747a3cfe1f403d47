"""With v2 and vllm-0.33.0, stale-slot-read violates counter-nonnegative at step 7. The
property: num_output_placeholders is never negative (0.32.0 asserts it after every
live delivery; 0.33.0 only after a delivery that found it positive).

Configuration v2-stale-slot@0.33.0: V2 reading its slot as the previous occupant left it (CC / UVA)
  runner v2; events abort; faults stale-slot-read;
  profile vllm-0.33.0; clamp off; 2 request(s), pp 1, 1 draft token(s) per step
Violated: counter-nonnegative (vLLM 0.33.0: scheduler.py:2766-2769), at step 7.

step  event               picks                               what changes
   0  init                prompt_len=[1, 2]
   1  schedule            budget=2 stale_read=[False, True]   r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 0 + 1 = 1 < prefill_len = 1? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->1
                                                              r0: slot 0->1, g 0->1, pl 0->1, tl 0->2
                                                              r1: scheduled 1, reserved 0, runner returns 1
                                                              r1: runner rule g + n = 0 + 1 = 1 < prefill_len = 0? no -> samples
                                                              r1: status WAITING->RUNNING, c 0->1, F 0->1, X F->T, g 0->1
                                                              r1: tl 0->1
                                                              in flight 0->1
                                                              VIOLATES predicates-agree
   2  schedule            budget=3 accepted=[1, 0]            r0: scheduled 2, reserved 2, runner returns 2
                                                              r0: runner rule g + n = 1 + 2 = 3 < prefill_len = 1? no -> samples
                                                              r0: c 1->3, P 1->3, F 1->3, g 1->3, tl 2->4
                                                              r1: scheduled 1, reserved 1, runner returns 1
                                                              r1: runner rule g + n = 1 + 1 = 2 < prefill_len = 0? no -> samples
                                                              r1: c 1->2, P 0->1, F 1->2, X T->F, drafts 0->1
                                                              r1: g 1->2, tl 1->2
                                                              in flight 1->2
   3  deliver                                                 delivers the output of step 1
                                                              r0: T 1->2, P 3->2, F 3->2
                                                              r1: T 2->3, P 1->0, F 2->1
                                                              in flight 2->1
                                                              VIOLATES no-token-while-prefilling
   4  schedule            budget=4 accepted=[1, 1]            r0: scheduled 2, reserved 2, runner returns 2
                                                              r0: runner rule g + n = 3 + 2 = 5 < prefill_len = 1? no -> samples
                                                              r0: c 3->5, P 2->4, F 2->4, g 3->5, tl 4->6
                                                              r1: scheduled 2, reserved 2, runner returns 2
                                                              r1: runner rule g + n = 2 + 2 = 4 < prefill_len = 0? no -> samples
                                                              r1: c 2->4, P 0->2, F 1->3, g 2->4, tl 2->4
                                                              in flight 1->2
   5  deliver                                                 delivers the output of step 2
                                                              r0: T 2->4, P 4->2, F 4->2
                                                              r1: T 3->4, P 2->1, F 3->2
                                                              in flight 2->1
   6  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 5 + 1 = 6 < prefill_len = 1? no -> samples
                                                              r0: c 5->6, P 2->3, F 2->3, g 5->6, tl 6->7
                                                              in flight 1->2
   7  deliver                                                 delivers the output of step 4
                                                              r0: T 4->6, P 3->1, F 3->1
                                                              r1: T 4->6, P 1->-1, F 2->0
                                                              in flight 2->1
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         CRASH at step 7: `assert request.num_output_placeholders >= 0` fires
                      violated: counter-nonnegative at step 7; predicates-agree at 1; no-token-while-prefilling at 3; placeholder-accounting at 3
                      runs 7 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: predicates-agree at 1; no-token-while-prefilling at 3; placeholder-accounting at 3
                      counter-nonnegative holds on this arm
                      runs 7 step(s); the clamp drops 1 token(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: predicates-agree at 1
                      counter-nonnegative holds on this arm
                      runs 7 step(s); the guard drops 1 token(s)
  vllm-0.33.0         CRASH at step 7: `assert request.num_output_placeholders >= 0` fires
                      violated: counter-nonnegative at step 7; predicates-agree at 1; no-token-while-prefilling at 3; placeholder-accounting at 3
                      runs 7 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: predicates-agree at 1; no-token-while-prefilling at 3; placeholder-accounting at 3
                      counter-nonnegative holds on this arm
                      runs 7 step(s); the clamp drops 1 token(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: predicates-agree at 1
                      counter-nonnegative holds on this arm
                      runs 7 step(s); the guard drops 1 token(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_33_0/test_v2_stale_slot__counter_nonnegative.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v2-stale-slot@0.33.0/counter-nonnegative.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_stale_slot__counter_nonnegative',
    config={'name': 'v2-stale-slot@0.33.0', 'runner': 'v2', 'events': ['abort'], 'faults': ['stale-slot-read'], 'profile': 'vllm-0.33.0', 'clamp': False, 'requests': 2, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1, 2]},
    steps=(
        ('schedule', {'budget': 2, 'accepted': [0, 0], 'stale_read': [False, True]}),
        ('schedule', {'budget': 3, 'accepted': [1, 0], 'stale_read': [False, False]}),
        ('deliver', {'stop': [0, 0]}),
        ('schedule', {'budget': 4, 'accepted': [1, 1], 'stale_read': [False, False]}),
        ('deliver', {'stop': [0, 0]}),
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [False, False]}),
        ('deliver', {'stop': [0, 0]}),
    ),
    kind='violation',
    property='counter-nonnegative',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=('placeholders-nonnegative', 7), violations=(7,), others=(('predicates-agree', 1), ('no-token-while-prefilling', 3), ('placeholder-accounting', 3)), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(), others=(('predicates-agree', 1), ('no-token-while-prefilling', 3), ('placeholder-accounting', 3)), dropped=1, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(), others=(('predicates-agree', 1),), dropped=1, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=('placeholders-nonnegative', 7), violations=(7,), others=(('predicates-agree', 1), ('no-token-while-prefilling', 3), ('placeholder-accounting', 3)), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(), others=(('predicates-agree', 1), ('no-token-while-prefilling', 3), ('placeholder-accounting', 3)), dropped=1, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(), others=(('predicates-agree', 1),), dropped=1, completed=False)),
    },
    path='generated_tests/cases/vllm_0_33_0/test_v2_stale_slot__counter_nonnegative.py',
)


def test_v2_stale_slot__counter_nonnegative(target):
    check_case(CASE, target)

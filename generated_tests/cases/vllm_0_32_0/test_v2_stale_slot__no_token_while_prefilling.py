"""With v2 and vllm-0.32.0, stale-slot-read violates no-token-while-prefilling at step 3.
The property: no live delivery appends a token for a step the scheduler classified as
a prefill chunk.

Configuration v2-stale-slot@0.32.0: V2 reading its slot as the previous occupant left it (CC / UVA)
  runner v2; events abort; faults stale-slot-read;
  profile vllm-0.32.0; clamp off; 2 request(s), pp 1, 1 draft token(s) per step
Violated: no-token-while-prefilling (vLLM 0.32.0: scheduler.py:2497-2499), at step 3.

step  event               picks                               what changes
   0  init                prompt_len=[2, 1]
   1  schedule            budget=1 stale_read=[True, False]   r0: scheduled 1, reserved 0, runner returns 1
                                                              r0: runner rule g + n = 0 + 1 = 1 < prefill_len = 0? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->1, F 0->1, X F->T, slot 0->1
                                                              r0: g 0->1, tl 0->1
                                                              in flight 0->1
                                                              VIOLATES predicates-agree
   2  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 1 + 1 = 2 < prefill_len = 0? no -> samples
                                                              r0: c 1->2, P 0->1, F 1->2, X T->F, drafts 0->1
                                                              r0: g 1->2, tl 1->2
                                                              in flight 1->2
   3  deliver                                                 delivers the output of step 1
                                                              r0: T 2->3, P 1->0, F 2->1
                                                              in flight 2->1
                                                              VIOLATES no-token-while-prefilling
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: no-token-while-prefilling at step 3; predicates-agree at 1; placeholder-accounting at 3
                      runs 3 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: no-token-while-prefilling at step 3; predicates-agree at 1; placeholder-accounting at 3
                      runs 3 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: predicates-agree at 1
                      no-token-while-prefilling holds on this arm
                      runs 3 step(s); the guard drops 1 token(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: no-token-while-prefilling at step 3; predicates-agree at 1; placeholder-accounting at 3
                      runs 3 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: no-token-while-prefilling at step 3; predicates-agree at 1; placeholder-accounting at 3
                      runs 3 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: predicates-agree at 1
                      no-token-while-prefilling holds on this arm
                      runs 3 step(s); the guard drops 1 token(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_stale_slot__no_token_while_prefilling.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v2-stale-slot@0.32.0/no-token-while-prefilling.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_stale_slot__no_token_while_prefilling',
    config={'name': 'v2-stale-slot@0.32.0', 'runner': 'v2', 'events': ['abort'], 'faults': ['stale-slot-read'], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 2, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [2, 1]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [True, False]}),
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [False, False]}),
        ('deliver', {'stop': [0, 0]}),
    ),
    kind='violation',
    property='no-token-while-prefilling',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(('predicates-agree', 1), ('placeholder-accounting', 3)), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(('predicates-agree', 1), ('placeholder-accounting', 3)), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(), others=(('predicates-agree', 1),), dropped=1, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(('predicates-agree', 1), ('placeholder-accounting', 3)), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(('predicates-agree', 1), ('placeholder-accounting', 3)), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(), others=(('predicates-agree', 1),), dropped=1, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_stale_slot__no_token_while_prefilling.py',
)


def test_v2_stale_slot__no_token_while_prefilling(target):
    check_case(CASE, target)

"""With v1 and vllm-0.32.0 plus the step-reservation guard, over-delivery violates never-
drops at step 3. The property: the guard (the seed's clamp or the step-reservation
guard) never drops or alters a token.

Configuration guard-drops@0.32.0: what the guard drops, per fault: the over-committed tokens (shortest trace)
  runner v1; events none; faults over-delivery;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: never-drops (vLLM 0.32.0: async_scheduler.py:34-47), at step 3.

step  event               picks                               what changes
   0  init                prompt_len=[1]
   1  schedule            budget=1 extra=[1]                  r0: scheduled 1, reserved 1, runner returns 2
                                                              r0: runner rule c + n = 0 + 1 = 1 < Nr = 1? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->1
                                                              r0: Nr 0->2
                                                              in flight 0->1
   2  schedule            budget=2 accepted=[1]               r0: scheduled 2, reserved 2, runner returns 2
                                                              r0: runner rule c + n = 1 + 2 = 3 < Nr = 2? no -> samples
                                                              r0: c 1->3, P 1->3, F 1->3, Nr 2->3
                                                              in flight 1->2
   3  deliver                                                 delivers the output of step 1
                                                              r0: T 1->2, P 3->2, F 3->2
                                                              in flight 2->1
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: placeholder-accounting at 3
                      never-drops holds on this arm
                      runs 3 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: placeholder-accounting at 3
                      never-drops holds on this arm
                      runs 3 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: never-drops at step 3
                      runs 3 step(s); the guard drops 1 token(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: placeholder-accounting at 3
                      never-drops holds on this arm
                      runs 3 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: placeholder-accounting at 3
                      never-drops holds on this arm
                      runs 3 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: never-drops at step 3
                      runs 3 step(s); the guard drops 1 token(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_guard_drops__never_drops.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/guard-drops@0.32.0/never-drops.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='guard_drops__never_drops',
    config={'name': 'guard-drops@0.32.0', 'runner': 'v1', 'events': [], 'faults': ['over-delivery'], 'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation', 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0], 'extra': [1]}),
        ('schedule', {'budget': 2, 'accepted': [1], 'extra': [0]}),
        ('deliver', {'stop': [0]}),
    ),
    kind='violation',
    property='never-drops',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=1, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(), others=(('placeholder-accounting', 3),), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=1, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_guard_drops__never_drops.py',
)


def test_guard_drops__never_drops(target):
    check_case(CASE, target)

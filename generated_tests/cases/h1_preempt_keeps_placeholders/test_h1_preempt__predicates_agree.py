"""With v2 and h1-preempt-keeps-placeholders, preempt violates predicates-agree at step
3. The property: the runner samples a scheduled request iff the scheduler reserved
placeholders for it (runner discard <=> is_prefill_chunk).

Configuration h1-preempt: preemption kept placeholders, output not marked stale (before #38624); V2 re-prefills a resumed request while the scheduler still counts old placeholders
  runner v2; events preempt; faults none;
  profile h1-preempt-keeps-placeholders; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: predicates-agree (vLLM 0.32.0: scheduler.py:1634-1636, async_scheduler.py:34-47, gpu_model_runner.py:2053-2060, input_batch.py:507-533), at step 3.

step  event               picks                               what changes
   0  init                prompt_len=[1]
   1  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 0 + 1 = 1 < prefill_len = 1? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->1
                                                              r0: g 0->1, pl 0->1, tl 0->2
                                                              in flight 0->1
   2  preempt                                                 r0: status RUNNING->PREEMPTED, c 1->0, drafts 1->0
   3  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 1
                                                              r0: runner rule g + n = 0 + 1 = 1 < prefill_len = 1? no -> samples
                                                              r0: status PREEMPTED->RUNNING, c 0->1, F 1->2, X F->T
                                                              in flight 1->2
                                                              VIOLATES predicates-agree
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  h1-preempt-keeps-placeholders SILENT: no assert fires
                      violated: predicates-agree at step 3; placeholder-accounting at 2
                      runs 3 step(s)
  vllm-0.32.0         holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 3 step(s)
  vllm-0.32.0+clamp   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 3 step(s)
  vllm-0.32.0+guard   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 3 step(s)
  vllm-0.33.0         holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 3 step(s)
  vllm-0.33.0+clamp   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 3 step(s)
  vllm-0.33.0+guard   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 3 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/h1_preempt_keeps_placeholders/test_h1_preempt__predicates_agree.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/h1-preempt/predicates-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='h1_preempt__predicates_agree',
    config={'name': 'h1-preempt', 'runner': 'v2', 'events': ['preempt'], 'faults': [], 'profile': 'h1-preempt-keeps-placeholders', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('preempt', {'req': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
    ),
    kind='violation',
    property='predicates-agree',
    arms={
        'h1-preempt-keeps-placeholders': ({'profile': 'h1-preempt-keeps-placeholders', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(('placeholder-accounting', 2),), dropped=0, completed=False)),
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/h1_preempt_keeps_placeholders/test_h1_preempt__predicates_agree.py',
)


def test_h1_preempt__predicates_agree(target):
    check_case(CASE, target)

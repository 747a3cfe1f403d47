"""With v2 and h1-preempt-keeps-placeholders, preempt violates placeholder-accounting at
step 2. The property: an unfinished request's placeholders equal the reservations of
its in-flight steps scheduled since its last preemption or resumable stop.

Configuration h1-preempt: preemption kept placeholders, output not marked stale (before #38624); V2 re-prefills a resumed request while the scheduler still counts old placeholders
  runner v2; events preempt; faults none;
  profile h1-preempt-keeps-placeholders; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: placeholder-accounting (async:45-47, async:70, sched:1607, sched:2478), at step 2.

step  event               picks                           what changes
   0  init                prompt_len=[1]
   1  schedule            budget=1                        r0: scheduled 1, reserved 1, runner returns 1
                                                          r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->1
                                                          r0: g 0->1, pl 0->1, tl 0->2
                                                          in flight 0->1
   2  preempt                                             r0: status RUNNING->PREEMPTED, c 1->0, drafts 1->0
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  h1-preempt-keeps-placeholders runs 2 step(s); violated at step(s) 2
  vllm-0.32.0        runs 2 step(s); no violation
  vllm-0.32.0+clamp  runs 2 step(s); no violation

Replay:      .venv/bin/python -m pytest generated_tests/cases/h1_preempt_keeps_placeholders/test_h1_preempt__placeholder_accounting.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/h1-preempt/placeholder-accounting.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='h1_preempt__placeholder_accounting',
    config={'name': 'h1-preempt', 'runner': 'v2', 'events': ['preempt'], 'faults': [], 'profile': 'h1-preempt-keeps-placeholders', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('preempt', {'req': 0}),
    ),
    kind='violation',
    property='placeholder-accounting',
    arms={
        'h1-preempt-keeps-placeholders': ({'clamp': False}, Expect(runs=2, fired=None, violations=(2,), dropped=0, completed=False)),
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False}, Expect(runs=2, fired=None, violations=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True}, Expect(runs=2, fired=None, violations=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/h1_preempt_keeps_placeholders/test_h1_preempt__placeholder_accounting.py',
)


def test_h1_preempt__placeholder_accounting(target):
    check_case(CASE, target)

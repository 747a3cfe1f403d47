"""With v1 and h4-stream-no-rollback, session-stop, stream_update violates counter-
nonnegative at step 7. The property: num_output_placeholders is never negative (0.32.0
asserts it after every live delivery; 0.33.0 only after a delivery that found it
positive).

Configuration h4-stream: resumable stop without the safe-frontier rollback (#35755, #50692)
  runner v1; events stream; faults none;
  profile h4-stream-no-rollback; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: counter-nonnegative (vLLM 0.32.0: async_scheduler.py:69-71), at step 7.

step  event               picks                               what changes
   0  init                prompt_len=[1] resumable=[True]
   1  stream_update       new_tokens=2                        r0: update F->T
   2  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 0 + 1 = 1 < Nr = 1? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->1
                                                              r0: Nr 0->2
                                                              in flight 0->1
   3  schedule            budget=2 accepted=[1]               r0: scheduled 2, reserved 2, runner returns 2
                                                              r0: runner rule c + n = 1 + 2 = 3 < Nr = 2? no -> samples
                                                              r0: c 1->3, P 1->3, F 1->3, Nr 2->3
                                                              in flight 1->2
   4  deliver             stop=[1]                            delivers the output of step 2
                                                              r0: status RUNNING->WAITING, L 1->4, T 1->4, P 3->2, F 3->2
                                                              r0: drafts 1->0, update T->F
                                                              in flight 2->1
   5  schedule            budget=2                            r0: scheduled 2, reserved 0, runner returns 1
                                                              r0: runner rule c + n = 3 + 2 = 5 < Nr = 4? no -> samples
                                                              r0: status WAITING->RUNNING, c 3->5, F 2->4, X F->T, Nr 3->5
                                                              in flight 1->2
                                                              VIOLATES predicates-agree
   6  deliver             stop=[1]                            delivers the output of step 3
                                                              r0: status RUNNING->WAITING_FOR_STREAMING_REQ, T 4->5, P 2->1, F 4->2
                                                              in flight 2->1
   7  deliver                                                 delivers the output of step 5
                                                              r0: T 5->6, c 5->4, P 1->-1, F 2->0
                                                              in flight 1->0
                                                              VIOLATES no-token-while-prefilling
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  h4-stream-no-rollback CRASH at step 7: `assert request.num_output_placeholders >= 0` fires
                      violated: counter-nonnegative at step 7; predicates-agree at 5; placeholder-accounting at 6; no-token-while-prefilling at 7
                      runs 7 step(s)
  vllm-0.32.0         holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 5 step(s)
  vllm-0.32.0+clamp   holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 5 step(s)
  vllm-0.32.0+guard   holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 5 step(s)
  vllm-0.33.0         holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 5 step(s)
  vllm-0.33.0+clamp   holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 5 step(s)
  vllm-0.33.0+guard   holds: no assert fires, nothing is violated
                      counter-nonnegative holds on this arm
                      runs 5 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/h4_stream_no_rollback/test_h4_stream__counter_nonnegative.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/h4-stream/counter-nonnegative.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='h4_stream__counter_nonnegative',
    config={'name': 'h4-stream', 'runner': 'v1', 'events': ['stream'], 'faults': [], 'profile': 'h4-stream-no-rollback', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1], 'resumable': [True]},
    steps=(
        ('stream_update', {'req': 0, 'new_tokens': 2}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('schedule', {'budget': 2, 'accepted': [1]}),
        ('deliver', {'stop': [1]}),
        ('schedule', {'budget': 2, 'accepted': [0]}),
        ('deliver', {'stop': [1]}),
        ('deliver', {'stop': [0]}),
    ),
    kind='violation',
    property='counter-nonnegative',
    arms={
        'h4-stream-no-rollback': ({'profile': 'h4-stream-no-rollback', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=('placeholders-nonnegative', 7), violations=(7,), others=(('predicates-agree', 5), ('placeholder-accounting', 6), ('no-token-while-prefilling', 7)), dropped=0, completed=False)),
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/h4_stream_no_rollback/test_h4_stream__counter_nonnegative.py',
)


def test_h4_stream__counter_nonnegative(target):
    check_case(CASE, target)

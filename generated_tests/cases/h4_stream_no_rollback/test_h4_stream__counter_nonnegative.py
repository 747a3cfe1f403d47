"""With v1 and h4-stream-no-rollback, session-stop, stream_update violates counter-
nonnegative at step 7. The property: vLLM's assert num_output_placeholders >= 0 after
a live delivery never fires.

Configuration h4-stream: resumable stop without the safe-frontier rollback (#35755, #50692)
  runner v1; events stream; faults none;
  profile h4-stream-no-rollback; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: counter-nonnegative (async:69-71), at step 7.

step  event               picks                           what changes
   0  init                prompt_len=[1] resumable=[True]
   1  schedule            budget=1                        r0: scheduled 1, reserved 1, runner returns 1
                                                          r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->1
                                                          r0: Nr 0->2
                                                          in flight 0->1
   2  stream_update       new_tokens=2                    r0: update F->T
   3  schedule            budget=2 accepted=[1]           r0: scheduled 2, reserved 2, runner returns 2
                                                          r0: c 1->3, P 1->3, F 1->3, Nr 2->3
                                                          in flight 1->2
   4  deliver             stop=[1]                        r0: status RUNNING->WAITING, L 1->4, T 1->4, P 3->2, F 3->2
                                                          r0: drafts 1->0, update T->F
                                                          in flight 2->1
   5  schedule            budget=2                        r0: scheduled 2, reserved 0, runner returns 1
                                                          r0: status WAITING->RUNNING, c 3->5, F 2->4, X F->T, Nr 3->5
                                                          in flight 1->2
                                                          VIOLATES predicates-agree
   6  deliver             stop=[1]                        r0: status RUNNING->WAITING_FOR_STREAMING_REQ, T 4->5, P 2->1, F 4->2
                                                          in flight 2->1
   7  deliver                                             r0: T 5->6, c 5->4, P 1->-1, F 2->0
                                                          in flight 1->0
                                                          VIOLATES counter-nonnegative, no-token-while-prefilling
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm:
  h4-stream-no-rollback runs 7 step(s); vLLM's assert for counter-nonnegative fires at step 7; violated at step(s) 7
  vllm-0.32.0        runs 5 step(s); no violation
  vllm-0.32.0+clamp  runs 5 step(s); no violation

Replay:      .venv/bin/python -m pytest generated_tests/cases/h4_stream_no_rollback/test_h4_stream__counter_nonnegative.py --target=reference,vllm,vllm-clamp,kernel
Regenerate:  make generate    (from build/prove/traces/h4-stream/counter-nonnegative.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='h4_stream__counter_nonnegative',
    config={'name': 'h4-stream', 'runner': 'v1', 'events': ['stream'], 'faults': [], 'profile': 'h4-stream-no-rollback', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1], 'resumable': [True]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('stream_update', {'req': 0, 'new_tokens': 2}),
        ('schedule', {'budget': 2, 'accepted': [1]}),
        ('deliver', {'stop': [1]}),
        ('schedule', {'budget': 2, 'accepted': [0]}),
        ('deliver', {'stop': [1]}),
        ('deliver', {'stop': [0]}),
    ),
    kind='violation',
    property='counter-nonnegative',
    arms={
        'h4-stream-no-rollback': ({'clamp': False}, Expect(runs=7, fired=('counter-nonnegative', 7), violations=(7,), dropped=0, completed=False)),
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False}, Expect(runs=5, fired=None, violations=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True}, Expect(runs=5, fired=None, violations=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/h4_stream_no_rollback/test_h4_stream__counter_nonnegative.py',
)


def test_h4_stream__counter_nonnegative(target):
    check_case(CASE, target)

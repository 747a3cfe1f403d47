"""With v1 and h4-stream-no-rollback, session-stop, stream_update violates predicates-
agree at step 5. The property: the runner samples a scheduled request iff the
scheduler reserved placeholders for it (runner discard <=> is_prefill_chunk).

Configuration h4-stream: resumable stop without the safe-frontier rollback (#35755, #50692)
  runner v1; events stream; faults none;
  profile h4-stream-no-rollback; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: predicates-agree (vLLM 0.32.0: scheduler.py:1634-1636, async_scheduler.py:34-47, gpu_model_runner.py:2053-2060, input_batch.py:507-533), at step 5.

step  event               picks                               what changes
   0  init                prompt_len=[1] resumable=[True]
   1  stream_update       new_tokens=1                        r0: update F->T
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
                                                              r0: status RUNNING->WAITING, L 1->3, T 1->3, P 3->2, F 3->2
                                                              r0: drafts 1->0, update T->F
                                                              in flight 2->1
   5  schedule            budget=1                            r0: status WAITING->RUNNING, X F->T, Nr 3->4
                                                              in flight 1->2
                                                              VIOLATES predicates-agree, scheduled-tokens-positive
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  h4-stream-no-rollback CRASH at step 5: `assert num_new_tokens > 0` fires
                      violated: predicates-agree at step 5; scheduled-tokens-positive at 5
                      runs 5 step(s)
  vllm-0.32.0         holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 5 step(s)
  vllm-0.32.0+clamp   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 5 step(s)
  vllm-0.32.0+guard   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 5 step(s)
  vllm-0.33.0         holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 5 step(s)
  vllm-0.33.0+clamp   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 5 step(s)
  vllm-0.33.0+guard   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 5 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/h4_stream_no_rollback/test_h4_stream__predicates_agree.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/h4-stream/predicates-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='h4_stream__predicates_agree',
    config={'name': 'h4-stream', 'runner': 'v1', 'events': ['stream'], 'faults': [], 'profile': 'h4-stream-no-rollback', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1], 'resumable': [True]},
    steps=(
        ('stream_update', {'req': 0, 'new_tokens': 1}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('schedule', {'budget': 2, 'accepted': [1]}),
        ('deliver', {'stop': [1]}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
    ),
    kind='violation',
    property='predicates-agree',
    arms={
        'h4-stream-no-rollback': ({'profile': 'h4-stream-no-rollback', 'clamp': False, 'guard': 'none'}, Expect(runs=5, fired=('admission-tokens-positive', 5), violations=(5,), others=(('scheduled-tokens-positive', 5),), dropped=0, completed=False)),
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=5, fired=None, violations=(), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/h4_stream_no_rollback/test_h4_stream__predicates_agree.py',
)


def test_h4_stream__predicates_agree(target):
    check_case(CASE, target)

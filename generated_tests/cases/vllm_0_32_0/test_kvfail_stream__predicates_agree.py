"""With v1 and vllm-0.32.0, kv-load-failure, session-stop, stream_update violates
predicates-agree at step 7. The property: the runner samples a scheduled request iff
the scheduler reserved placeholders for it (runner discard <=> is_prefill_chunk).

Configuration kvfail-stream@0.32.0: KV-load failure on a streaming session: the stop lands below the prompt
  runner v1; events kvfail, stream; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: predicates-agree (vLLM 0.32.0: scheduler.py:1634-1636, async_scheduler.py:34-47, gpu_model_runner.py:2053-2060, input_batch.py:507-533), at step 7.

step  event               picks                               what changes
   0  init                prompt_len=[16] resumable=[True]
   1  schedule            budget=15                           r0: scheduled 15, reserved 0, runner returns 0
                                                              r0: runner rule c + n = 0 + 15 = 15 < Nr = 16? yes -> discards
                                                              r0: status WAITING->RUNNING, c 0->15, F 0->15, X F->T, Nr 0->16
                                                              in flight 0->1
   2  stream_update       new_tokens=1                        r0: update F->T
   3  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 15 + 1 = 16 < Nr = 16? no -> samples
                                                              r0: c 15->16, P 0->1, F 15->16, X T->F, drafts 0->1
                                                              r0: Nr 16->17
                                                              in flight 1->2
   4  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 16->0, F 16->1
                                                              in flight 2->1
   5  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 0
                                                              r0: runner rule c + n = 0 + 1 = 1 < Nr = 17? yes -> discards
                                                              r0: c 0->1, F 1->2, X F->T, drafts 1->0
                                                              in flight 1->2
   6  deliver             stop=[1]                            delivers the output of step 3
                                                              r0: status RUNNING->WAITING, L 16->17, T 16->2, P 1->0, F 2->1
                                                              r0: S 0->1, D F->T, update T->F
                                                              in flight 2->1
   7  schedule            budget=2                            r0: scheduled 2, reserved 2, runner returns 0
                                                              r0: runner rule c + n = 1 + 2 = 3 < Nr = 17? yes -> discards
                                                              r0: status WAITING->RUNNING, c 1->3, P 0->2, F 1->3, X T->F
                                                              r0: drafts 0->1
                                                              in flight 1->2
                                                              VIOLATES predicates-agree
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: predicates-agree at step 7
                      runs 7 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: predicates-agree at step 7
                      runs 7 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: predicates-agree at step 7
                      runs 7 step(s)
  vllm-0.33.0         holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 7 step(s)
  vllm-0.33.0+clamp   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 7 step(s)
  vllm-0.33.0+guard   holds: no assert fires, nothing is violated
                      predicates-agree holds on this arm
                      runs 7 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_kvfail_stream__predicates_agree.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/kvfail-stream@0.32.0/predicates-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='kvfail_stream__predicates_agree',
    config={'name': 'kvfail-stream@0.32.0', 'runner': 'v1', 'events': ['kvfail', 'stream'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16], 'resumable': [True]},
    steps=(
        ('schedule', {'budget': 15, 'accepted': [0]}),
        ('stream_update', {'req': 0, 'new_tokens': 1}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [1], 'kv_fail_req': -1, 'kv_fail_block': 0}),
        ('schedule', {'budget': 2, 'accepted': [0]}),
    ),
    kind='violation',
    property='predicates-agree',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(7,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(7,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(7,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=7, fired=None, violations=(), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=7, fired=None, violations=(), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_kvfail_stream__predicates_agree.py',
)


def test_kvfail_stream__predicates_agree(target):
    check_case(CASE, target)

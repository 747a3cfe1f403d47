"""With v1 and vllm-0.33.0, kv-load-failure, session-stop violates safe-frontier-
nonnegative at step 5. The property: vLLM's assert safe_frontier >= 0 on a resumable
stop never fires.

Configuration kvfail-stream@0.33.0: KV-load failure on a streaming session: the stop still lands below the computed history; the runner's disagreement of 0.32.0 (7 steps) is not found within 8
  runner v1; events kvfail, stream; faults none;
  profile vllm-0.33.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: safe-frontier-nonnegative (vLLM 0.33.0: scheduler.py:2724-2726), at step 5.

step  event               picks                               what changes
   0  init                prompt_len=[16] resumable=[True]
   1  schedule            budget=16                           r0: scheduled 16, reserved 1, runner returns 1
                                                              r0: runner rule c + n = 0 + 16 = 16 < Nr = 16? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->16, P 0->1, F 0->16, drafts 0->1
                                                              r0: Nr 0->17
                                                              in flight 0->1
   2  schedule            budget=2 accepted=[1]               r0: scheduled 2, reserved 2, runner returns 2
                                                              r0: runner rule c + n = 16 + 2 = 18 < Nr = 17? no -> samples
                                                              r0: c 16->18, P 1->3, F 16->18, Nr 17->18
                                                              in flight 1->2
   3  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 18->0, F 18->2
                                                              in flight 2->1
   4  schedule            budget=1                            r0: scheduled 1, reserved 0, runner returns 0
                                                              r0: runner rule c + n = 0 + 1 = 1 < Nr = 19? yes -> discards
                                                              r0: c 0->1, F 2->3, X F->T, drafts 1->0, Nr 18->19
                                                              in flight 1->2
   5  deliver             stop=[1]                            delivers the output of step 2
                                                              r0: status RUNNING->WAITING_FOR_STREAMING_REQ, T 16->17, c 1->-1, P 3->0, F 3->1
                                                              r0: S 0->1, D F->T
                                                              in flight 2->1
                                                              VIOLATES safe-frontier-nonnegative
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         CRASH at step 5: `assert safe_frontier >= 0` fires
                      violated: safe-frontier-nonnegative at step 5; placeholder-accounting at 3; computed-nonnegative at 5
                      runs 5 step(s)
  vllm-0.32.0+clamp   CRASH at step 5: `assert safe_frontier >= 0` fires
                      violated: safe-frontier-nonnegative at step 5; placeholder-accounting at 3; computed-nonnegative at 5
                      runs 5 step(s)
  vllm-0.32.0+guard   CRASH at step 5: `assert safe_frontier >= 0` fires
                      violated: safe-frontier-nonnegative at step 5; placeholder-accounting at 3; computed-nonnegative at 5
                      runs 5 step(s)
  vllm-0.33.0         CRASH at step 5: `assert safe_frontier >= 0` fires
                      violated: safe-frontier-nonnegative at step 5; placeholder-accounting at 3; computed-nonnegative at 5
                      runs 5 step(s)
  vllm-0.33.0+clamp   CRASH at step 5: `assert safe_frontier >= 0` fires
                      violated: safe-frontier-nonnegative at step 5; placeholder-accounting at 3; computed-nonnegative at 5
                      runs 5 step(s)
  vllm-0.33.0+guard   CRASH at step 5: `assert safe_frontier >= 0` fires
                      violated: safe-frontier-nonnegative at step 5; placeholder-accounting at 3; computed-nonnegative at 5
                      runs 5 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_33_0/test_kvfail_stream__safe_frontier_nonnegative.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/kvfail-stream@0.33.0/safe-frontier-nonnegative.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='kvfail_stream__safe_frontier_nonnegative',
    config={'name': 'kvfail-stream@0.33.0', 'runner': 'v1', 'events': ['kvfail', 'stream'], 'faults': [], 'profile': 'vllm-0.33.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16], 'resumable': [True]},
    steps=(
        ('schedule', {'budget': 16, 'accepted': [0]}),
        ('schedule', {'budget': 2, 'accepted': [1]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [1], 'kv_fail_req': -1, 'kv_fail_block': 0}),
    ),
    kind='violation',
    property='safe-frontier-nonnegative',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=5, fired=('safe-frontier-nonnegative', 5), violations=(5,), others=(('placeholder-accounting', 3), ('computed-nonnegative', 5)), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=5, fired=('safe-frontier-nonnegative', 5), violations=(5,), others=(('placeholder-accounting', 3), ('computed-nonnegative', 5)), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=5, fired=('safe-frontier-nonnegative', 5), violations=(5,), others=(('placeholder-accounting', 3), ('computed-nonnegative', 5)), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=5, fired=('safe-frontier-nonnegative', 5), violations=(5,), others=(('placeholder-accounting', 3), ('computed-nonnegative', 5)), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=5, fired=('safe-frontier-nonnegative', 5), violations=(5,), others=(('placeholder-accounting', 3), ('computed-nonnegative', 5)), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=5, fired=('safe-frontier-nonnegative', 5), violations=(5,), others=(('placeholder-accounting', 3), ('computed-nonnegative', 5)), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_33_0/test_kvfail_stream__safe_frontier_nonnegative.py',
)


def test_kvfail_stream__safe_frontier_nonnegative(target):
    check_case(CASE, target)

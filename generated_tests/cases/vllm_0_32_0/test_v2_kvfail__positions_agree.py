"""With v2 and vllm-0.32.0, kv-load-failure violates positions-agree at step 4. The
property: the V2 runner computes a scheduled request's tokens from the scheduler's
position: the slot's GPU num_computed_tokens equals the scheduler's
num_computed_tokens less the drafts of in-flight steps still to be rejected.

Configuration v2-kvfail@0.32.0: V2: a recompute after a KV-load failure re-prefills below prefill_len
  runner v2; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: positions-agree (vLLM 0.32.0: input_batch.py:611-614, states.py:106-115, scheduler.py:2110-2128, scheduler.py:3313-3315), at step 4.

step  event               picks                               what changes
   0  init                prompt_len=[16]
   1  schedule            budget=15                           r0: scheduled 15, reserved 0, runner returns 0
                                                              r0: runner rule g + n = 0 + 15 = 15 < prefill_len = 16? yes -> discards
                                                              r0: status WAITING->RUNNING, c 0->15, F 0->15, X F->T, g 0->15
                                                              r0: pl 0->16, tl 0->16
                                                              in flight 0->1
   2  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 15 + 1 = 16 < prefill_len = 16? no -> samples
                                                              r0: c 15->16, P 0->1, F 15->16, X T->F, drafts 0->1
                                                              r0: g 15->16, tl 16->17
                                                              in flight 1->2
   3  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 16->0, F 16->1
                                                              in flight 2->1
   4  schedule            budget=18 accepted=[1]              r0: scheduled 18, reserved 2, runner returns 2
                                                              r0: runner rule g + n = 16 + 18 = 34 < prefill_len = 16? no -> samples
                                                              r0: c 0->18, P 1->3, F 1->19, g 16->34, tl 17->19
                                                              in flight 1->2
                                                              VIOLATES positions-agree
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: positions-agree at step 4
                      runs 4 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: positions-agree at step 4
                      runs 4 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: positions-agree at step 4
                      runs 4 step(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: positions-agree at step 4
                      runs 4 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: positions-agree at step 4
                      runs 4 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: positions-agree at step 4
                      runs 4 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_kvfail__positions_agree.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v2-kvfail@0.32.0/positions-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_kvfail__positions_agree',
    config={'name': 'v2-kvfail@0.32.0', 'runner': 'v2', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 15, 'accepted': [0]}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
        ('schedule', {'budget': 18, 'accepted': [1]}),
    ),
    kind='violation',
    property='positions-agree',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=4, fired=None, violations=(4,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=4, fired=None, violations=(4,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=4, fired=None, violations=(4,), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_kvfail__positions_agree.py',
)


def test_v2_kvfail__positions_agree(target):
    check_case(CASE, target)

"""With v2 and vllm-0.32.0, kv-load-failure violates placeholder-accounting at step 3.
The property: an unfinished request's placeholders equal the reservations of its in-
flight steps scheduled since its last preemption or resumable stop.

Configuration v2-kvfail@0.32.0: V2: a recompute after a KV-load failure re-prefills below prefill_len
  runner v2; events kvfail; faults none;
  profile vllm-0.32.0; clamp off; 1 request(s), pp 1, 1 draft token(s) per step
Violated: placeholder-accounting (vLLM 0.32.0: async_scheduler.py:34-47, async_scheduler.py:69-71, scheduler.py:1603-1607, scheduler.py:2472-2474), at step 3.

step  event               picks                               what changes
   0  init                prompt_len=[16]
   1  schedule            budget=16                           r0: scheduled 16, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 0 + 16 = 16 < prefill_len = 16? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->16, P 0->1, F 0->16, drafts 0->1
                                                              r0: g 0->16, pl 0->16, tl 0->17
                                                              in flight 0->1
   2  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 16 + 1 = 17 < prefill_len = 16? no -> samples
                                                              r0: c 16->17, P 1->2, F 16->17, g 16->17, tl 17->18
                                                              in flight 1->2
   3  deliver             kv_fail_req=0                       delivers the output of step 1
                                                              r0: c 17->0, F 17->1
                                                              in flight 2->1
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: placeholder-accounting at step 3
                      runs 3 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: placeholder-accounting at step 3
                      runs 3 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: placeholder-accounting at step 3
                      runs 3 step(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: placeholder-accounting at step 3
                      runs 3 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: placeholder-accounting at step 3
                      runs 3 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: placeholder-accounting at step 3
                      runs 3 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_kvfail__placeholder_accounting.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v2-kvfail@0.32.0/placeholder-accounting.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_kvfail__placeholder_accounting',
    config={'name': 'v2-kvfail@0.32.0', 'runner': 'v2', 'events': ['kvfail'], 'faults': [], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 1, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [16]},
    steps=(
        ('schedule', {'budget': 16, 'accepted': [0]}),
        ('schedule', {'budget': 1, 'accepted': [0]}),
        ('deliver', {'stop': [0], 'kv_fail_req': 0, 'kv_fail_block': 0}),
    ),
    kind='violation',
    property='placeholder-accounting',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_kvfail__placeholder_accounting.py',
)


def test_v2_kvfail__placeholder_accounting(target):
    check_case(CASE, target)

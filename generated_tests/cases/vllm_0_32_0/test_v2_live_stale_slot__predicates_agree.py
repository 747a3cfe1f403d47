"""With v2-live and vllm-0.32.0, stale-slot-read violates predicates-agree at step 1. The
property: the runner samples a scheduled request iff the scheduler reserved
placeholders for it (runner discard <=> is_prefill_chunk).

Configuration v2-live-stale-slot@0.32.0: the live-length fix under stale slot reads
  runner v2-live; events abort; faults stale-slot-read;
  profile vllm-0.32.0; clamp off; 2 request(s), pp 1, 1 draft token(s) per step
Violated: predicates-agree (vLLM 0.32.0: scheduler.py:1634-1636, async_scheduler.py:34-47, gpu_model_runner.py:2053-2060, input_batch.py:507-533), at step 1.

step  event               picks                               what changes
   0  init                prompt_len=[2, 1]
   1  schedule            budget=1 stale_read=[True, False]   r0: scheduled 1, reserved 0, runner returns 1
                                                              r0: runner rule g + n = 0 + 1 = 1 < total_len = 0? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->1, F 0->1, X F->T, slot 0->1
                                                              r0: g 0->1, tl 0->1
                                                              in flight 0->1
                                                              VIOLATES predicates-agree
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: predicates-agree at step 1
                      runs 1 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: predicates-agree at step 1
                      runs 1 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: predicates-agree at step 1
                      runs 1 step(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: predicates-agree at step 1
                      runs 1 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: predicates-agree at step 1
                      runs 1 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: predicates-agree at step 1
                      runs 1 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_live_stale_slot__predicates_agree.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v2-live-stale-slot@0.32.0/predicates-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_live_stale_slot__predicates_agree',
    config={'name': 'v2-live-stale-slot@0.32.0', 'runner': 'v2-live', 'events': ['abort'], 'faults': ['stale-slot-read'], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 2, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [2, 1]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [True, False]}),
    ),
    kind='violation',
    property='predicates-agree',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=1, fired=None, violations=(1,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=1, fired=None, violations=(1,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=1, fired=None, violations=(1,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=1, fired=None, violations=(1,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=1, fired=None, violations=(1,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=1, fired=None, violations=(1,), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_live_stale_slot__predicates_agree.py',
)


def test_v2_live_stale_slot__predicates_agree(target):
    check_case(CASE, target)

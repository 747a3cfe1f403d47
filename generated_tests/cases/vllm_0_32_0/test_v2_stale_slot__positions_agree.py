"""With v2 and vllm-0.32.0, abort, stale-slot-read violates positions-agree at step 3.
The property: the V2 runner computes a scheduled request's tokens from the scheduler's
position: the slot's GPU num_computed_tokens equals the scheduler's
num_computed_tokens less the drafts of in-flight steps still to be rejected.

Configuration v2-stale-slot@0.32.0: V2 reading its slot as the previous occupant left it (CC / UVA)
  runner v2; events abort; faults stale-slot-read;
  profile vllm-0.32.0; clamp off; 2 request(s), pp 1, 1 draft token(s) per step
Violated: positions-agree (vLLM 0.32.0: input_batch.py:611-614, states.py:106-115, scheduler.py:2110-2128, scheduler.py:3313-3315), at step 3.

step  event               picks                               what changes
   0  init                prompt_len=[1, 1]
   1  schedule            budget=1                            r0: scheduled 1, reserved 1, runner returns 1
                                                              r0: runner rule g + n = 0 + 1 = 1 < prefill_len = 1? no -> samples
                                                              r0: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->1
                                                              r0: slot 0->1, g 0->1, pl 0->1, tl 0->2
                                                              in flight 0->1
   2  abort                                                   r0: status RUNNING->FINISHED
   3  schedule            budget=1 stale_read=[False, True]   r1: scheduled 1, reserved 1, runner returns 1
                                                              r1: runner rule g + n = 1 + 1 = 2 < prefill_len = 1? no -> samples
                                                              r1: status WAITING->RUNNING, c 0->1, P 0->1, F 0->1, drafts 0->1
                                                              r1: slot 0->1, g 0->2, pl 0->1, tl 0->3
                                                              in flight 1->2
                                                              VIOLATES positions-agree
(L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len)

What the model predicts on each arm (vLLM's reaction: CRASH = an assert kills the
engine; SILENT = the violation passes unnoticed):
  vllm-0.32.0         SILENT: no assert fires
                      violated: positions-agree at step 3
                      runs 3 step(s)
  vllm-0.32.0+clamp   SILENT: no assert fires
                      violated: positions-agree at step 3
                      runs 3 step(s)
  vllm-0.32.0+guard   SILENT: no assert fires
                      violated: positions-agree at step 3
                      runs 3 step(s)
  vllm-0.33.0         SILENT: no assert fires
                      violated: positions-agree at step 3
                      runs 3 step(s)
  vllm-0.33.0+clamp   SILENT: no assert fires
                      violated: positions-agree at step 3
                      runs 3 step(s)
  vllm-0.33.0+guard   SILENT: no assert fires
                      violated: positions-agree at step 3
                      runs 3 step(s)

Replay:      .venv/bin/python -m pytest generated_tests/cases/vllm_0_32_0/test_v2_stale_slot__positions_agree.py --target=reference,vllm,vllm-clamp,vllm-guard,kernel
             (add --vllm=0.33.0 for the 0.33.0 arms, SHOW_VLLM_TRACEBACK=1 to see vLLM's own traceback)
Regenerate:  make generate    (from build/prove/traces/v2-stale-slot@0.32.0/positions-agree.itf.json; generated, do not edit)
"""

from targets.harness import Case, Expect, check_case

CASE = Case(
    name='v2_stale_slot__positions_agree',
    config={'name': 'v2-stale-slot@0.32.0', 'runner': 'v2', 'events': ['abort'], 'faults': ['stale-slot-read'], 'profile': 'vllm-0.32.0', 'clamp': False, 'requests': 2, 'pp': 1, 'spec_tokens': 1, 'max_budget': None, 'prompt_lens': None, 'long_prefill_threshold': 0, 'block_size': 16},
    init={'prompt_len': [1, 1]},
    steps=(
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [False, False]}),
        ('abort', {'req': 0}),
        ('schedule', {'budget': 1, 'accepted': [0, 0], 'stale_read': [False, True]}),
    ),
    kind='violation',
    property='positions-agree',
    arms={
        'vllm-0.32.0': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+clamp': ({'profile': 'vllm-0.32.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.32.0+guard': ({'profile': 'vllm-0.32.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+clamp': ({'profile': 'vllm-0.33.0', 'clamp': True, 'guard': 'none'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
        'vllm-0.33.0+guard': ({'profile': 'vllm-0.33.0', 'clamp': False, 'guard': 'step-reservation'}, Expect(runs=3, fired=None, violations=(3,), others=(), dropped=0, completed=False)),
    },
    path='generated_tests/cases/vllm_0_32_0/test_v2_stale_slot__positions_agree.py',
)


def test_v2_stale_slot__positions_agree(target):
    check_case(CASE, target)

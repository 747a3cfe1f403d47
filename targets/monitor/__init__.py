"""The contract monitor, which runs inside vLLM's process: its scheduler_cls (scheduler.py;
public path vllm_contract.monitor), its recording and checks (core.py), the window's records
(records.py), the window as a trace (trace.py) and its files, written off the step
(writer.py). It reads vLLM through the adapter and knows nothing of the replay targets."""

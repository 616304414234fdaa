# The two commands of the README. Each bootstraps .venv with pip when it is missing or
# older than pyproject.toml, so both work on a fresh machine with nothing installed by hand.
# `make demo` installs what murmur-door runs on; `make test` adds the test tools.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
STAMP := $(VENV)/.installed

# PYTHON must be 3.11 or later on Linux; a .venv made by another Python is made afresh.
VENV_PROBLEM := $(shell sh scripts/venv_python.sh "$(PYTHON)" "$(VENV)")
ifneq ($(VENV_PROBLEM),)
$(error $(VENV_PROBLEM))
endif

.PHONY: demo test lint typecheck pytest bench soak clean js-agents litellm image test-containers loadtest frameworks test-frameworks

$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "installing murmur-door into $(VENV) (log: $(VENV)/install.log)"
	@$(BIN)/pip install --upgrade pip > $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@$(BIN)/pip install -e . >> $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@# An editable install compiles nothing; every member would otherwise compile ~45
	@# modules at start (0.15-0.27 s of CPU each; loadtests/bench_launch.py).
	@$(BIN)/python -m compileall -q gateway launcher >> $(VENV)/install.log 2>&1
	touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	@echo "installing the test tools into $(VENV) (log: $(VENV)/install.log)"
	@$(BIN)/pip install -e '.[test]' >> $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	touch $(STAMP)

demo: $(RUNTIME)
	$(BIN)/python -m launcher.demo

test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check gateway launcher tests loadtests

typecheck: $(STAMP)
	$(BIN)/mypy --strict gateway launcher

pytest: $(STAMP) js-agents litellm
	$(BIN)/pytest -q

# The Node test agent's packages (tests/agents/js), reinstalled when package-lock.json is
# newer than the stamp. Without npm its tests skip, saying so; that is not a failure.
JS_AGENTS := tests/agents/js
JS_STAMP := $(JS_AGENTS)/node_modules/.installed

js-agents:
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory $(JS_STAMP); \
	else echo "npm not found: the @a2a-js/sdk test agent is not installed (its tests skip)"; fi

$(JS_STAMP): $(JS_AGENTS)/package-lock.json
	@if npm ci --no-audit --no-fund --prefix $(JS_AGENTS) > $(JS_AGENTS)/npm.log 2>&1; \
	then touch $(JS_STAMP); else tail -5 $(JS_AGENTS)/npm.log; \
	echo "npm ci failed: the @a2a-js/sdk test agent is not installed (its tests skip)"; fi

# LiteLLM's proxy, a real OpenAI-compatible server from PyPI that serves mock answers
# offline, for tests/integration/test_model_litellm.py. In a venv of its own: it pins
# versions of its own (about 750 MB, a minute to install, once). Reinstalled when the pin
# changes. Where the install fails its tests skip, saying so; that is not a failure.
LITELLM_VENV := .venv-litellm
LITELLM_PIN := tests/support/litellm-requirements.txt
LITELLM_STAMP := $(LITELLM_VENV)/.installed

litellm:
	@$(MAKE) --no-print-directory $(LITELLM_STAMP) || \
	echo "litellm could not be installed: tests/integration/test_model_litellm.py skips"

$(LITELLM_STAMP): $(LITELLM_PIN)
	@echo "installing LiteLLM's proxy into $(LITELLM_VENV) for the model member tests (log: $(LITELLM_VENV)/install.log)"
	@$(PYTHON) -m venv $(LITELLM_VENV)
	@$(LITELLM_VENV)/bin/pip install -r $(LITELLM_PIN) > $(LITELLM_VENV)/install.log 2>&1 \
	|| (tail -5 $(LITELLM_VENV)/install.log; exit 1)
	@touch $(LITELLM_STAMP)

# Agents from other frameworks (tests/agents/frameworks/NAME: a server on an offline
# model and its pinned requirements), each in a virtual environment of its own OUTSIDE
# the checkout and every path the sandbox grants, as a user installs a framework: the
# tests run them confined from there (docs/frameworks/). Cached between runs; a venv is
# remade when its requirements change. One that cannot be installed is said, and its
# tests skip saying so.
FRAMEWORKS := pydantic_ai adk adk_v03 strands crewai maf beeai
FRAMEWORK_VENVS ?= $(HOME)/.cache/murmur-door/frameworks

frameworks:
	@for name in $(FRAMEWORKS); do \
	$(MAKE) --no-print-directory $(FRAMEWORK_VENVS)/$$name/.installed || \
	echo "$$name could not be installed: its tests in tests/frameworks skip"; done

$(FRAMEWORK_VENVS)/%/.installed: tests/agents/frameworks/%/requirements.txt
	@echo "installing the $* framework agent into $(FRAMEWORK_VENVS)/$* (log: install.log there)"
	@rm -rf $(FRAMEWORK_VENVS)/$* && mkdir -p $(FRAMEWORK_VENVS)
	@$(PYTHON) -m venv $(FRAMEWORK_VENVS)/$*
	@$(FRAMEWORK_VENVS)/$*/bin/pip install --disable-pip-version-check -r $< \
	> $(FRAMEWORK_VENVS)/$*/install.log 2>&1 || (tail -5 $(FRAMEWORK_VENVS)/$*/install.log; exit 1)
	@touch $@

# The framework agents' tests (tests/frameworks), confined, each from its own venv.
test-frameworks: $(STAMP) frameworks
	MURMUR_FRAMEWORK_TESTS=1 MURMUR_FRAMEWORK_VENVS=$(FRAMEWORK_VENVS) $(BIN)/pytest -q tests/frameworks

# The loadtest extra (locust, matplotlib), installed into .venv once.
LOADTEST_STAMP := $(VENV)/.loadtest-installed

$(LOADTEST_STAMP): $(STAMP)
	@echo "installing the loadtest extra (locust, matplotlib) into $(VENV)"
	@$(BIN)/pip install -e '.[loadtest]' >> $(VENV)/install.log 2>&1 || (tail -20 $(VENV)/install.log; exit 1)
	touch $(LOADTEST_STAMP)

# locust, headless, against a real formation: 1, 4, 16 and 32 users for 12 s each, for
# the door and for token verification (about 2 minutes); results and PNG plots under
# loadtests/results/ (docs/loadtests.md).
loadtest: $(LOADTEST_STAMP)
	$(BIN)/python loadtests/run_loadtest.py

# Benchmarks (ratios measured in one run; results and plots under loadtests/results/).
# Not tests.
bench: $(LOADTEST_STAMP)
	$(BIN)/python -m compileall -q gateway launcher
	$(BIN)/python loadtests/bench_tokens.py
	$(BIN)/python loadtests/bench_auth.py
	$(BIN)/python loadtests/bench_door.py
	$(BIN)/python loadtests/bench_proxy.py
	$(BIN)/python loadtests/bench_launch.py
	$(BIN)/python loadtests/bench_gateway.py
	$(BIN)/python loadtests/bench_model.py
	$(BIN)/python loadtests/bench_grpc.py
	$(BIN)/python loadtests/plots.py
	$(BIN)/python loadtests/summary.py

# A formation with a busy callee and three callers, 10,000 calls (bounded by --deadline);
# then 10,000 calls to a callee killed with SIGKILL every 3 s (docs/restarts.md).
soak: $(STAMP)
	$(BIN)/python loadtests/soak_formation.py
	$(BIN)/python loadtests/soak_faults.py

clean:
	rm -rf $(VENV) $(LITELLM_VENV) .pytest_cache .mypy_cache .ruff_cache

# The container image (docker/Dockerfile): a wheelhouse made here first, so the build
# needs no network. BASE_IMAGE: any image with a Python 3.11 that makes venvs; where it
# cannot be had (no registry), docker/base-image.sh makes a Debian one with mmdebstrap.
IMAGE ?= murmur-door:latest
BASE_IMAGE ?= python:3.11-slim

image: $(STAMP)
	rm -f docker/wheelhouse/*.whl
	$(BIN)/pip wheel --quiet --wheel-dir docker/wheelhouse '.[grpc]' dumb-init
	base=$$(sh docker/base-image.sh $(BASE_IMAGE)) && \
		docker build --file docker/Dockerfile --build-arg BASE_IMAGE=$$base --tag $(IMAGE) .

# Tests that run real containers (tests/containers/); they skip, saying why, where no
# engine runs. `.ci/run` starts an engine and runs this target too.
test-containers: $(STAMP)
	MURMUR_CONTAINER_TESTS=1 MURMUR_IMAGE=$(IMAGE) MURMUR_BASE_IMAGE=$(BASE_IMAGE) \
		$(BIN)/pytest -q tests/containers

# Two entry points (see README): `make demo` runs the main job, `make test` the whole suite.
# Both create ./.venv and install the project into it first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
EXTRAS ?= dev,tau2,postgres,ui,ray,mcp,gepa,tracking

TOOLSANDBOX_SRC ?= ../shared/vendor/ToolSandbox

.PHONY: install demo test test-fast lint bench clean toolsandbox-env

install: $(VENV)/.installed

# torch is installed first and pinned: an unpinned torch pulls a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

# The demo needs a running Docker engine: .ci/ensure-docker starts one when run as root.
demo: install
	./.ci/ensure-docker
	$(VENV)/bin/gapforge demo

# pytest exits 5 when it collected no tests; that is not a failure of the suite.
# ToolSandbox lives in a venv of its own (.toolsandbox-venv; its pins conflict with ours). Idempotent (stamp file);
# does nothing when the vendored source is absent, and its tests then skip with the reason.
toolsandbox-env: install
	$(PY) -m gapforge.envs.toolsandbox.install --source $(TOOLSANDBOX_SRC) --if-present

test: install toolsandbox-env
	$(PY) -m pytest -q -ra; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# The inner loop (under 2 min here): everything but the tests that need Docker, PostgreSQL or Ray (marked by the fixture
# they use), the slow list (tests/markers.py) and the external benchmarks' adapters (tau2, toolsandbox). `make test` runs all.
FAST ?= not docker and not postgres and not ray and not slow and not tau2 and not toolsandbox
test-fast: install
	$(PY) -m pytest -q -ra -m "$(FAST)"

# `ruff format` at 120 columns, then ruff's rules (pyproject.toml [tool.ruff]). Fix: $(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .
# The layer contracts (.importlinter) over the installed layout: .ci/lint-imports.
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	PYTHON=$(PY) ./.ci/lint-imports

bench: install
	$(PY) -m bench.sandbox_step
	$(PY) -m bench.rollout_concurrency

clean:
	rm -rf $(VENV) .gapforge .pytest_cache .ruff_cache .toolsandbox-venv

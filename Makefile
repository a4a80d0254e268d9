# railab: `make demo` runs the main job, `make test` the whole suite. Both set up first.
# `make check` is the fast loop (unit and BPF tests, not the lab or slow ones, and the
# strict docs build); `make docs` builds the documentation site into site/.
VENV    := .venv
PY      := $(VENV)/bin/python
RAILAB  := $(VENV)/bin/railab
DEMO_LAB := labs/rail-optimized/rail-optimized.clab.yml

.PHONY: setup test test-unit check docs demo labs clean native

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest -ra --durations=15 tests

test-unit: setup
	$(PY) -m pytest -ra tests/unit

# Markers: every test is `unit`, `bpf` or `lab` (by directory, tests/conftest.py); `slow`
# marks the statistical multi-run ones. tests/unit/test_docs.py runs `mkdocs build --strict`.
check: setup
	$(PY) -m pytest -ra -m "(unit or bpf) and not slow" tests

docs:
	@command -v mkdocs >/dev/null || bash scripts/setup.sh
	mkdocs build --strict --site-dir site

# the native send engine (native/engine, gcc) into its cache; prints the binary's path
native:
	$(PY) -m dataplane.nic.engine

# the demo runs on network namespaces: it needs no containerlab build
demo:
	@bash scripts/setup.sh --core
	@bash scripts/demo.sh $(DEMO_LAB)

labs: setup
	$(PY) scripts/gen_labs.py

clean:
	-$(RAILAB) destroy --all
	rm -rf site

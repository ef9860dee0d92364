# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-daemon corpus corpus-baseline impact impact-baseline install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,cluster]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@echo "== profd-client analyze examples/*.gz (workspace: examples/src)"
	-$(BIN)/profd-client analyze --no-daemon --workspace examples/src --fail-on never \
		examples/seed_n64_bf16.json.gz examples/seed_n4096_bf16.json.gz \
		examples/seed_n64_bf16_compiled.json.gz examples/tinygpt_naive.json.gz \
		examples/tinygpt_tuned.json.gz examples/mlp_eager.1796061140317126347.pt.trace.json.gz

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The linter, the formatter's check and the type checker, as .ci/run runs them ([tool.ruff],
# [tool.mypy] in pyproject.toml). `ruff format .` formats.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python .ci/typecheck.py

bench: $(STAMP)
	$(BIN)/python bench/bench.py --sizes 50,250,1000 $(BENCH_ARGS)
	$(BIN)/python bench/startup.py

bench-daemon: $(STAMP)
	$(BIN)/python bench/daemon_bench.py $(BENCH_ARGS)

# The real-trace corpus (examples/corpus/): per-rule precision/recall and location accuracy.
corpus: $(STAMP)
	$(BIN)/python bench/corpus.py $(CORPUS_ARGS)

# Hold every expectation that passes now (tests/test_corpus.py fails when one of them regresses).
corpus-baseline: $(STAMP)
	$(BIN)/python bench/corpus.py --write-baseline --no-unjudged

clean:
	rm -rf $(VENV) build *.egg-info

# Impact you can trust (bench/impact.toml): predicted vs measured gain of real before/after pairs.
impact: $(STAMP)
	$(BIN)/python bench/impact.py $(IMPACT_ARGS)

impact-baseline: $(STAMP)
	$(BIN)/python bench/impact.py --write-baseline

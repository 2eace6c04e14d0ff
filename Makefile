# recallbench. `make help` lists the targets. Every target creates .venv and installs on first use.
SHELL := /bin/bash
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The exact releases make and CI install (pip freeze of a resolved .[all,test] on Python 3.11); pyproject.toml keeps
# the loose ranges a user's `pip install .` resolves. `make lock` re-resolves them.
LOCK := constraints.txt
ARGS ?=
EMBEDDERS ?=

.DEFAULT_GOAL := help
.PHONY: help sweep test lock report data install clean-cache stores compare tradeoff regress baseline harden load bench labels corpora ray

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c $(LOCK) --upgrade pip
	$(BIN)/python -m pip install -q -c $(LOCK) -e '.[all,test]'
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install recallbench (editable, every store extra, test tools, at the releases of constraints.txt; no-op when done)

# pip is pinned too; setuptools and wheel are left to the venv and to the build (pyproject asks setuptools>=77 there)
lock: ## Re-resolve the newest releases pyproject.toml allows (.[all,test], a scratch venv) and rewrite constraints.txt (review and commit)
	rm -rf .lock-venv
	$(PY) -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q --upgrade pip
	.lock-venv/bin/python -m pip install -q '.[all,test]'
	{ echo "# make lock: pip freeze of .[all,test] on $$(.lock-venv/bin/python -V) ($$(uname -m)); make install and CI install with -c $(LOCK)"; \
	  .lock-venv/bin/python -m pip freeze --all --exclude recallbench --exclude setuptools --exclude wheel; } > $(LOCK).tmp
	mv $(LOCK).tmp $(LOCK)
	rm -rf .lock-venv build

sweep: $(STAMP) ## Run the main sweep (LoCoMo if the data path has it, else the demo corpus) -> reports/latest/; EMBEDDERS=a,b compares embedders
	$(BIN)/recallbench sweep $(if $(EMBEDDERS),-m embedder=$(EMBEDDERS)) $(ARGS)

test: $(STAMP) ## Run the whole test suite (what CI runs); ARGS="-m 'not slow'" skips the slow tests for a quick loop
	$(BIN)/python -m pytest -q $(ARGS)

labels: $(STAMP) ## LoCoMo original vs 2025 label-corrected release (same conversations: label robustness) -> reports/latest/
	$(BIN)/recallbench sweep -m dataset=locomo,locomo_2025 $(ARGS)

corpora: $(STAMP) ## Thresholds that transfer to another corpus: LoCoMo <-> LongMemEval oracle, every family of cuts -> reports/latest/
	$(BIN)/recallbench sweep -m dataset=locomo,longmemeval_oracle experiment=transfer backend=exact $(ARGS)

report: $(STAMP) ## Rebuild report.md and plots of reports/latest (or RUN=reports/runs/<dir>)
	$(BIN)/recallbench report $(or $(RUN),reports/latest)

data: $(STAMP) ## Verify the corpora under the data path; download missing ones when online
	$(BIN)/recallbench data fetch $(ARGS)

clean-cache: ## Delete cached embeddings, traces and store files (derived data only)
	rm -rf reports/cache

stores: $(STAMP) ## Compare every local store and Pinecone via its loopback double (LoCoMo + synthetic 14,726/100k x 384/1536; ARGS=--per-user adds LongMemEval_S's 498 users, a collection each) -> reports/compare/
	$(BIN)/recallbench stores $(ARGS)

compare: stores ## Old name of make stores

tradeoff: $(STAMP) ## Recall@10 vs exact against p50/p99 and QPS per store and index setting (configs/tradeoff.yaml) -> reports/tradeoff/
	$(BIN)/recallbench tradeoff $(ARGS)

regress: $(STAMP) ## Run the CI-sized experiment and gate it against reports/baseline/<dataset>/ -> reports/regress/summary.md
	$(BIN)/recallbench regress $(ARGS)

baseline: $(STAMP) ## Rewrite the committed regression baselines in reports/baseline/ (deliberate: review and commit)
	$(BIN)/recallbench regress --write-baseline $(ARGS)

harden: $(STAMP) ## Hardening suite: bad input, planted secrets, store faults, short load; prints the figures
	$(BIN)/recallbench harden $(ARGS)

load: $(STAMP) ## 8 threads x 1,000 queries on every local store and the real seekdb/chroma/PostgreSQL servers
	$(BIN)/recallbench load $(ARGS)

bench: $(STAMP) ## Performance ratios P1-P7, PL (store layout), PE (embedding memory) and PC (split-half coverage of the printed intervals) with targets and PASS/FAIL, measured in one run
	$(BIN)/recallbench bench $(ARGS)

ray: $(STAMP) ## A LoCoMo multirun on Ray: starts a local head on loopback when none runs, stops what it started
	$(BIN)/python -m pip install -q -e '.[ray]'
	$(BIN)/recallbench ray $(ARGS)

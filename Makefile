# Two commands for readers and CI (see README.md):
#   make book   set up .venv, install everything, build the website into _build/html
#   make test   set up .venv, install everything, run the tests and nbval over book/
# PYTHON picks the interpreter for the virtual environment (3.11, 3.12 or 3.13).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
NOTEBOOKS := $(wildcard book/*.ipynb)

.PHONY: book test lint notebooks profile-check colab-wheel colab-test colab-check rehearsal-check gpu-check gpu-check-quick gpu-here gpu-check-tests gpu-check-notebooks gpu-check-fp16 clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -r requirements.txt
	# d2l 1.0.3 pins numpy 1.23.5 and more, which fail on Python 3.12: no deps;
	# its runtime imports are in requirements.txt.
	$(BIN)/python -m pip install --no-deps d2l==1.0.3
	$(BIN)/python -m pip install --no-deps --no-build-isolation -e .
	touch $@

book: $(VENV)/.installed
	$(BIN)/jupyter-book build . -W -n --keep-going

# A cell's limit is a hang detector, not a speed target: on 2 cores beside two busy
# processes, chapter 2's split bench and chapter 7's study cell passed 600 s (1800 s,
# as .ci/execute_notebooks.py allows a cell). TEST_WORKERS pytest-xdist workers (one per
# core by default) share the test files and the chapters, a whole file or chapter each
# (nbval's cells run in order in one kernel); each worker owns its slice of the cores
# (tests/conftest.py), so the chapters' outputs are those of a smaller machine, which
# nbval accepts (thread counts change no checked output). Alone, the suite leaves a core
# idle most of the time: its launched processes start, connect and wait.
CORES := $(shell $(PYTHON) -c "import os; print(len(getattr(os, 'sched_getaffinity', lambda _: range(os.cpu_count() or 1))(0)))")
TEST_WORKERS ?= $(CORES)
test: $(VENV)/.installed
	BOOK_PROFILE=ci $(BIN)/python -m pytest -p no:cacheprovider --durations=40 \
	  -n $(TEST_WORKERS) --dist loadfile book tests \
	  --nbval --nbval-current-env --nbval-cell-timeout=1800 \
	  --nbval-sanitize-with tests/nbval_sanitize.cfg

# Lint and format check (ruff, configured in pyproject.toml; .ci/run runs it first).
# `$(BIN)/ruff format . && $(BIN)/ruff check --fix .` fixes most of what it reports;
# a reformatted function shown in a chapter means re-running that chapter.
lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# For authors: re-run every chapter with the ci profile and commit the outputs.
notebooks: $(VENV)/.installed
	BOOK_PROFILE=ci $(BIN)/jupyter-execute --inplace --timeout=1800 $(NOTEBOOKS)

# Every chapter executed under a profile a reader uses (cpu by default: every reader
# without a GPU) into _build/<profile>-check/, the committed ci outputs left alone.
# Fails on a cell error, on anything written to stderr (warnings, progress bars),
# on files left in a notebook's temporary directory, and on a self-check whose
# verdict differs from the committed run. Without a network the offline sample
# stands in for Fashion-MNIST, as it does for readers. .ci/run runs it after the tests.
PROFILE ?= cpu
CHECK_JOBS ?= $(CORES)
profile-check: $(VENV)/.installed
	BOOK_PROFILE=$(PROFILE) $(BIN)/python .ci/execute_notebooks.py --same-checks --jobs $(CHECK_JOBS) _build/$(PROFILE)-check $(NOTEBOOKS)

# For a machine with one or more CUDA GPUs (not run by CI): the whole test suite,
# gpu and multigpu tests included, and every chapter under the gpu profile into
# _build/gpu-check/ (the committed ci outputs are left alone), failing on any
# cell error or warning. BOOK_DATA=synthetic (the default here) needs no
# network; pass BOOK_DATA=fashion-mnist to use the real data. On a big machine
# `make -j2 gpu-check GPU_CHECK_JOBS=4` runs the tests beside the chapters, four
# chapters at a time; each prints a line per finished cell. gpu-check-fp16 runs
# the chapters as a T4 (Colab) runs them. On an H200 the tests and chapters took
# longer than 10 minutes together (the gpu profile trains ResNet-18 for 10 epochs).
# On a short lease, GPU_CHECK_DATA=mnist-sample (5,000 real digits, offline) keeps the
# profile's models, epochs and device counts and cuts each epoch: on one H200 (16 cores,
# GPU_CHECK_JOBS=4) chapters 3, 8 and 9 took 75, 222 and 229 s in fp16 (2026-11-28).
GPU_CHECK_DATA ?= synthetic
GPU_CHECK_JOBS ?= 1
gpu-check: gpu-check-tests gpu-check-notebooks

gpu-here: $(VENV)/.installed
	$(BIN)/python -c "import sys, torch; n = torch.cuda.device_count(); print(f'{n} CUDA GPU(s)'); sys.exit(0 if n else 'make gpu-check needs a CUDA GPU')"

gpu-check-tests: gpu-here
	BOOK_PROFILE=ci $(BIN)/python -m pytest -p no:cacheprovider tests -ra

gpu-check-notebooks: gpu-here
	BOOK_PROFILE=gpu BOOK_DATA=$(GPU_CHECK_DATA) $(BIN)/python .ci/execute_notebooks.py --jobs $(GPU_CHECK_JOBS) --progress _build/gpu-check $(NOTEBOOKS)

# What fits a short GPU lease (one H100, 16 cores; the full gpu-check does not fit in
# 15 minutes): the test suite under pytest-xdist, each of GPU_QUICK_WORKERS workers on its
# own slice of the cores (tests/conftest.py), every test named as it ends (-v: a run cut
# off by a time limit still says what failed), then every chapter under the ci profile on
# the GPU, four at a time, each self-check as in the committed (CPU) run. Both always run.
GPU_QUICK_WORKERS ?= 8
gpu-check-quick: gpu-here
	mkdir -p _build
	BOOK_PROFILE=ci $(BIN)/python -m pytest -p no:cacheprovider -v -rfE -n $(GPU_QUICK_WORKERS) \
	  --dist loadfile tests > _build/gpu-check-quick-tests.log 2>&1; tests=$$?; \
	  grep -E "(FAILED|ERROR) tests/" _build/gpu-check-quick-tests.log | sort -u; tail -1 _build/gpu-check-quick-tests.log; \
	  BOOK_PROFILE=ci $(BIN)/python .ci/execute_notebooks.py --same-checks --jobs 4 --progress \
	  _build/gpu-check-ci $(NOTEBOOKS); chapters=$$?; \
	  echo "tests exit $$tests, chapters exit $$chapters"; test $$tests = 0 -a $$chapters = 0

# The gpu profile as it runs on Colab's T4 (fp16 with a loss scaler, no bf16),
# on whatever GPU this is.
gpu-check-fp16: gpu-here
	BOOK_PROFILE=gpu BOOK_PRECISION=fp16 BOOK_DATA=$(GPU_CHECK_DATA) $(BIN)/python .ci/execute_notebooks.py --jobs $(GPU_CHECK_JOBS) --progress _build/gpu-check-fp16 $(NOTEBOOKS)

# CI's Colab leg: the runtime a Colab reader has (Python 3.13, torch 2.11.0,
# torchvision 0.26.0: .ci/colab-requirements.txt), companion installed from a
# wheel built from this checkout, with its dependencies and Colab's torch kept,
# as each chapter's first cell installs it (never -e: an installed wheel holds
# only what the package ships). colab-test runs the tests of the code that
# differs between torch versions (chapter 9's collectives, the study that runs
# them, the wheel) against that wheel from outside the checkout; colab-check
# executes every chapter under the cpu profile (a Colab reader without a GPU)
# as profile-check does (for authors: CI runs rehearsal-check instead).
# pyenv's Python 3.13 where there is one (CI's machines have it, not as the global one)
COLAB_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13) python3.13)
COLAB_VENV ?= .venv-colab
COLAB := $(abspath $(COLAB_VENV))/bin
COLAB_WHEEL := _build/colab-wheel
COLAB_TESTS := tests/core/test_compat.py tests/sharding tests/slowlinks tests/study tests/elastic/test_package_data.py tests/exercises tests/internals/test_compiled.py tests/samebits

$(COLAB_VENV)/.installed: .ci/colab-requirements.txt
	rm -rf $(COLAB_VENV)
	$(COLAB_PYTHON) -m venv $(COLAB_VENV)
	$(COLAB)/python -m pip install --upgrade pip
	$(COLAB)/python -m pip install -r .ci/colab-requirements.txt
	touch $@

colab-wheel: $(COLAB_VENV)/.installed
	rm -rf build $(COLAB_WHEEL)
	$(COLAB)/python -m pip wheel --no-deps -w $(COLAB_WHEEL) .
	rm -rf build
	$(COLAB)/python -m pip uninstall -y companion
	$(COLAB)/python -m pip install $(COLAB_WHEEL)/companion-*.whl
	cd book && $(COLAB)/python -c "import sys, torch, companion; \
	  print(f'Colab leg: Python {sys.version.split()[0]}, torch {torch.__version__}, companion from {companion.__file__}'); \
	  sys.exit(0 if 'site-packages' in companion.__file__ else 'companion is not the installed wheel')"

colab-test: colab-wheel
	scratch=$$(mktemp -d) && cd $$scratch && COMPANION_FROM_WHEEL=1 BOOK_PROFILE=ci \
	  $(COLAB)/python -m pytest -p no:cacheprovider --import-mode=append -n $(TEST_WORKERS) \
	  --dist loadfile --rootdir=$(CURDIR) --durations=5 $(addprefix $(CURDIR)/,$(COLAB_TESTS)); \
	  status=$$?; cd $(CURDIR); rm -rf $$scratch; exit $$status

colab-check: colab-wheel
	BOOK_PROFILE=cpu $(COLAB)/python .ci/execute_notebooks.py --same-checks --jobs $(CHECK_JOBS) _build/cpu-check $(NOTEBOOKS)

# The commonest reader, Colab with one GPU (a T4), rehearsed without a GPU on Colab's
# runtime: the rehearsal profile takes the gpu profile's one-GPU device counts (1 and a
# virtual 2) and its process plan (every process run on the CPU under gloo, with LeNet),
# and fp16 with a loss scaler as on a T4, at the ci profile's sizes (2 epochs: fp16
# autocast on a CPU is slower than fp32). What needs CUDA itself (nccl, CUDA streams,
# cells that need 2 GPUs) is left to make gpu-check-fp16 on a real GPU.
rehearsal-check: colab-wheel
	BOOK_PROFILE=rehearsal $(COLAB)/python .ci/execute_notebooks.py --same-checks --jobs $(CHECK_JOBS) _build/rehearsal-check $(NOTEBOOKS)

clean:
	rm -rf _build build

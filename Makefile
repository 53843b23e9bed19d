# Two commands: `make demo` and `make test`. Both install what they need into .venv.
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

test: $(STAMP)
	$(VPY) -m pytest -q tests

clean:
	rm -rf runs/demo submissions/demo.csv
